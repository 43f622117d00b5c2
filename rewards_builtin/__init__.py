"""Built-in rewards of agentfly-cli, registered through the ``agentfly`` entry points."""

from agentfly_cli.hookspecs import hookimpl
from rewards_builtin.text import exact_match, math_equal, qa_em, qa_f1

__all__ = ["exact_match", "math_equal", "qa_em", "qa_f1"]


@hookimpl
def register_rewards(register):
    for component in (exact_match, math_equal, qa_em, qa_f1):
        register(component)
