"""The actors: a supervisor and one actor per (persona, channel), and the dispatcher that runs turns on them."""
