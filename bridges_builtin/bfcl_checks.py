"""BFCL's own AST checker as a reward: ``bfcl_ast`` scores the calls the model made.

bfcl-eval's checker module imports ``bfcl_eval.constants.model_config``, which imports every
vendor SDK BFCL supports (its full install is 1.9 GB). The checker needs one fact from it: that
the model saw dotted names with underscores (``underscore_to_dot``), which is how the bridge
shows them. So the checker is imported with a stand-in for that one module, which is removed
again right after: nothing else in the process sees it, and a real import of bfcl-eval's
``model_config`` later gets the real module.
"""

from __future__ import annotations

import json
import sys
import threading
import types
from collections.abc import Mapping
from typing import Any

from bridges_builtin.bfcl_data import ANY_CALL_CATEGORIES, INSTALL, NO_CALL_CATEGORIES
from rewards_builtin.calls import call_records

_CONFIG_MODULE = "bfcl_eval.constants.model_config"
_import_lock = threading.Lock()
_checker: Any = None


class _UnderscoreNames:
    """The one model-config fact the checker reads: dotted names were shown with '_'."""

    underscore_to_dot = True


class _EveryModel(dict):
    def __getitem__(self, name: str) -> type[_UnderscoreNames]:
        return _UnderscoreNames


def ast_checker() -> Any:
    """bfcl-eval's ``ast_checker`` module, imported once without its vendor SDKs."""
    global _checker
    with _import_lock:
        if _checker is not None:
            return _checker
        real = sys.modules.get(_CONFIG_MODULE)
        stand_in = types.ModuleType(_CONFIG_MODULE)
        stand_in.MODEL_CONFIG_MAPPING = _EveryModel()
        if real is None:
            sys.modules[_CONFIG_MODULE] = stand_in
        try:
            from bfcl_eval.eval_checker.ast_eval import ast_checker as module
        except ImportError as exc:
            from agentfly_cli.errors import UserError

            raise UserError(f"the bfcl reward needs bfcl-eval ({exc}): {INSTALL}") from None
        finally:
            if real is None:
                sys.modules.pop(_CONFIG_MODULE, None)
        _checker = module
        return module


def model_output(trajectory: Any) -> list[dict[str, Any]]:
    """The calls of the trajectory's last calling turn, as BFCL's checker reads them:
    ``[{name: {argument: value}}]`` (names as the model wrote them)."""
    records = [r for r in call_records(trajectory) if r.get("name")]
    if not records:
        return []
    last_turn = max(int(r.get("turn", 0)) for r in records)
    calls = []
    for record in records:
        if int(record.get("turn", 0)) != last_turn:
            continue
        arguments = record.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = None
        calls.append({record["name"]: arguments if isinstance(arguments, dict) else {}})
    return calls


def check_calls(calls: list[dict[str, Any]], bfcl: Mapping[str, Any]) -> dict[str, Any]:
    """BFCL's verdict on ``calls`` for one row's ``bfcl`` field: ``{"valid", "error", ...}``."""
    category = bfcl["category"]
    if category in NO_CALL_CATEGORIES:
        valid = not calls
        return {"valid": valid, "error": [] if valid else ["a function was called"]}
    if category in ANY_CALL_CATEGORIES:
        valid = bool(calls)
        return {"valid": valid, "error": [] if valid else ["no function was called"]}
    module = ast_checker()
    from bfcl_eval.constants.enums import Language

    language = Language[str(bfcl["language"]).upper()]
    return module.ast_checker(
        bfcl["functions"], calls, bfcl["ground_truth"], language, category, "agentfly"
    )


def score_calls(trajectory: Any, bfcl: Mapping[str, Any]) -> dict[str, Any]:
    """1.0 when BFCL's checker accepts the model's calls, else 0.0 with BFCL's reason."""
    calls = model_output(trajectory)
    try:
        verdict = check_calls(calls, bfcl)
    except Exception as exc:  # the checker's own crash on odd output: not accepted
        verdict = {"valid": False, "error": [f"checker failed: {type(exc).__name__}: {exc}"]}
    extras: dict[str, Any] = {"calls": len(calls)}
    if not verdict.get("valid"):
        errors = verdict.get("error") or []
        extras["error_type"] = verdict.get("error_type", "")
        extras["reason"] = "; ".join(map(str, errors))[:500]
    return {"reward": 1.0 if verdict.get("valid") else 0.0, **extras}
