"""BFCL's multi-turn checker as a reward: ``bfcl_multi_turn`` replays an episode's calls.

BFCL's ``multi_turn_checker`` executes the model's calls and the ground truth through
``execute_multi_turn_func_call``, which keeps instances in its module's globals keyed by model
name and entry id and runs each call string with ``eval``. The reward keeps BFCL's checks and
their order, but executes both sides itself, on two fresh
:class:`~bridges_builtin.bfcl_api.ApiSession` s per episode (nothing global, nothing evaluated):
per user turn, it runs the model's calls of that turn and the turn's ground truth, then applies
BFCL's own ``state_checker`` (every public attribute of every instance equal) and
``response_checker`` (the ground truth's results among the model's results so far). As in
BFCL, a turn whose ground truth calls something fails when the model called nothing, a turn
with no ground truth is not checked, and an episode that did not reach every user turn fails
(BFCL's ``force_terminated``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bridges_builtin.bfcl_api import ApiSession
from rewards_builtin.calls import call_records


def _meta(trajectory: Any) -> Mapping[str, Any]:
    meta = getattr(trajectory, "meta", None)
    if meta is None and isinstance(trajectory, Mapping):
        meta = trajectory.get("meta")
    return meta if isinstance(meta, Mapping) else {}


def calls_per_user_turn(trajectory: Any, turns: int) -> tuple[list[list[tuple]], int]:
    """The calls that ran in each user turn, ``[(name, arguments)]`` each, and how many user
    turns the episode reached. A user turn delivered after assistant turn ``d`` owns the
    assistant turns after ``d``."""
    delivered = list(_meta(trajectory).get("user_turns", {}).get("delivered_after", []))
    per_turn: list[list[tuple]] = [[] for _ in range(max(turns, len(delivered) + 1))]
    for record in call_records(trajectory):
        if record.get("status", "ok") != "ok" or not record.get("name"):
            continue  # a call the engine refused (bad arguments) never ran on the env
        arguments = record.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                continue
        turn = sum(1 for d in delivered if d < int(record.get("turn", 0)))
        per_turn[turn].append((record["name"], arguments if isinstance(arguments, dict) else {}))
    return per_turn, len(delivered) + 1


def check_episode(per_turn: list[list[tuple]], reached: int, bfcl: Mapping[str, Any]) -> dict:
    """BFCL's verdict on an episode's calls per user turn: ``{"valid", "error_type", ...}``."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (
        response_checker,
        state_checker,
    )

    truth = bfcl["ground_truth"]
    if reached < len(truth):
        message = f"the episode reached {reached} of {len(truth)} user turns"
        return {"valid": False, "error_type": "multi_turn:force_terminated",
                "error_message": message}  # fmt: skip
    model, gold = ApiSession.for_entry(bfcl), ApiSession.for_entry(bfcl)
    results_so_far: list[str] = []
    for index, gold_calls in enumerate(truth):
        calls = per_turn[index] if index < len(per_turn) else []
        results_so_far.extend(model.call(name, arguments) for name, arguments in calls)
        gold_results = [gold.call_text(text) for text in gold_calls]
        if not gold_calls:
            continue
        if not calls:
            return {"valid": False, "error_type": "multi_turn:empty_turn_model_response",
                    "error_message": f"Model response list is empty for turn {index}"}  # fmt: skip
        verdict = state_checker(model.instances, gold.instances)
        if verdict["valid"]:
            verdict = response_checker(results_so_far, gold_results, index)
        if not verdict["valid"]:
            return verdict
    return {"valid": True}


def score_episode(trajectory: Any, bfcl: Mapping[str, Any]) -> dict[str, Any]:
    """1.0 when BFCL's multi-turn checks pass, else 0.0 with BFCL's error type and message."""
    per_turn, reached = calls_per_user_turn(trajectory, len(bfcl["ground_truth"]))
    try:
        verdict = check_episode(per_turn, reached, bfcl)
    except Exception as exc:  # the checker's own crash on odd state: not accepted
        verdict = {"valid": False, "error_type": "checker_failed",
                   "error_message": f"{type(exc).__name__}: {exc}"}  # fmt: skip
    extras: dict[str, Any] = {"calls": sum(map(len, per_turn)), "user_turns": reached}
    if not verdict.get("valid"):
        extras["error_type"] = verdict.get("error_type", "")
        extras["reason"] = str(verdict.get("error_message", ""))[:500]
    return {"reward": 1.0 if verdict.get("valid") else 0.0, **extras}
