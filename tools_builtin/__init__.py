"""Built-in tools of agentfly-cli, registered through the ``agentfly`` entry points.

The tool modules are imported when the hook runs, so loading the plugin (``agentfly --help``)
stays cheap.
"""

from agentfly_cli.hookspecs import hookimpl
from agentfly_cli.lazy_exports import lazy_exports

_EXPORTS = {
    "answer": "tools_builtin.answer",
    "calculator": "tools_builtin.calculator",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(globals(), _EXPORTS)


@hookimpl
def register_tools(register):
    from tools_builtin.answer import answer
    from tools_builtin.calculator import calculator

    register(calculator)
    register(answer)
