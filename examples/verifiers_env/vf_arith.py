"""A verifiers (classic API) environment written as a user would: 300 seeded sums and
products, the model answers with the number, the rubric scores the last number it wrote.

    AGENTFLY_VERIFIERS_PATH=examples/verifiers_env agentfly eval verifiers:vf-arith --n 2
"""

import random
import re

import verifiers as vf
from datasets import Dataset

SYSTEM = "Answer with the number only."


def questions(count: int = 300, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        a, b = rng.randint(2, 30), rng.randint(2, 30)
        op = rng.choice("+*")
        value = a + b if op == "+" else a * b
        rows.append({"question": f"What is {a} {op} {b}?", "answer": str(value)})
    return rows


def last_number(completion, answer, **_):
    text = completion[-1]["content"] if isinstance(completion, list) else completion
    numbers = re.findall(r"-?\d+", text or "")
    return 1.0 if numbers and numbers[-1] == answer else 0.0


def load_environment(**kwargs):
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(questions()),
        system_prompt=SYSTEM,
        rubric=vf.Rubric(funcs=[last_number]),
    )
