"""Built-in environments of agentfly-cli, registered through the ``agentfly`` entry points."""

from agentfly_cli.hookspecs import hookimpl
from envs_builtin.python_sandbox import PYTHON, python
from envs_builtin.scratchpad import SCRATCHPAD, notes_list, notes_read, notes_write

__all__ = ["PYTHON", "SCRATCHPAD", "notes_list", "notes_read", "notes_write", "python"]


@hookimpl
def register_envs(register):
    register(SCRATCHPAD)
    register(PYTHON)


@hookimpl
def register_tools(register):
    for component in (notes_write, notes_read, notes_list, python):
        register(component)
