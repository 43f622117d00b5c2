"""Write the training tasks of the calculator recipe (deterministic).

Tasks that SmolLM2-135M-Instruct cannot do in its head (1.6% correct without a tool) but can
do with the calculator: 2-digit addition, subtraction and multiplication, and 3-digit plus
2-digit addition.

Run: python scripts/make_calculator_tasks.py
"""

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "agentfly_cli" / "recipes" / "data" / "calculator.jsonl"


def rows(count: int = 512, seed: int = 2024):
    rng = random.Random(seed)
    for i in range(count):
        kind = ("add", "sub", "mul", "add3")[i % 4]
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if kind == "add":
            question, value = f"What is {a} + {b}?", a + b
        elif kind == "sub":
            a, b = max(a, b), min(a, b)
            question, value = f"What is {a} - {b}?", a - b
        elif kind == "mul":
            question, value = f"What is {a} * {b}?", a * b
        else:
            a = rng.randint(100, 999)
            question, value = f"What is {a} + {b}?", a + b
        yield {"id": f"calc-{i:03d}", "question": question, "answer": str(value), "kind": kind}


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w") as out:
        for row in rows():
            out.write(json.dumps(row) + "\n")
    print(f"wrote {OUT}")
