"""The ``agentd`` command."""
