"""Built-in rewards of agentfly-cli, registered through the ``agentfly`` entry points.

The reward modules are imported when the hook runs, so loading the plugin stays cheap.
"""

from agentfly_cli.plugin_host.hookspecs import hookimpl
from agentfly_cli.plugin_host.lazy_exports import lazy_exports

#: each reward and its module, in registration order
_EXPORTS = {
    "exact_match": "rewards_builtin.text",
    "math_equal": "rewards_builtin.text",
    "qa_em": "rewards_builtin.text",
    "qa_f1": "rewards_builtin.text",
    "search_recall": "rewards_builtin.search_qa",
    "scienceworld_score": "rewards_builtin.scienceworld",
    "textworld_score": "rewards_builtin.textworld",
    "chess_solved": "rewards_builtin.chess_puzzles",
    "llm_judge": "rewards_builtin.judge",
    "env_reward": "rewards_builtin.env_reward",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(globals(), _EXPORTS)


@hookimpl
def register_rewards(register):
    for name in _EXPORTS:
        register(__getattr__(name))
