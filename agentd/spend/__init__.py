"""What the models cost: what they were used for (:mod:`~agentd.spend.usage`) and how much a persona
and a user may spend per day (:mod:`~agentd.spend.caps`)."""
