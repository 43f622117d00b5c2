"""Write the packaged arithmetic datasets (deterministic).

- ``arithmetic.jsonl`` (calculator-json recipe): 2-digit +, -, x by one digit, and (a + b) * c.
- ``calculator.jsonl`` (calculator recipe, the training demo): tasks that SmolLM2-135M-Instruct
  cannot do in its head (1.6% correct without a tool) but can with the calculator: 2-digit
  addition, subtraction and multiplication, and 3-digit plus 2-digit addition.

Run: python scripts/make_arithmetic_data.py
"""

import json
import random
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "agentfly_cli" / "recipes" / "data"


def add_or_sub(kind: str, a: int, b: int) -> tuple[str, int]:
    """An addition, or a subtraction with a non-negative result."""
    if kind == "add":
        return f"What is {a} + {b}?", a + b
    a, b = max(a, b), min(a, b)
    return f"What is {a} - {b}?", a - b


def arithmetic_rows(count: int = 256, seed: int = 1234):
    rng = random.Random(seed)
    for i in range(count):
        kind = ("add", "sub", "mul", "two_step")[i % 4]
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(2, 9)
        if kind == "mul":
            question, value = f"What is {a} * {c}?", a * c
        elif kind == "two_step":
            question, value = f"What is ({a} + {b}) * {c}?", (a + b) * c
        else:
            question, value = add_or_sub(kind, a, b)
        yield {"id": f"arith-{i:03d}", "question": question, "answer": str(value), "kind": kind}


def calculator_rows(count: int = 512, seed: int = 2024):
    rng = random.Random(seed)
    for i in range(count):
        kind = ("add", "sub", "mul", "add3")[i % 4]
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if kind == "mul":
            question, value = f"What is {a} * {b}?", a * b
        elif kind == "add3":
            question, value = add_or_sub("add", rng.randint(100, 999), b)
        else:
            question, value = add_or_sub(kind, a, b)
        yield {"id": f"calc-{i:03d}", "question": question, "answer": str(value), "kind": kind}


def write(name: str, rows) -> None:
    path = DATA / name
    with open(path, "w") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    DATA.mkdir(parents=True, exist_ok=True)
    write("arithmetic.jsonl", arithmetic_rows())
    write("calculator.jsonl", calculator_rows())
