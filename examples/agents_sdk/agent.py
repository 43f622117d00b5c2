"""A calculator agent written with the OpenAI Agents SDK (`pip install openai-agents`), and
nothing of agentfly.

The SDK runs its own loop: it sends the conversation and the tool schemas to the endpoint, runs
the function tools named in the reply's ``tool_calls``, sends their results back as ``tool``
messages, and stops at ``answer``. Pointed at the gateway (`agentfly train
examples/agents_sdk/recipe.yaml`), every request is recorded token-exactly. SmolLM2-135M writes
no JSON tool calls, so the recipe has the gateway read its ``CALC:`` / ``ANSWER:`` lines as
calls of these two tools (``chat.parser: line``): the agent sees ordinary OpenAI tool calls.
"""

from __future__ import annotations

import ast
import operator

SYSTEM = (
    "Use the calculator: write CALC: <expression>. You get RESULT: <number>. "
    "Then write ANSWER: <number>."
)
EXAMPLE = [  # one worked example, as chat turns
    {"role": "user", "content": "What is 12 * 34?"},
    {"role": "assistant", "content": "CALC: 12*34"},
    {"role": "user", "content": "RESULT: 408"},
    {"role": "assistant", "content": "ANSWER: 408"},
]
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
             ast.Div: operator.truediv, ast.USub: operator.neg}  # fmt: skip


def evaluate(expression: str) -> str:
    """+ - * / on numbers; anything else is an error message for the model."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.operand))
        raise ValueError("only numbers and + - * /")

    try:
        result = value(ast.parse(expression.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError) as exc:
        return f"error: {exc}"
    return str(int(result)) if float(result).is_integer() else f"{result:.6g}"


def build_agent(base_url: str):
    """The SDK agent, its model served at ``base_url``."""
    import agents
    from openai import AsyncOpenAI

    @agents.function_tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression such as 12*34."""
        return evaluate(expression)

    @agents.function_tool
    def answer(answer: str) -> str:
        """Give the final answer."""
        return answer.strip()

    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    return agents.Agent(
        name="calculator",
        instructions=SYSTEM,
        tools=[calculator, answer],
        tool_use_behavior=agents.StopAtTools(stop_at_tool_names=["answer"]),
        model=agents.OpenAIChatCompletionsModel(model="policy", openai_client=client),
        model_settings=agents.ModelSettings(max_tokens=24),
    )


async def agent(task: dict, base_url: str, max_turns: int = 4) -> str | None:
    """Answer ``task["question"]``: the ``answer`` tool's argument, or None without one."""
    import agents

    agents.set_tracing_disabled(True)
    conversation = [*EXAMPLE, {"role": "user", "content": task["question"]}]
    try:
        result = await agents.Runner.run(build_agent(base_url), conversation, max_turns=max_turns)
    except agents.MaxTurnsExceeded:
        return None
    return result.final_output
