"""The ``calculator`` tool: exact arithmetic without ``eval``."""

from agentfly_cli.components.tools import tool
from tools_builtin.safe_eval import evaluate, format_number


@tool(timeout=5.0)
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the number.

    Supports + - * / // % ** (^ also means power), parentheses, the constants pi, e and
    tau, and functions such as sqrt, log, sin, abs, round, min, max and factorial.

    Args:
        expression: The expression to evaluate, for example "2**10 + 3*7".
    """
    return format_number(evaluate(expression))
