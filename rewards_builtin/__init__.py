"""Built-in rewards of agentfly-cli, registered through the ``agentfly`` entry points.

The reward modules are imported when the hook runs, so loading the plugin stays cheap.
"""

from agentfly_cli.hookspecs import hookimpl
from agentfly_cli.lazy_exports import lazy_exports

_EXPORTS = {
    "exact_match": "rewards_builtin.text",
    "math_equal": "rewards_builtin.text",
    "qa_em": "rewards_builtin.text",
    "qa_f1": "rewards_builtin.text",
    "scienceworld_score": "rewards_builtin.scienceworld",
    "textworld_score": "rewards_builtin.textworld",
    "chess_solved": "rewards_builtin.chess_puzzles",
    "llm_judge": "rewards_builtin.judge",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(globals(), _EXPORTS)


@hookimpl
def register_rewards(register):
    from rewards_builtin.chess_puzzles import chess_solved
    from rewards_builtin.judge import llm_judge
    from rewards_builtin.scienceworld import scienceworld_score
    from rewards_builtin.text import exact_match, math_equal, qa_em, qa_f1
    from rewards_builtin.textworld import textworld_score

    for component in (exact_match, math_equal, qa_em, qa_f1):
        register(component)
    register(scienceworld_score)
    register(textworld_score)
    register(chess_solved)
    register(llm_judge)
