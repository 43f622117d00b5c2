"""Built-in environments of agentfly-cli, registered through the ``agentfly`` entry points.

The env modules are imported when a hook runs, so loading the plugin stays cheap.
"""

from agentfly_cli.plugin_host.hookspecs import hookimpl
from agentfly_cli.plugin_host.lazy_exports import lazy_exports

#: each env spec and its module, in registration order
_ENVS = {
    "SCRATCHPAD": "envs_builtin.scratchpad",
    "PYTHON": "envs_builtin.python_sandbox",
    "SCIENCEWORLD": "envs_builtin.scienceworld_env",
    "TEXTWORLD": "envs_builtin.textworld_env",
    "CHESS": "envs_builtin.chess_env",
    "SEARCH": "envs_builtin.search_env",
}
#: each env tool and its module, in registration order
_TOOLS = {
    "notes_write": "envs_builtin.scratchpad",
    "notes_read": "envs_builtin.scratchpad",
    "notes_list": "envs_builtin.scratchpad",
    "python": "envs_builtin.python_sandbox",
    "sw_act": "envs_builtin.scienceworld_env",
    "sw_look": "envs_builtin.scienceworld_env",
    "sw_inventory": "envs_builtin.scienceworld_env",
    "sw_task": "envs_builtin.scienceworld_env",
    "sw_actions": "envs_builtin.scienceworld_env",
    "tw_act": "envs_builtin.textworld_env",
    "tw_look": "envs_builtin.textworld_env",
    "tw_inventory": "envs_builtin.textworld_env",
    "tw_commands": "envs_builtin.textworld_env",
    "chess_move": "envs_builtin.chess_env",
    "chess_replies": "envs_builtin.chess_env",
    "chess_board": "envs_builtin.chess_env",
    "chess_legal_moves": "envs_builtin.chess_env",
    "search": "envs_builtin.search_env",
}
_EXPORTS = {**_ENVS, **_TOOLS}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(globals(), _EXPORTS)


@hookimpl
def register_envs(register):
    for name in _ENVS:
        register(__getattr__(name))


@hookimpl
def register_tools(register):
    for name in _TOOLS:
        register(__getattr__(name))
