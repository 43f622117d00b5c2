"""The reasoning_gym bridge: any reasoning-gym generator, or a weighted mix, as a recipe
(``agentfly train reasoning_gym:chain_sum``), scored by the generator's own ``score_answer``
(the reward ``reasoning_gym_score``), its curriculum levels as ``trainer.curriculum``.

The library is the optional extra ``pip install 'agentfly-cli[reasoning-gym]'``, imported on
first use; without it the recipe is listed and using it is one line naming that command. See
docs/bridges/reasoning_gym.md.
"""

from __future__ import annotations

from typing import Any

from agentfly_cli.plugin_host.hookspecs import hookimpl
from agentfly_cli.plugin_host.registry import RecipeFamily

#: the options ``--set reasoning_gym.KEY=VALUE`` takes (here, so that listing the recipe
#: imports nothing more)
OPTIONS = {
    "size": "tasks in all (default 500), shared by the generators by weight, then by level",
    "seed": "seeds every generator (default 0): the same seed, the same tasks",
    "levels": "curriculum levels per generator, easiest first (default 3; 0: the generator's "
    "default settings, no curriculum)",
    "config": "the generator's own settings over each level's (a mix: {NAME: {...}}), e.g. "
    "{max_terms: 3}",
}


def build(param: str | None, options: Any) -> dict[str, Any]:
    from bridges_builtin.rg_recipe import build as build_recipe

    return build_recipe(param, options)


@hookimpl
def register_recipes(register):
    register(
        "reasoning_gym",
        RecipeFamily(build=build, param="NAME", options=OPTIONS, example="chain_sum"),
        "any reasoning-gym generator (chain_sum, ...) or mix (NAME=3+NAME), ANSWER: lines, "
        "scored by the generator; needs pip install 'agentfly-cli[reasoning-gym]'",
    )


@hookimpl
def register_rewards(register):
    from bridges_builtin.rg_reward import reasoning_gym_score

    register(reasoning_gym_score)
