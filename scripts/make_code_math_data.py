"""Write the packaged word problems of the ``code_math`` recipe (deterministic, seeded).

Eleven kinds of arithmetic and algebra word problems, 28 of each: shopping totals, change, rates
(speed), work rates (two pipes), linear equations ("find x"), systems of two equations (ticket
sales, and "find x"), percentages (discount then tax), arithmetic and geometric series, fractions
of a whole, and a missing value from a mean. Answers are exact (computed with ``Fraction``) and
written as an integer, a terminating decimal (money, distances) or a fraction such as ``7/12``;
the ``math_equal`` reward (math-verify) also accepts equal forms (``0.5``, ``1/2``, ``2/4``).

Each row carries ``solution``: one line of Python that prints the answer, which the tests run
in the ``python`` sandbox (``PYTHON: <solution>``) to check every answer.

Writes ``agentfly_cli/recipes/data/code_math.jsonl``: ``id``, ``question``, ``answer``, ``kind``,
``solution``. Run: python scripts/make_code_math_data.py
"""

from __future__ import annotations

import json
import random
from fractions import Fraction
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "agentfly_cli" / "recipes" / "data"
SEED = 31415
PER_KIND = 28
F = "from fractions import Fraction as F; "

NAMES = [
    ("Maya", "she"), ("Omar", "he"), ("Lena", "she"), ("Tomas", "he"), ("Priya", "she"),
    ("Jonas", "he"), ("Aiko", "she"), ("Diego", "he"), ("Zara", "she"), ("Felix", "he"),
]  # fmt: skip
ITEMS = [
    ("notebook", "notebooks"), ("pen", "pens"), ("apple", "apples"), ("candle", "candles"),
    ("mug", "mugs"), ("sticker pack", "sticker packs"), ("loaf of bread", "loaves of bread"),
    ("bottle of juice", "bottles of juice"), ("plant pot", "plant pots"), ("scarf", "scarves"),
]  # fmt: skip
PRODUCTS = ["jacket", "lamp", "backpack", "pair of boots", "bicycle helmet", "desk chair"]
VEHICLES = [("cyclist", "rides"), ("train", "travels"), ("runner", "runs"), ("boat", "sails")]


def show(value: Fraction, decimal: bool = False) -> str:
    """An exact answer: an integer, a fraction ``p/q``, or with ``decimal`` a terminating
    decimal where there is one (money, distances)."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    if not decimal:
        return f"{value.numerator}/{value.denominator}"
    q = value.denominator
    while q % 2 == 0:
        q //= 2
    while q % 5 == 0:
        q //= 5
    if q == 1:  # terminates: print it exactly
        digits = 0
        while (value * 10**digits).denominator != 1:
            digits += 1
        sign = "-" if value < 0 else ""
        whole = abs(value) * 10**digits
        text = str(whole.numerator).rjust(digits + 1, "0")
        return f"{sign}{text[:-digits]}.{text[-digits:]}"
    return f"{value.numerator}/{value.denominator}"


def terms(*pairs: tuple[int, str]) -> str:
    """A linear expression such as ``3x - y + 4`` from (coefficient, variable) pairs."""
    text = ""
    for coefficient, variable in pairs:
        if coefficient == 0 and variable:
            continue
        size = "" if abs(coefficient) == 1 and variable else str(abs(coefficient))
        sign = (
            ("-" if coefficient < 0 else "") if not text else (" - " if coefficient < 0 else " + ")
        )
        text += f"{sign}{size}{variable}"
    return text or "0"


def cents(amount: int) -> str:
    return f"{amount // 100}.{amount % 100:02d}"


def shopping(rng):
    name, pronoun = rng.choice(NAMES)
    (one, many), (one2, many2) = rng.sample(ITEMS, 2)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    p, q = rng.randint(50, 1500), rng.randint(50, 1500)
    total = Fraction(a * p + b * q, 100)
    question = (
        f"{name} buys {a} {many} at ${cents(p)} each and {b} {many2} at ${cents(q)} each. "
        f"How much does {pronoun} spend in total, in dollars?"
    )
    return question, total, f"print(round({a}*{cents(p)} + {b}*{cents(q)}, 2))"


def change(rng):
    name, pronoun = rng.choice(NAMES)
    one, many = rng.choice(ITEMS)
    a, p = rng.randint(2, 6), rng.randint(75, 900)
    bill = next(b for b in (10, 20, 50, 100) if b * 100 > a * p)
    question = (
        f"{name} buys {a} {many} at ${cents(p)} each and pays with a ${bill} bill. How much "
        f"change does {pronoun} get, in dollars?"
    )
    return question, Fraction(bill * 100 - a * p, 100), f"print(round({bill} - {a}*{cents(p)}, 2))"


def speed(rng):
    who, verb = rng.choice(VEHICLES)
    t1, t2 = rng.choice([2, 3, 4, 5, 6]), rng.randint(2, 9)
    d = t1 * rng.randint(8, 60) + rng.choice([0, 0, 1, 2])
    question = (
        f"A {who} {verb} {d} km in {t1} hours. At the same speed, how many km does it cover "
        f"in {t2} hours?"
    )
    return question, Fraction(d * t2, t1), f"{F}print(F({d}, {t1}) * {t2})"


def pipes(rng):
    a, b = rng.sample(range(2, 13), 2)
    question = (
        f"One pipe fills a tank in {a} hours and another fills it in {b} hours. How many hours "
        "do they take to fill the tank together? Give an exact answer."
    )
    return question, Fraction(a * b, a + b), f"{F}print(1 / (F(1, {a}) + F(1, {b})))"


def linear(rng):
    while True:
        a, c = rng.randint(2, 9), rng.randint(-6, 9)
        b, d = rng.randint(-20, 20), rng.randint(-20, 30)
        if a != c and d != b and c != 0:
            break
    x = Fraction(d - b, a - c)
    return (
        f"Find x if {terms((a, 'x'), (b, ''))} = {terms((c, 'x'), (d, ''))}.",
        x,
        f"{F}print(F({d} - ({b}), {a} - ({c})))",
    )


def tickets(rng):
    adult, child = rng.randint(8, 20), rng.randint(3, 7)
    x, y = rng.randint(10, 90), rng.randint(10, 90)
    n, total = x + y, adult * x + child * y
    question = (
        f"A museum sells adult tickets for ${adult} and child tickets for ${child}. One day it "
        f"sold {n} tickets for ${total} in all. How many adult tickets did it sell?"
    )
    return question, Fraction(x), f"print(({total} - {child}*{n}) // ({adult} - {child}))"


def system(rng):
    while True:
        a, b, d, e = (rng.choice([i for i in range(-6, 8) if i]) for _ in range(4))
        if a * e - b * d:
            break
    c, f = rng.randint(-20, 20), rng.randint(-20, 20)
    x = Fraction(c * e - b * f, a * e - b * d)

    first, second = terms((a, "x"), (b, "y")), terms((d, "x"), (e, "y"))
    question = f"Solve the system {first} = {c} and {second} = {f}. What is x?"
    code = f"{F}print(F({c}*{e} - ({b})*({f}), {a}*{e} - ({b})*({d})))"
    return question, x, code


def percent(rng):
    product = rng.choice(PRODUCTS)
    price, off, tax = (
        rng.randint(20, 300),
        rng.choice([5, 10, 15, 20, 25, 30, 40]),
        rng.randint(3, 12),
    )
    value = Fraction(price * (100 - off) * (100 + tax), 10000)
    question = (
        f"A {product} costs ${price}. It is discounted by {off}%, and then a {tax}% sales tax is "
        "added to the discounted price. What is the final price in dollars? Do not round."
    )
    return question, value, f"{F}print(float({price} * F(100 - {off}, 100) * F(100 + {tax}, 100)))"


def series(rng):
    if rng.random() < 0.5:
        a, d, n = rng.randint(-5, 20), rng.randint(2, 9), rng.randint(8, 30)
        terms = ", ".join(str(a + i * d) for i in range(3))
        question = f"What is the sum of the first {n} terms of the sequence {terms}, ...?"
        return (
            question,
            Fraction(n * (2 * a + (n - 1) * d), 2),
            (f"print(sum({a} + {d}*i for i in range({n})))"),
        )
    a, (p, q), n = (
        rng.randint(2, 12) * 3,
        rng.choice([(1, 2), (1, 3), (2, 3), (3, 4)]),
        rng.randint(4, 8),
    )
    value = sum(Fraction(a) * Fraction(p, q) ** i for i in range(n))
    question = (
        f"A sequence starts at {a} and each term is {p}/{q} of the one before. What is the sum "
        f"of its first {n} terms? Give an exact answer."
    )
    return question, value, f"{F}print(sum({a} * F({p}, {q})**i for i in range({n})))"


def fractions(rng):
    (n1, p1), (n2, _) = rng.sample(NAMES, 2)
    while True:
        a, b = (
            Fraction(rng.randint(1, 4), rng.randint(3, 9)),
            Fraction(rng.randint(1, 4), rng.randint(3, 9)),
        )
        if 0 < a + b < 1 and a.denominator != b.denominator:
            break
    thing = rng.choice(["pizza", "cake", "pie", "bar of chocolate"])
    question = (
        f"{n1} eats {a} of a {thing} and {n2} eats {b} of it. What fraction of the {thing} is left?"
    )
    code = f"{F}print(1 - F({a.numerator}, {a.denominator}) - F({b.numerator}, {b.denominator}))"
    return question, 1 - a - b, code


def mean(rng):
    count = rng.randint(4, 7)
    values = [rng.randint(2, 60) for _ in range(count)]
    average = Fraction(sum(values), count)
    if average.denominator != 1:
        values[-1] += count - sum(values) % count
        average = Fraction(sum(values), count)
    known = ", ".join(map(str, values[:-1]))
    question = (
        f"The mean of {count} numbers is {average}. {count - 1} of them are {known}. What is the "
        "last number?"
    )
    return question, Fraction(values[-1]), f"print({count}*{average} - sum([{known}]))"


KINDS = {
    "shopping": shopping,
    "change": change,
    "speed": speed,
    "work_rate": pipes,
    "linear_equation": linear,
    "tickets": tickets,
    "linear_system": system,
    "percentages": percent,
    "series": series,
    "fractions": fractions,
    "mean": mean,
}


DECIMAL_KINDS = {"shopping", "change", "speed", "percentages"}


def rows(seed: int = SEED, per_kind: int = PER_KIND) -> list[dict]:
    rng = random.Random(seed)
    made, seen = [], set()
    for kind, make in KINDS.items():
        count = 0
        while count < per_kind:
            question, value, code = make(rng)
            if question in seen:
                continue
            seen.add(question)
            answer = show(value, decimal=kind in DECIMAL_KINDS)
            made.append({"question": question, "answer": answer, "kind": kind, "solution": code})
            count += 1
    rng.shuffle(made)
    return [{"id": f"cm-{i:03d}", **row} for i, row in enumerate(made)]


def main() -> None:
    path = DATA / "code_math.jsonl"
    data = rows()
    path.write_text("".join(json.dumps(row) + "\n" for row in data))
    print(f"wrote {path} ({len(data)} rows)")


if __name__ == "__main__":
    main()
