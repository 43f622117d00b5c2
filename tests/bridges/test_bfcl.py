"""The bfcl bridge: BFCL's single-turn categories as recipes whose rows bring their own tools,
BFCL's AST checker imported without its vendor SDKs, and rollout, eval and train through the
CLI with gold (the possible answers) and junk calls."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

INSTALL = "pip install --no-deps bfcl-eval==2026.3.23"
pytest.importorskip("bfcl_eval", reason=f"the bfcl bridge needs bfcl-eval: {INSTALL}")

from agentfly_cli.errors import UserError  # noqa: E402
from agentfly_cli.recipes.loader import load_config  # noqa: E402
from agentfly_cli.trajectory import read_trajectories  # noqa: E402
from bridges_builtin import bfcl_data  # noqa: E402
from bridges_builtin.bfcl_checks import score_calls  # noqa: E402
from bridges_builtin.bfcl_data import category_rows, gold_calls, gold_responses  # noqa: E402
from tests.helpers.paths import REPO_ROOT  # noqa: E402
from tests.helpers.recipe_checks import agentfly, write_jsonl  # noqa: E402


def calls_of(calls: list[dict]) -> dict:
    return {"tool_calls": [{"turn": 0, **call} for call in calls]}


def test_rows_bring_their_own_tools_with_names_the_model_can_write():
    rows = category_rows("simple_python")
    assert len(rows) == 400
    row = rows[1]  # math.factorial
    assert row["tools"][0]["function"]["name"] == "math_factorial"
    assert row["bfcl"]["names"] == {"math_factorial": "math.factorial"}
    assert row["messages"][0]["role"] == "user"
    counts = {c: len(category_rows(c)) for c in ("multiple", "parallel", "irrelevance")}
    assert counts == {"multiple": 200, "parallel": 200, "irrelevance": 240}


def test_the_checker_accepts_gold_and_rejects_a_wrong_value_without_vendor_sdks():
    row = category_rows("simple_python")[1]
    assert score_calls(calls_of(gold_calls(row)), row["bfcl"])["reward"] == 1.0
    wrong = score_calls(
        calls_of([{"name": "math_factorial", "arguments": {"number": 6}}]), row["bfcl"]
    )
    assert wrong["reward"] == 0.0 and "Expected one of [5]" in wrong["reason"]
    assert score_calls({"tool_calls": []}, row["bfcl"])["reward"] == 0.0
    assert "bfcl_eval.constants.model_config" not in sys.modules  # the stand-in is gone


def test_the_checker_imports_none_of_bfcls_vendor_sdks():
    probe = (
        "import sys; from bridges_builtin.bfcl_data import category_rows, gold_calls; "
        "from bridges_builtin.bfcl_checks import score_calls; r = category_rows('multiple')[0]; "
        "print(score_calls({'tool_calls': [dict(turn=0, **c) for c in gold_calls(r)]}, "
        "r['bfcl'])['reward']); print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'anthropic', 'cohere', 'mistralai', 'transformers', 'faiss')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO_ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1.0", "[]"]


def test_irrelevance_is_right_when_nothing_is_called():
    row = category_rows("irrelevance")[0]
    assert score_calls({"tool_calls": []}, row["bfcl"])["reward"] == 1.0
    call = {"name": row["tools"][0]["function"]["name"], "arguments": {}}
    assert score_calls(calls_of([call]), row["bfcl"])["reward"] == 0.0
    assert gold_responses(row) == [bfcl_data.NO_CALL_REPLY]


def test_an_unknown_category_or_a_missing_library_is_one_line(monkeypatch):
    with pytest.raises(UserError, match="not one built here; pick one of: simple_python.*multi_"):
        load_config("bfcl:multi_turn_nope")
    monkeypatch.setattr(bfcl_data.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"needs bfcl-eval .*pip install --no-deps bfcl-eval"):
        load_config("bfcl:simple_python")


def _script(tmp_path, config, reply) -> str:
    rows = [json.loads(line) for line in open(config.data.path)]
    return str(
        write_jsonl(tmp_path / "s.jsonl", [{"id": r["id"], "responses": reply(r)} for r in rows])
    )


@pytest.mark.parametrize("category", ["simple_python", "multiple"])
@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (gold_responses, 1.0),
        (lambda row: [f"[{row['tools'][0]['function']['name']}(x=1)]"], 0.0),  # bad arguments
        (lambda row: ["I would call a function."], 0.0),  # no call at all
    ],
    ids=["gold", "junk", "no-call"],
)
def test_rollout_and_eval_with_gold_and_junk(tiny_model, tmp_path, category, reply, expected):
    recipe = f"bfcl:{category}"
    config = load_config(recipe)
    common = ["--model", tiny_model, "--backend", "scripted", "--script",
              _script(tmp_path, config, reply), "--n", "1", "--quiet"]  # fmt: skip
    out = tmp_path / "rollout.jsonl"
    result = agentfly("rollout", recipe, "--limit", "6", "--out", out, *common)
    assert result.exit_code == 0, result.output
    chains = read_trajectories(out)
    assert len(chains) == 6
    for chain in chains:
        chain.check()
        assert chain.reward == expected, (chain.task["id"], chain.reward_extras)
        if expected:
            assert chain.finish_reason == "declared_call"
    evaluated = agentfly("eval", recipe, "--out", tmp_path / "eval.jsonl", "--json",
                         "--limit", "4", *common)  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(evaluated.stdout)["eval"]["overall"]["pass@1"] == expected


def test_train_warm_starts_on_the_possible_answers_then_takes_rl_steps(tiny_model, tmp_path):
    run = tmp_path / "run"
    result = agentfly(
        "train", "bfcl:simple_python", "--model", tiny_model, "--out", run, "--quiet",
        "--set", "trainer.steps=2", "--set", "trainer.tasks_per_step=2", "--set", "rollout.n=2",
        "--set", "trainer.eval.every=0", "--set", "trainer.telemetry.sinks=[jsonl]",
        "--set", "trainer.warm_start.limit=4",  # solutions need the recipe's reply length
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    # the recipe warm-starts by default: each task's solution, played and scored by BFCL's checker
    chains = [json.loads(x) for x in (run / "warm_start" / "chains.jsonl").open()]
    assert len(chains) == 4 and all(c["reward"] == 1.0 for c in chains)
    replies = [[m["content"] for m in c["messages"] if m["role"] == "assistant"] for c in chains]
    assert replies == [[c["task"]["solution"]] for c in chains]


def test_recipes_check_passes_on_two_categories():
    for category in ("simple_python", "parallel"):
        result = agentfly("recipes", "check", f"bfcl:{category}", "--model", "tiny", "--limit", "8")
        assert result.exit_code == 0, result.output
