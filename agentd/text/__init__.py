"""Text as agentd reads and writes it: the words of a text for lexical matching
(:mod:`~agentd.text.words`) and recalled text quoted on one line (:mod:`~agentd.text.quoting`)."""
