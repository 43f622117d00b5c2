"""Built-in environments of agentfly-cli, registered through the ``agentfly`` entry points.

The env modules are imported when a hook runs, so loading the plugin stays cheap.
"""

from agentfly_cli.hookspecs import hookimpl
from agentfly_cli.lazy_exports import lazy_exports

_EXPORTS = {
    "CHESS": "envs_builtin.chess_env",
    "chess_board": "envs_builtin.chess_env",
    "chess_legal_moves": "envs_builtin.chess_env",
    "chess_move": "envs_builtin.chess_env",
    "PYTHON": "envs_builtin.python_sandbox",
    "python": "envs_builtin.python_sandbox",
    "SCIENCEWORLD": "envs_builtin.scienceworld_env",
    "sw_act": "envs_builtin.scienceworld_env",
    "sw_actions": "envs_builtin.scienceworld_env",
    "sw_inventory": "envs_builtin.scienceworld_env",
    "sw_look": "envs_builtin.scienceworld_env",
    "sw_task": "envs_builtin.scienceworld_env",
    "SCRATCHPAD": "envs_builtin.scratchpad",
    "notes_list": "envs_builtin.scratchpad",
    "notes_read": "envs_builtin.scratchpad",
    "notes_write": "envs_builtin.scratchpad",
    "SEARCH": "envs_builtin.search_env",
    "search": "envs_builtin.search_env",
    "TEXTWORLD": "envs_builtin.textworld_env",
    "tw_act": "envs_builtin.textworld_env",
    "tw_commands": "envs_builtin.textworld_env",
    "tw_inventory": "envs_builtin.textworld_env",
    "tw_look": "envs_builtin.textworld_env",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(globals(), _EXPORTS)


@hookimpl
def register_envs(register):
    from envs_builtin.chess_env import CHESS
    from envs_builtin.python_sandbox import PYTHON
    from envs_builtin.scienceworld_env import SCIENCEWORLD
    from envs_builtin.scratchpad import SCRATCHPAD
    from envs_builtin.search_env import SEARCH
    from envs_builtin.textworld_env import TEXTWORLD

    for spec in (SCRATCHPAD, PYTHON, SCIENCEWORLD, TEXTWORLD, CHESS, SEARCH):
        register(spec)


@hookimpl
def register_tools(register):
    from envs_builtin import chess_env, python_sandbox, scienceworld_env, scratchpad, search_env
    from envs_builtin import textworld_env as tw

    sw = scienceworld_env
    for component in (
        scratchpad.notes_write,
        scratchpad.notes_read,
        scratchpad.notes_list,
        python_sandbox.python,
        sw.sw_act,
        sw.sw_look,
        sw.sw_inventory,
        sw.sw_task,
        sw.sw_actions,
        tw.tw_act,
        tw.tw_look,
        tw.tw_inventory,
        tw.tw_commands,
        chess_env.chess_move,
        chess_env.chess_board,
        chess_env.chess_legal_moves,
        search_env.search,
    ):
        register(component)
