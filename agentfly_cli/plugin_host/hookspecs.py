"""The plugin hooks of agentfly-cli.

A plugin is a module named by an entry point in the ``agentfly`` group. It implements any of
these hooks with the :data:`hookimpl` marker. Each ``register_*`` hook receives a ``register``
callback, so every component remembers which plugin gave it::

    from agentfly_cli import hookimpl, tool

    @tool
    def shout(text: str) -> str:
        '''Upper-case the text.'''
        return text.upper()

    @hookimpl
    def register_tools(register):
        register(shout)
"""

from __future__ import annotations

import pluggy

PROJECT_NAME = "agentfly"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def register_tools(register):
    """Register tools: ``register(tool_or_function, name=None)``."""


@hookspec
def register_rewards(register):
    """Register rewards: ``register(reward_or_function, name=None)``."""


@hookspec
def register_envs(register):
    """Register environments: ``register(EnvSpec(...))``."""


@hookspec
def register_recipes(register):
    """Register recipes: ``register(name, path_to_yaml_or_RecipeFamily, description="")``."""


@hookspec
def register_backends(register):
    """Register LLM backends: ``register(name, factory, description="")``."""


@hookspec
def register_train_backends(register):
    """Register train backends: ``register(name, factory, description="")``."""


@hookspec
def register_algorithms(register):
    """Register advantages or policy losses: ``register(kind, name, fn, description="")``."""


@hookspec
def register_parsers(register):
    """Register tool-call parsers: ``register(parser_class, name=None, description="")``."""


@hookspec
def register_commands(app):
    """Add commands to the ``agentfly`` Typer app: ``@app.command()`` or ``app.add_typer(...)``."""
