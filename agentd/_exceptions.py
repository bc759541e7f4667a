"""agentd's exceptions.

Every error agentd raises on purpose derives from :class:`AgentdError`; third-party
errors are mapped once, at the module that owns the library, with
``raise ... from exc``::

    AgentdError
    ├── ConfigError              bad agentd.toml / persona file / env override
    ├── InvalidInput             a caller's value is wrong (field + reason)
    ├── NotFound                 an unknown persona, memory, message, channel
    ├── StoreError               the database cannot be opened or written
    │   └── EmbeddingMismatch    the store's vectors come from another model
    ├── EmbedderError            the embedding model failed or is missing
    │   └── EmbedderUnavailable  no embedder is configured
    ├── ContextOverflow          system prompt + current message exceed the window
    ├── LLMError                 the chat model failed (code says how)
    │   ├── LLMAuthError         credentials missing or rejected
    │   └── LLMTimeout           no answer within the timeout
    └── SkillError               a tool call failed
        ├── SkillInvalidInput    the model's arguments are wrong
        └── SkillExecutionFailed the tool could not do its work
"""

from __future__ import annotations


class AgentdError(Exception):
    """Base class of every error agentd raises on purpose."""

    code = "agentd_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(AgentdError):
    """A configuration file or override is invalid: names the file, key and reason."""

    code = "config_error"

    def __init__(self, source: str, key: str, reason: str) -> None:
        self.source = source
        self.key = key
        self.reason = reason
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {reason}")


class InvalidInput(AgentdError):
    """A caller-supplied value is invalid; ``field`` names it."""

    code = "invalid_input"

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class NotFound(AgentdError):
    """Something named by the caller does not exist."""

    code = "not_found"

    def __init__(self, kind: str, name: object, hint: str = "") -> None:
        self.kind = kind
        self.name = name
        msg = f"unknown {kind} {name!r}"
        super().__init__(f"{msg}; {hint}" if hint else msg)


class StoreError(AgentdError):
    """The database cannot be opened, migrated or written."""

    code = "store_error"


class EmbeddingMismatch(StoreError):
    """The store holds vectors of one embedding model and another is configured."""

    code = "embedding_mismatch"

    def __init__(self, stored: str, stored_dim: int, configured: str, configured_dim: int) -> None:
        self.stored = stored
        self.configured = configured
        super().__init__(
            f"the memory store was built with embedding model {stored!r} ({stored_dim}-d) "
            f"but {configured!r} ({configured_dim}-d) is configured; vectors of two models "
            "are never mixed: run `agentd memory reembed` to rebuild every vector with the "
            "configured model, or configure the stored one again"
        )


class EmbedderError(AgentdError):
    """The embedding model failed."""

    code = "embedder_error"


class EmbedderUnavailable(EmbedderError):
    """No embedding model is configured."""

    code = "embedder_unavailable"


class ContextOverflow(AgentdError):
    """The prompt's fixed parts (system prompt + current message) exceed the model's window."""

    code = "context_overflow"


class LLMError(AgentdError):
    """The chat model failed; ``code`` classifies it for the ``Error`` event."""

    code = "llm_error"


class LLMAuthError(LLMError):
    """The model's credentials are missing or were rejected."""

    code = "llm_auth"


class LLMTimeout(LLMError):
    """The model did not answer in time."""

    code = "llm_timeout"


class SkillError(AgentdError):
    """A skill (tool) call failed."""

    code = "skill_error"


class SkillInvalidInput(SkillError):
    """The arguments of a tool call are invalid (seed 002's ``InvalidInput``)."""

    code = "InvalidInput"


class SkillExecutionFailed(SkillError):
    """A tool could not do its work (seed 002's ``ExecutionFailed``)."""

    code = "ExecutionFailed"
