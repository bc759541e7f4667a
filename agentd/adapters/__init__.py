"""Channel adapters: chat networks bridged to a running agentd through :mod:`agentd.client`.

:class:`Adapter` holds what every network shares (mapping, posting, following,
splitting, delivering once, a notice for every refused post); :mod:`agentd.adapters.irc`
and :mod:`agentd.adapters.matrix` (the ``matrix`` extra: it imports mautrix) are the networks.
"""

from agentd.adapters.base import Adapter, Inbound, Reply, run_adapter
from agentd.adapters.split import split_text

__all__ = ["Adapter", "Inbound", "Reply", "run_adapter", "split_text"]
