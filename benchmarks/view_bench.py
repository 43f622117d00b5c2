"""Seconds for ``agentfly view`` to show one trajectory, against the CLI's own start-up.

What it measures: a scripted rollout on the tiny model writes ``--chains`` trajectories (each
with a tool call), then ``agentfly view FILE --index LAST`` runs ``--repeats`` times in fresh
processes (wall time, p50 and max), next to ``agentfly --help`` (the floor: Python, Typer, Rich
and the plugins). It also reports whether showing a trajectory imports torch or transformers
(it should not: the tokenizer is read with the ``tokenizers`` library).

Run: python benchmarks/view_bench.py [--chains 200] [--repeats 5] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 + 3"}}\n</tool_call>'
IMPORTS_PROBE = """
import sys
from agentfly_cli.cli.app import main
sys.argv = ["agentfly", "view", sys.argv[1], "--index", sys.argv[2]]
try:
    main()
except SystemExit:
    pass
print("HEAVY", sorted(m for m in ("torch", "transformers") if m in sys.modules), file=sys.stderr)
"""


def agentfly(*arguments: str) -> float:
    """Wall seconds of one ``agentfly`` run in a fresh process (output discarded)."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "agentfly_cli", *arguments],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "80"},
    )
    return time.perf_counter() - started


def stats(seconds: list[float]) -> dict[str, float]:
    return {
        "p50_s": round(statistics.median(seconds), 3),
        "max_s": round(max(seconds), 3),
        "n": len(seconds),
    }


def write_trajectories(folder: Path, chains: int) -> Path:
    from agentfly_cli.models.tiny import build_tiny_model

    model = build_tiny_model(folder / "tiny")
    data, script, out = folder / "data.jsonl", folder / "script.jsonl", folder / "out.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    script.write_text(json.dumps({"responses": [CALL, "The answer is 5."]}) + "\n")
    agentfly(
        "rollout", "--model", str(model), "--backend", "scripted", "--script", str(script),
        "--data", str(data), "--tools", "calculator", "--parser", "hermes",
        "--n", str(chains), "--out", str(out), "--quiet",
    )  # fmt: skip
    return out


def heavy_imports(path: Path, index: int) -> list[str]:
    """The heavy modules that one in-process ``agentfly view`` imported."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS_PROBE, str(path), str(index)],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("HEAVY"))
    return json.loads(line.removeprefix("HEAVY ").replace("'", '"'))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_trajectories(Path(tmp), args.chains)
        last = str(args.chains - 1)
        view = [agentfly("view", str(path), "--index", last) for _ in range(args.repeats)]
        start_up = [agentfly("--help") for _ in range(args.repeats)]
        result = {
            "benchmark": "view_bench",
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "python": platform.python_version(),
            "chains_in_file": args.chains,
            "file_mb": round(path.stat().st_size / 1e6, 2),
            "view_one_trajectory": stats(view),
            "agentfly_help": stats(start_up),
            "view_over_help_s": round(statistics.median(view) - statistics.median(start_up), 3),
            "heavy_modules_imported_by_view": heavy_imports(path, int(last)),
        }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
