"""Files agentd ships (:mod:`~agentd.files.shipped`: the annotated ``agentd.toml`` and the example
personas) and files it derives from installed ones and keeps between runs (:mod:`~agentd.files.cache`)."""
