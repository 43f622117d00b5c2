"""Seconds to parse adversarial assistant turns of 100 kB and 1 MB, per parser and input shape.

Each case runs in a child process under a time cap, so a super-linear parser shows up as
``"timeout"`` instead of stalling the benchmark. Linear parsers take about ten times as long at
1 MB as at 100 kB.

    .venv/bin/python benchmarks/parser_bench.py --out benchmarks/results/parser_bench.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

LINE_OPTIONS = {
    "commands": {
        "CALC": {"tool": "calculator", "argument": "expression"},
        "ANSWER": {"tool": None},
    }
}

# case name -> (parser, a function of the size in characters that builds the turn)
CASES = {
    "fence with newlines": ("hermes", lambda n: "<tool_call>```\n" + "\n" * n + "x</tool_call>"),
    "fence with blank lines": (
        "hermes",
        lambda n: "<tool_call>```" + " \n" * (n // 2) + "</tool_call>",
    ),
    "repeated end tags": ("hermes", lambda n: "x" + "<|im_end|> " * (n // 11)),
    "think blocks": ("hermes", lambda n: "<think>a</think>b" * (n // 16)),
    "stray </tool_call>": ("hermes", lambda n: "</tool_call>" * (n // 12)),
    "many <tool_call>": (
        "hermes",
        lambda n: '<tool_call>{"name":"a","arguments":{}}</tool_call>' * (n // 50),
    ),
    "nested brackets": ("hermes", lambda n: "<tool_call>" + "[" * n + "</tool_call>"),
    'nested {"name":': ("llama3_json", lambda n: '{"name": ' * (n // 9)),
    "python_tag fence": ("llama3_json", lambda n: "<|python_tag|>```" + "\n" * n),
    "many JSON calls": ("llama3_json", lambda n: '{"name": "a", "parameters": {}}; ' * (n // 33)),
    "many [TOOL_CALLS]": ("mistral", lambda n: "[TOOL_CALLS]" * (n // 12)),
    "Action Input fence": ("react", lambda n: "Action: a\nAction Input: ```\n" + "\n" * n),
    "many Action lines": ("react", lambda n: "Action: x\n" * (n // 10)),
    "CALC lines": ("line", lambda n: "CALC: 1\n" * (n // 8)),
    "newlines": ("line", lambda n: "\n" * n),
}
SIZES = (100_000, 1_000_000)


def run_case(case: str, size: int) -> dict:
    """Parse one input in this process; the seconds and what came out."""
    from agentfly_cli.chat.parsers import get_parser

    name, build = CASES[case]
    text = build(size)
    parser = get_parser(name, LINE_OPTIONS if name == "line" else None)
    started = time.perf_counter()
    parsed = parser.parse(text)
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 4), "calls": len(parsed.calls), "errors": len(parsed.errors)}


def measure(case: str, size: int, cap: float) -> dict:
    """``run_case`` in a child process, stopped after ``cap`` seconds."""
    command = [sys.executable, __file__, "--case", case, "--size", str(size)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=cap, check=True)
    except subprocess.TimeoutExpired:
        return {"seconds": None, "timeout": cap}
    return json.loads(done.stdout)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--out", help="also write the JSON result here")
    options.add_argument("--cap", type=float, default=30.0, help="seconds per case (default 30)")
    options.add_argument("--case", help=argparse.SUPPRESS)
    options.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = options.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.size)))
        return
    results = []
    for case, (parser, _) in CASES.items():
        row = {"case": case, "parser": parser}
        for size in SIZES:
            row[f"{size // 1000} kB"] = measure(case, size, args.cap)
        results.append(row)
        print(json.dumps(row), file=sys.stderr)
    report = {"cap_s": args.cap, "results": results}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
