"""``python -m agentfly_cli`` runs the ``agentfly`` command."""

from agentfly_cli.cli.app import main

main()
