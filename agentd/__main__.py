"""``python -m agentd`` runs the CLI."""

from agentd.cli.main import main

main()
