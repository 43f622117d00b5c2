"""A calculator agent written with the official OpenAI SDK, and nothing of agentfly.

It keeps its own conversation, calls the model through whatever endpoint it is given, runs its
own tool (a tiny arithmetic evaluator) and returns its final answer. Pointed at
`agentfly serve`, or trained with `agentfly train examples/openai_agent/recipe.yaml`, every
request it makes is recorded token-exactly (see docs/serve.md).
"""

from __future__ import annotations

import ast
import operator
import re

from openai import OpenAI

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


def calculate(expression: str) -> str:
    """Evaluate + - * / on numbers; anything else is an error message for the model."""

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


def agent(task: dict, base_url: str, max_turns: int = 3) -> str | None:
    """Answer ``task["question"]``; the final answer, or None when it never gave one."""
    client = OpenAI(base_url=base_url, api_key="unused")
    messages = [{"role": "system", "content": SYSTEM}, *EXAMPLE,
                {"role": "user", "content": task["question"]}]  # fmt: skip
    for _ in range(max_turns):
        reply = client.chat.completions.create(
            model="policy", messages=messages, max_tokens=24, temperature=1.0, stop=["\n"]
        )
        text = reply.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
        if answer := re.search(r"ANSWER:\s*(.+)", text):
            return answer.group(1).strip()
        if calc := re.search(r"CALC:\s*(.+)", text):
            messages.append({"role": "user", "content": f"RESULT: {calculate(calc.group(1))}"})
        else:
            messages.append({"role": "user", "content": "Write CALC: or ANSWER: on one line."})
    return None
