"""The verifiers bridge: any verifiers environment as a recipe (``verifiers:ENV_ID``), run in
its own venv as an agent program against the gateway, its rubric as the reward. The user's
torch/transformers are never touched: verifiers lives in ``.venv-verifiers-0.3`` /
``.venv-verifiers-0.4`` (``make install-verifiers``). See docs/bridges/verifiers.md.
"""

from __future__ import annotations

from typing import Any

from agentfly_cli.plugin_host.hookspecs import hookimpl
from agentfly_cli.plugin_host.registry import RecipeFamily

#: the options ``--set verifiers.KEY=VALUE`` takes
OPTIONS = {
    "api": "which verifiers venv runs the env: 0.3 (default) or 0.4",
    "size": "dataset rows taken as tasks (default 200)",
    "harness": "0.4 only: the harness id (default the taskset's own, else null, the chat loop)",
}


def build(param: str | None, options: Any) -> dict[str, Any]:
    from bridges_builtin.verifiers_recipe import build as build_recipe

    return build_recipe(param, options)


@hookimpl
def register_recipes(register):
    register(
        "verifiers",
        RecipeFamily(build=build, param="ENV_ID", options=OPTIONS),
        "a verifiers environment installed in its venv, run as an agent program, its rubric "
        "as the reward; needs make install-verifiers",
    )


@hookimpl
def register_rewards(register):
    from bridges_builtin.verifiers_reward import verifiers_rubric

    register(verifiers_rubric)
