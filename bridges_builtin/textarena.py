"""The textarena bridge: textarena's single-player games as recipes
(``agentfly train textarena:GuessTheNumber-v0``), played in pooled envs that speak first.

Each task is one seeded game; the game's opening text is the first prompt, the model moves with
``MOVE: <move>`` lines (the ``textarena_move`` tool), and the game's own reward at its end is
the episode's (the ``env_reward`` reward reads it from the reward channel). Concurrent games
stay seeded: see :mod:`bridges_builtin.textarena_env`.

The library is the optional extra ``pip install 'agentfly-cli[textarena]'``, imported on first
use; without it the recipes are listed and using one is one line naming that command. See
docs/bridges/textarena.md.
"""

from __future__ import annotations

from typing import Any

from agentfly_cli.plugin_host.hookspecs import hookimpl
from agentfly_cli.plugin_host.registry import RecipeFamily

#: the options ``--set textarena.KEY=VALUE`` takes
OPTIONS = {
    "size": "games in all (default 200), one seed each",
    "seed": "the first game's seed (default 0); game i has seed + i",
}


def build(param: str | None, options: Any) -> dict[str, Any]:
    from bridges_builtin.textarena_recipe import build as build_recipe

    return build_recipe(param, options)


@hookimpl
def register_recipes(register):
    register(
        "textarena",
        RecipeFamily(build=build, param="GAME", options=OPTIONS),
        "a single-player textarena game (GuessTheNumber-v0, TowerOfHanoi-v0, ...): the game "
        "speaks first, MOVE: lines, the game's own reward; needs pip install "
        "'agentfly-cli[textarena]'",
    )


@hookimpl
def register_envs(register):
    from bridges_builtin.textarena_env import TEXTARENA

    register(TEXTARENA)


@hookimpl
def register_tools(register):
    from bridges_builtin.textarena_env import textarena_move

    register(textarena_move)
