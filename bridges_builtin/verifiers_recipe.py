"""The settings of a ``verifiers:ENV_ID`` recipe, and the environment's dataset as task rows
(written by the driver in the verifiers venv)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.recipes.families import tasks_file, whole_option, write_tasks

DEFAULT_SIZE = 200


def _rows(env_id: str, api: str, size: int, harness: str | None) -> list[dict[str, Any]]:
    from bridges_builtin.verifiers_venv import run_driver

    try:
        out = run_driver(api, ["tasks", env_id, str(size), *([harness] if harness else [])])
    except RuntimeError as err:
        hint = (
            f"; install the environment into .venv-verifiers-{api}" if "import" in str(err) else ""
        )
        raise UserError(f"verifiers:{env_id}: {err}{hint}") from None
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    for row in rows:
        row["verifiers"] = {"env_id": env_id, "api": api}
        if harness:
            row["verifiers"]["harness"] = harness
    return rows


def _harness(options: Mapping[str, Any]) -> str | None:
    """``--set verifiers.harness=ID``; the value ``null`` (the harness of that name) parses as
    None, so a present key with no value is that harness."""
    if "harness" not in options:
        return None
    value = options["harness"]
    return "null" if value is None else str(value)


def build(param: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``verifiers:<param>``, after writing its tasks to the cache."""
    from bridges_builtin.verifiers_offline import offline_ready
    from bridges_builtin.verifiers_venv import venv_python

    if not param:
        raise UserError("verifiers:ENV_ID needs an environment id, e.g. verifiers:my-env")
    api = str(options.get("api", "0.3"))
    python = venv_python(api)  # a missing venv is one line before anything runs
    if api == "0.4" and not offline_ready(python.parent.parent):
        raise UserError(
            f"the verifiers 0.4 venv at {python.parent.parent} lacks its offline harness "
            "setup (uv, the chat program's wheels): run make install-verifiers"
        )
    harness = _harness(options)
    if harness is not None and api != "0.4":
        raise UserError("--set verifiers.harness needs --set verifiers.api=0.4 (0.3 has none)")
    size = whole_option("verifiers", options, "size", DEFAULT_SIZE, 1)
    key = {"env": param, "api": api, "size": size, "harness": harness}
    path = write_tasks(
        tasks_file("verifiers", param, key), lambda: _rows(param, api, size, harness)
    )
    return {
        "name": f"verifiers:{param}",
        "description": f"the verifiers environment {param} ({api} API), its rubric as reward",
        "model": "smollm2",
        "backend": {"name": "hf"},
        "data": {"path": str(path), "holdout": 0.1, "holdout_seed": 0},
        "agent": {"entry": "bridges_builtin.verifiers_agent:agent"},
        "reward": "verifiers_rubric",
        "rollout": {"n": 8, "max_tokens_per_turn": 256, "max_total_tokens": 2048},
    }
