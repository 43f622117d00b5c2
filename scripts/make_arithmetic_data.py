"""Write the calculator recipe's packaged dataset (deterministic).

Run: python scripts/make_arithmetic_data.py
"""

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "agentfly_cli" / "recipes" / "data" / "arithmetic.jsonl"


def rows(count: int = 256, seed: int = 1234):
    rng = random.Random(seed)
    for i in range(count):
        kind = ("add", "sub", "mul", "two_step")[i % 4]
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(2, 9)
        if kind == "add":
            question, value = f"What is {a} + {b}?", a + b
        elif kind == "sub":
            a, b = max(a, b), min(a, b)
            question, value = f"What is {a} - {b}?", a - b
        elif kind == "mul":
            question, value = f"What is {a} * {c}?", a * c
        else:
            question, value = f"What is ({a} + {b}) * {c}?", (a + b) * c
        yield {"id": f"arith-{i:03d}", "question": question, "answer": str(value), "kind": kind}


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w") as out:
        for row in rows():
            out.write(json.dumps(row) + "\n")
    print(f"wrote {OUT}")
