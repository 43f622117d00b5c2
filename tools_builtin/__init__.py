"""Built-in tools of agentfly-cli, registered through the ``agentfly`` entry points."""

from agentfly_cli.hookspecs import hookimpl
from tools_builtin.answer import answer
from tools_builtin.calculator import calculator

__all__ = ["answer", "calculator"]


@hookimpl
def register_tools(register):
    register(calculator)
    register(answer)
