"""Built-in rewards of agentfly-cli, registered through the ``agentfly`` entry points."""

from agentfly_cli.hookspecs import hookimpl
from rewards_builtin.chess_puzzles import chess_solved
from rewards_builtin.judge import llm_judge
from rewards_builtin.scienceworld import scienceworld_score
from rewards_builtin.text import exact_match, math_equal, qa_em, qa_f1
from rewards_builtin.textworld import textworld_score

__all__ = ["exact_match", "math_equal", "qa_em", "qa_f1"]


@hookimpl
def register_rewards(register):
    for component in (exact_match, math_equal, qa_em, qa_f1):
        register(component)
    register(scienceworld_score)
    register(textworld_score)
    register(chess_solved)
    register(llm_judge)
