"""An agent that compacts its context, written with the official OpenAI SDK and nothing of
agentfly.

It works a chain of arithmetic steps one calculator call at a time. Past a budget of model
turns in one context it asks the model to summarise where it stands (a line starting with
``SUMMARY:``), drops its history, and goes on in a fresh conversation that holds only the
task and that summary, as coding agents do when their context fills up. Trained with
`agentfly train examples/compaction_agent/recipe.yaml`, each episode becomes two or more
segments (see docs/training.md, "Branches as training data"): the summary is sampled, and
so trained, as the last turn of one segment, and is the prompt the next one continues from.
"""

from __future__ import annotations

import ast
import operator
import re

from openai import OpenAI

SYSTEM = (
    "Work one step at a time. Write CALC: <expression> to use the calculator; you get "
    "RESULT: <number>. When every step is done, write ANSWER: <number>."
)
SUMMARISE = (
    "Your notes are full. On one line, write SUMMARY: then the value you have now and the "
    "steps still to do."
)
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


def fresh_context(question: str, summary: str | None) -> list[dict]:
    """A new conversation: the task, and the summary of the work before it (if any)."""
    task = question if summary is None else f"{question}\nYour notes so far: {summary}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]


def agent(task: dict, base_url: str, budget: int = 2, max_turns: int = 8) -> str | None:
    """Answer ``task["question"]``, compacting after every ``budget`` model turns of one
    context; the final answer, or None when it never gave one in ``max_turns`` turns (the
    summaries count as turns)."""
    client = OpenAI(base_url=base_url, api_key="unused")

    def ask(messages: list[dict], max_tokens: int = 24) -> str:
        reply = client.chat.completions.create(
            model="policy", messages=messages, max_tokens=max_tokens, temperature=1.0, stop=["\n"]
        )
        return reply.choices[0].message.content or ""

    messages = fresh_context(task["question"], None)
    in_context = 0  # model turns in this context
    for _ in range(max_turns):
        if in_context >= budget:  # compact: the model writes what the next context keeps
            messages.append({"role": "user", "content": SUMMARISE})
            summary = ask(messages, max_tokens=48)
            notes = re.search(r"SUMMARY:\s*(.+)", summary)
            messages = fresh_context(task["question"], (notes.group(1) if notes else summary))
            in_context = 0
            continue
        text = ask(messages)
        in_context += 1
        messages.append({"role": "assistant", "content": text})
        if answer := re.search(r"ANSWER:\s*(.+)", text):
            return answer.group(1).strip()
        if calc := re.search(r"CALC:\s*(.+)", text):
            messages.append({"role": "user", "content": f"RESULT: {calculate(calc.group(1))}"})
        else:
            messages.append({"role": "user", "content": "Write CALC: or ANSWER: on one line."})
    return None
