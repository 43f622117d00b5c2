"""The human report of ``agentfly rollout`` and ``agentfly eval``: tables that fit 80 columns.

Wide facts (many pass@k values, many env pool counters) are laid out one per row, so that a
table's width does not grow with ``n`` or with the number of counters.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from agentfly_cli.api.errors import printable
from agentfly_cli.cli.output import stdout_console, table

POOL_COUNTERS = ("acquired", "released", "restarts", "killed", "failed", "timeouts", "started")


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def summary_tables(summary: dict[str, Any]) -> list:
    """Rich tables of a rollout summary."""
    overview = table(
        "rollout",
        ("chains", "tasks", "reward mean", "reward max", "turns mean", "turns max", "tokens/s"),
        [
            (
                summary["chains"],
                summary["tasks"],
                fmt(summary["reward_mean"]),
                fmt(summary["reward_max"]),
                fmt(summary["turns_mean"]),
                summary["turns_max"],
                fmt(summary.get("sampled_tokens_per_s")),
            )
        ],
    )
    calls = table(
        "tool calls",
        ("tool", "calls", "errors"),
        [(n, v["calls"], v["errors"]) for n, v in summary["tool_calls"].items()] or [("-", 0, 0)],
    )
    errors = table(
        "error kinds", ("kind", "count"), list(summary["error_kinds"].items()) or [("none", 0)]
    )
    finishes = table(
        "finish reasons", ("reason", "chains"), list(summary["finish_reasons"].items())
    )
    tables = [overview, calls, errors, finishes]
    envs = summary.get("envs") or {}
    if envs:  # one row per counter, one column per env
        rows = [(c, *(stats.get(c, 0) for stats in envs.values())) for c in POOL_COUNTERS]
        tables.append(table("env pools", ("counter", *envs), rows))
    return tables


def eval_tables(report: dict[str, Any], threshold: float) -> list:
    """Per task: passed, pass@1, pass@n and mean@n; overall: every pass@k, one per row."""
    overall = report["overall"]
    keys = [k for k in overall if k.startswith(("pass@", "mean@"))]
    n = overall["n"]
    shown = list(dict.fromkeys(k for k in ("pass@1", f"pass@{n}", f"mean@{n}") if k in overall))
    with_ids = any(r.get("id") for r in report["tasks"])  # an id says more than an index
    rows = [
        (
            r.get("id") or "" if with_ids else r["task_index"],
            f"{r['correct']}/{r['n']}",
            *(fmt(r[k]) for k in shown),
        )
        for r in report["tasks"]
    ]
    facts = [
        ("tasks", overall["tasks"]),
        ("chains per task", n),
        ("a chain passes", f"reward >= {threshold:g}"),
        *((k, fmt(overall[k])) for k in keys),
    ]
    if overall.get("infra_failures"):  # not samples of the policy: left out of the scores
        causes = ", ".join(f"{c} {count}" for c, count in overall["infra_failures"].items())
        facts.append(("left out (infrastructure failures)", causes))
        facts.append(("tasks with no chain left", overall.get("unscored_tasks", 0)))
    return [
        table("per task", ("id" if with_ids else "task", "passed", *shown), rows),
        table("overall", ("metric", "value"), facts),
    ]


def print_report(summary: dict[str, Any], out: str | None) -> None:
    console = stdout_console()
    for item in summary_tables(summary):
        console.print(item)
    if summary.get("aborted"):
        example = escape(printable(str(summary["aborted"][0])))
        console.print(f"[red]aborted chains, e.g.:[/red] {example}", highlight=False)
    if not summary["token_exact"]:
        console.print(
            "[yellow]note:[/yellow] the backend did not return token ids; these trajectories "
            "serve evaluation, not training (use hf, vllm, or a vLLM server)"
        )
    if out:
        console.print(
            f"trajectories: {escape(out)}  (view one with `agentfly view {escape(out)}`)",
            highlight=False,
        )
