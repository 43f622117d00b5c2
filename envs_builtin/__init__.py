"""Built-in environments of agentfly-cli, registered through the ``agentfly`` entry points."""

from agentfly_cli.hookspecs import hookimpl
from envs_builtin.chess_env import CHESS, chess_board, chess_legal_moves, chess_move
from envs_builtin.python_sandbox import PYTHON, python
from envs_builtin.scienceworld_env import (
    SCIENCEWORLD,
    sw_act,
    sw_actions,
    sw_inventory,
    sw_look,
    sw_task,
)
from envs_builtin.scratchpad import SCRATCHPAD, notes_list, notes_read, notes_write
from envs_builtin.search_env import SEARCH, search
from envs_builtin.textworld_env import TEXTWORLD, tw_act, tw_commands, tw_inventory, tw_look

__all__ = ["PYTHON", "SCRATCHPAD", "notes_list", "notes_read", "notes_write", "python"]


@hookimpl
def register_envs(register):
    register(SCRATCHPAD)
    register(PYTHON)
    register(SCIENCEWORLD)
    register(TEXTWORLD)
    register(CHESS)
    register(SEARCH)


@hookimpl
def register_tools(register):
    for component in (notes_write, notes_read, notes_list, python):
        register(component)
    for component in (sw_act, sw_look, sw_inventory, sw_task, sw_actions):
        register(component)
    for component in (tw_act, tw_look, tw_inventory, tw_commands):
        register(component)
    for component in (chess_move, chess_board, chess_legal_moves):
        register(component)
    register(search)
