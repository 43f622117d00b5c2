"""Built-in tools of agentfly-cli, registered through the ``agentfly`` entry points.

The tool modules are imported when the hook runs, so loading the plugin (``agentfly --help``)
stays cheap.
"""

from agentfly_cli.plugin_host.hookspecs import hookimpl
from agentfly_cli.plugin_host.lazy_exports import lazy_exports

#: each tool and its module, in registration order
_EXPORTS = {
    "calculator": "tools_builtin.calculator",
    "answer": "tools_builtin.answer",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(globals(), _EXPORTS)


@hookimpl
def register_tools(register):
    for name in _EXPORTS:
        register(__getattr__(name))
