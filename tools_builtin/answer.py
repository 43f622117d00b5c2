"""The ``answer`` tool: the agent's final answer. Calling it ends the episode."""

from agentfly_cli.components.tools import tool


@tool(terminal=True)
def answer(answer: str) -> str:
    """Give the final answer to the task. Call this once, when you are sure.

    Args:
        answer: The final answer, as short as possible (for example just the number).
    """
    return answer.strip()
