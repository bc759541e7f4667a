"""Everything that talks to litellm lives in this package; nothing else imports it.

litellm is imported lazily (it takes ~2 s) and always with
``LITELLM_LOCAL_MODEL_COST_MAP=True``, so importing it never touches the network, and
with ``LITELLM_MODE=PRODUCTION`` (unless set otherwise), so it never reads a ``.env`` file.
"""

from __future__ import annotations

import os
import threading
from types import ModuleType

_lock = threading.Lock()
_module: ModuleType | None = None


def offline_environment() -> None:
    """Set what litellm must see before it is imported (here or in a process started after this
    call): otherwise its import fetches the model map from the network, and loads a ``.env``
    file into the environment (in its default ``DEV`` mode: the working directory's for the
    workers' fork server, which runs as ``python -c``; else the first one above litellm's
    installed files). A key there would then reach a persona's ``api_key_env`` in one process
    and not in another, and one meant for something else could be sent to a model's server:
    agentd's keys come from the environment it was started with, as the README says."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ.setdefault("LITELLM_MODE", "PRODUCTION")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def litellm_module() -> ModuleType:
    """Import and configure litellm once (offline cost map, no telemetry, quiet)."""
    global _module
    with _lock:
        if _module is None:
            offline_environment()
            import logging

            import litellm

            # litellm logs advice (e.g. on custom pricing) as warnings; agentd reports its own errors.
            logging.getLogger("LiteLLM").setLevel(logging.ERROR)

            litellm.suppress_debug_info = True
            litellm.telemetry = False
            litellm.drop_params = True
            # litellm would fetch Llama/Cohere tokenizers from the Hugging Face hub at
            # run time; agentd never downloads, so every model counts with tiktoken.
            litellm.disable_hf_tokenizer_download = True
            _module = litellm
        return _module
