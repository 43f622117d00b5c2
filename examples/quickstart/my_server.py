"""An MCP server of your own (mcp 2.x SDK): its tools are agent tools through `mcp:` entries.

agentfly tools call 'mcp:python examples/quickstart/my_server.py#add' --args '{"a": 2, "b": 3}'
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("my-server", log_level="ERROR")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


if __name__ == "__main__":
    server.run()
