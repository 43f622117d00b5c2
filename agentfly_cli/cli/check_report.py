"""``agentfly recipes check``'s human output: one line per recipe, then each recipe's junk
kinds and flagged tasks."""

from __future__ import annotations

from typing import Any

from agentfly_cli.cli.output import stdout_console, table

SHOWN_FLAGGED = 20  # flagged tasks listed per recipe (--json lists every one)


def _score(value: Any) -> str:
    return "-" if value is None else f"{value:.3g}"


def print_check(reports: list[dict[str, Any]]) -> None:
    """The tables of ``reports`` (each a ``CheckReport.to_dict()``)."""
    console = stdout_console()
    rows = [
        (
            report["recipe"], report["tasks_checked"], report["chains"],
            _score(report["gold"]["mean"]), _score(report["min_gold"]),
            report["flagged_count"], "ok" if report["ok"] else "FLAGGED",
        )
        for report in reports
    ]  # fmt: skip
    columns = ("recipe", "tasks", "chains", "gold mean", "min gold", "flagged", "verdict")
    console.print(table("recipes check", columns, rows))
    for report in reports:
        junk = [
            (name, kind["played"], _score(kind["mean"]), _score(kind["max"]), kind["fooled"])
            for name, kind in report["junk"].items()
        ]
        title = f"{report['recipe']}: junk answers"
        console.print(table(title, ("junk", "tasks", "mean", "max", "fooled"), junk))
        flagged = report["flagged"]
        if not flagged:
            continue
        lines = [
            (task["task"] if task["task"] is not None else f"#{task['index']}",
             _score(task["gold"]), task["best_junk"] or "-", _score(task["best_junk_score"]),
             task["reasons"][0])
            for task in flagged[:SHOWN_FLAGGED]
        ]  # fmt: skip
        title = f"{report['recipe']}: {len(flagged)} flagged tasks"
        console.print(table(title, ("task", "gold", "best junk", "score", "why"), lines))
        if len(flagged) > SHOWN_FLAGGED:
            console.print(f"... and {len(flagged) - SHOWN_FLAGGED} more (--json lists them all)")
    if all(report["ok"] for report in reports):
        console.print("every gold answer scores above every junk answer")
    else:
        console.print("flagged: the reward cannot tell gold from junk there (exit code 1)")
