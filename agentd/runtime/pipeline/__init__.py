"""The turn pipeline: prepare a turn, answer it (the model-and-tool rounds), store the reply and its record."""
