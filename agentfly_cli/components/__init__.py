"""Components: what a run is built from. ``@tool`` and ``@reward``, their schemas, their execution
under timeouts, and the MCP servers' tools.
"""
