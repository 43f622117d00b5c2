"""Built-in environments of agentfly-cli, registered through the ``agentfly`` entry points."""

from agentfly_cli.hookspecs import hookimpl
from envs_builtin.scratchpad import SCRATCHPAD, notes_list, notes_read, notes_write

__all__ = ["SCRATCHPAD", "notes_list", "notes_read", "notes_write"]


@hookimpl
def register_envs(register):
    register(SCRATCHPAD)


@hookimpl
def register_tools(register):
    for component in (notes_write, notes_read, notes_list):
        register(component)
