"""The agent examples (examples/agents_sdk, examples/langgraph_agent) rolled out by the CLI."""

from __future__ import annotations

from pathlib import Path


def rollout_agent_example(recipe: Path, out: Path) -> list[dict]:
    """``agentfly rollout RECIPE --n 2 --limit 3`` of an agent example (SmolLM2: slow tests);
    its six episodes, each checked to be token-exact and without error."""
    import json

    from typer.testing import CliRunner

    from agentfly_cli.cli.app import build_app

    result = CliRunner().invoke(build_app(), [
        "rollout", str(recipe), "--n", "2", "--limit", "3", "--out", str(out), "--quiet",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and all(row["token_exact"] and not row["error"] for row in rows)
    return rows
