"""A verifiers (classic API) test ToolEnv: add two numbers with the Python tool ``add``; the
rubric scores 1 when the tool gave the answer and the model's last reply says it."""

import verifiers as vf
from datasets import Dataset

PAIRS = ((2, 3), (4, 5), (10, 7), (6, 6))


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


def _field(message, key):
    return message.get(key) if isinstance(message, dict) else getattr(message, key, None)


def load_environment(**kwargs):
    rows = [{"question": f"What is {a} + {b}? Use add.", "answer": str(a + b)} for a, b in PAIRS]

    def tool_and_answer(completion, answer, **_):
        tools = [_field(m, "content") for m in completion if _field(m, "role") == "tool"]
        said = [_field(m, "content") for m in completion if _field(m, "role") == "assistant"]
        used = answer in [str(t).strip() for t in tools]
        return 1.0 if used and said and (said[-1] or "").strip() == answer else 0.0

    rubric = vf.Rubric(funcs=[tool_and_answer])
    return vf.ToolEnv(dataset=Dataset.from_list(rows), tools=[add], rubric=rubric, max_turns=3)
