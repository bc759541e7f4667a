"""agentd: a daemon that hosts LLM personas with long-term memory.

The public surface is the ``agentd`` command and the HTTP API; the modules are
small and each owns one noun (config, store, memory, llm, runtime, api).
"""

__version__ = "0.2.0.dev0"

from agentd._exceptions import (  # noqa: E402  (the version must be importable without them)
    AgentdError,
    ConfigError,
    ContextOverflow,
    EmbedderBadOutput,
    EmbedderError,
    EmbedderNotConfigured,
    EmbedderTimeout,
    EmbeddingMismatch,
    ErrorCode,
    Forbidden,
    InvalidInput,
    LLMAuthError,
    LLMError,
    LLMTimeout,
    LLMUnreachable,
    NotFound,
    Overloaded,
    ShuttingDown,
    SkillError,
    SkillExecutionFailed,
    SkillInvalidInput,
    StoreError,
)

__all__ = [
    "AgentdError",
    "ConfigError",
    "ContextOverflow",
    "EmbedderError",
    "EmbedderBadOutput",
    "EmbedderNotConfigured",
    "EmbedderTimeout",
    "EmbeddingMismatch",
    "ErrorCode",
    "Forbidden",
    "InvalidInput",
    "LLMAuthError",
    "LLMError",
    "LLMTimeout",
    "LLMUnreachable",
    "NotFound",
    "Overloaded",
    "ShuttingDown",
    "SkillError",
    "SkillExecutionFailed",
    "SkillInvalidInput",
    "StoreError",
    "__version__",
]
