"""The bfcl bridge: BFCL's function-calling categories as recipes
(``agentfly train bfcl:simple_python``), each row bringing its own tools, scored by BFCL's own
AST checker (the reward ``bfcl_ast``); and its multi-turn categories
(``bfcl:multi_turn_base``), played on per-episode API instances (the env ``bfcl_api``) and
scored by BFCL's multi-turn checks (the reward ``bfcl_multi_turn``).

bfcl-eval's full install pulls 1.9 GB (torch, faiss, sentence-transformers) and pins numpy
1.26.4; the bridge needs only its data and checkers, so it is installed without its
dependencies: ``pip install --no-deps bfcl-eval==2026.3.23`` (``make install-bridges`` does).
Without it the recipes are listed and using one is one line naming that command. See
docs/bridges/bfcl.md.
"""

from __future__ import annotations

from typing import Any

from agentfly_cli.plugin_host.hookspecs import hookimpl
from agentfly_cli.plugin_host.registry import RecipeFamily


def build(param: str | None, options: Any) -> dict[str, Any]:
    from bridges_builtin.bfcl_recipe import build as build_recipe

    return build_recipe(param, options)


@hookimpl
def register_recipes(register):
    register(
        "bfcl",
        RecipeFamily(build=build, param="CATEGORY"),
        "a BFCL category: single-turn (simple_python, multiple, parallel, irrelevance, ...: "
        "each task's own tools, BFCL's AST checker) or multi-turn (multi_turn_base, "
        "_miss_func, _miss_param, _long_context: user turns, per-episode API state, BFCL's "
        "multi-turn checker); needs pip install --no-deps bfcl-eval==2026.3.23",
    )


@hookimpl
def register_rewards(register):
    from bridges_builtin.bfcl_reward import bfcl_ast, bfcl_multi_turn

    register(bfcl_ast)
    register(bfcl_multi_turn)


@hookimpl
def register_envs(register):
    from bridges_builtin.bfcl_api_env import BFCL_API

    register(BFCL_API)
