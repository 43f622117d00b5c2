"""``agentfly recipes check``: gold and junk answers played through a recipe's own engine and
reward by the scripted backend; a reward that cannot tell them apart is flagged (exit 1), a
good one passes (exit 0), bad input is one line (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.errors import UserError
from agentfly_cli.rollout.check_answers import GoldSource, is_function_ref, task_answers
from agentfly_cli.settings.train import SolutionStep
from tests.helpers.recipe_checks import agentfly, write_jsonl

ROWS = [
    {"id": "q1", "question": "What is 2 + 3?", "answer": "5"},
    {"id": "q2", "question": "What is 7 * 6?", "answer": "42"},
    {"id": "q3", "question": "What is 9 - 4?", "answer": "5"},
]
# reasoning-gym's game_of_life_halting bug: any non-empty answer scores 1.0
FOOLED = """
def nonempty(prediction, **fields):
    return 1.0 if prediction else 0.0


def gold(task):
    return ["CALC: " + task["question"][8:-1], "ANSWER: " + task["answer"]]
"""


@pytest.fixture
def rewards(tmp_path) -> Path:
    path = tmp_path / "fooled.py"
    path.write_text(FOOLED)
    return path


def as_json(result) -> dict:
    assert result.stdout.lstrip().startswith("{"), result.output  # warnings go to stderr
    return json.loads(result.stdout)


def test_a_good_reward_passes_with_exit_0(tiny_model):
    result = agentfly("recipes", "check", "calculator", "--model", tiny_model, "--limit", "4",
                      "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    report = as_json(result)
    assert report["ok"] is True and len(report["recipes"]) == 1
    calculator = report["recipes"][0]
    assert calculator["tasks_checked"] == 4 and calculator["flagged"] == []
    assert calculator["gold"] == {"mean": 1.0, "min": 1.0, "max": 1.0}
    kinds = set(calculator["junk"])
    assert {"empty", "dont_know", "blank_answer", "wrong_answer", "other_task"} <= kinds
    assert {"junk[0]", "junk[1]"} <= kinds  # the recipe's own check.junk
    assert all(kind["max"] == 0.0 and kind["fooled"] == 0 for kind in calculator["junk"].values())
    task = calculator["tasks"][0]
    assert set(task) >= {"index", "task", "gold", "best_junk", "best_junk_score", "junk",
                         "errors", "flagged", "reasons"}  # fmt: skip
    assert task["task"] == "calc-000" and task["gold"] == 1.0 and not task["flagged"]


def test_a_reward_fooled_by_junk_is_flagged_with_exit_1(tiny_model, rewards, tmp_path):
    data = write_jsonl(tmp_path / "tasks.jsonl", ROWS)
    result = agentfly(
        "recipes", "check", "calculator", "--model", tiny_model, "--json",
        "--set", f"reward={rewards}:nonempty", "--set", f"data.path={data}",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    report = as_json(result)["recipes"][0]
    assert report["ok"] is False and report["flagged_count"] == 3
    for task in report["flagged"]:
        assert task["gold"] == 1.0 and task["best_junk_score"] == 1.0
        fooled = {name for name, score in task["junk"].items() if score == 1.0}
        assert {"dont_know", "wrong_answer"} <= fooled  # any words score
        assert task["junk"]["empty"] == 0.0 and task["junk"]["blank_answer"] == 0.0
        assert any("dont_know scores 1" in reason for reason in task["reasons"])
    assert report["junk"]["dont_know"]["fooled"] == 3
    # the human output names the recipe, the flagged tasks and the junk that fooled them
    human = CliRunner().invoke(
        build_app(),
        ["recipes", "check", "calculator", "--model", str(tiny_model),
         "--set", f"reward={rewards}:nonempty", "--set", f"data.path={data}"],
        env={"COLUMNS": "80"},
    )  # fmt: skip
    assert human.exit_code == 1
    assert "FLAGGED" in human.output and "3 flagged tasks" in human.output
    assert "exit code 1" in human.output
    lines = human.stdout.splitlines()  # the tables (warnings go to stderr)
    assert max(len(line.rstrip()) for line in lines) <= 80 and "…" not in human.stdout
    for word in ("q1", "q2", "q3", "calculator", "dont_know", "wrong_answer", "blank_answer"):
        assert any(word in line for line in lines), word  # whole, never cut


def test_gold_from_a_function_plays_several_turns(tiny_model, rewards, tmp_path):
    data = write_jsonl(tmp_path / "tasks.jsonl", ROWS)
    out = tmp_path / "chains.jsonl"
    result = agentfly(
        "recipes", "check", "calculator", "--model", tiny_model, "--json", "--out", out,
        "--gold", f"{rewards}:gold", "--set", f"data.path={data}",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = as_json(result)["recipes"][0]
    assert report["gold"]["min"] == 1.0
    assert "blank_answer" not in report["junk"]  # a function's turns have no fields to empty
    assert report["junk"]["wrong_answer"]["played"] == 3  # its last number raised by one
    chains = [json.loads(line) for line in out.read_text().splitlines()]
    gold = [c for c in chains if c["task"]["id"] == "q1" and c["reward"] == 1.0]
    assert [t["name"] for t in gold[0]["tool_calls"]] == ["calculator", "answer"]


def test_gold_under_min_gold_is_flagged(tiny_model):
    result = agentfly("recipes", "check", "calculator", "--model", tiny_model, "--limit", "2",
                      "--min-gold", "2", "--json")  # fmt: skip
    assert result.exit_code == 1
    reasons = [r for t in as_json(result)["recipes"][0]["flagged"] for r in t["reasons"]]
    assert reasons and all("under the min-gold 2" in r for r in reasons)
    # a flagged gold chain whose tools failed says so first (an env that did not start, ...)
    result = agentfly(
        "recipes", "check", "calculator", "--model", tiny_model, "--limit", "1", "--json",
        "--min-gold", "2", "--gold", "CALC: 1/0", "--gold", "ANSWER: {answer}",
    )  # fmt: skip
    task = as_json(result)["recipes"][0]["flagged"][0]
    assert task["gold"] == 1.0 and len(task["gold_tool_errors"]) == 1
    assert task["reasons"][0].startswith("the gold chain met 1 tool error(s), first ")
    assert "under the min-gold 2" in task["reasons"][1]


def test_an_agent_recipe_is_checked_task_by_task(tiny_model):
    """The agent engine serves each task its own script line: without it every task would
    replay the first task's gold and fail."""
    pytest.importorskip("openai", reason="the openai SDK is a dev dependency")
    pytest.importorskip("uvicorn", reason="the gateway needs the serve extra")
    recipe = Path(__file__).parents[2] / "examples" / "openai_agent" / "recipe.yaml"
    result = agentfly("recipes", "check", recipe, "--model", tiny_model, "--limit", "3",
                      "--gold", "ANSWER: {answer}", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    report = as_json(result)["recipes"][0]
    assert report["gold"]["min"] == 1.0 and report["tasks_checked"] == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "unknown recipe 'nope'"),
        (["calculator", "--set", "check=null"], "has no check section"),
        (["calculator", "--gold", "ANSWER: {solution}"], "has no field 'solution'"),
        (["calculator", "--split", "sideways"], "--split sideways: give train, heldout or all"),
        (["calculator", "--gold", "ANSWER: {answer"], "is not a format string"),
        (["calculator", "--gold", "nowhere_module:fn"], "nowhere_module"),
    ],
)
def test_bad_input_is_one_line_with_exit_2(tiny_model, args, message):
    result = agentfly("recipes", "check", *args, "--model", tiny_model, "--limit", "2")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("warning:")]  # broken plugins
    assert len(lines) == 1 and message in lines[0], result.output
    assert "Traceback" not in result.output


def test_a_recipe_of_ones_own_without_check_names_the_fix(tiny_model, tmp_path):
    data = write_jsonl(tmp_path / "tasks.jsonl", ROWS)
    recipe = tmp_path / "mine.yaml"
    recipe.write_text(f"name: mine\ndata: {{path: {data}}}\nreward: exact_match\n")
    result = agentfly("recipes", "check", recipe, "--model", tiny_model)
    assert result.exit_code == 2
    assert "add check: {gold: 'ANSWER: {answer}'} to it" in result.output
    assert "or pass --gold TEMPLATE" in result.output


# -- the answers themselves ---------------------------------------------------------------------
def test_junk_is_derived_from_the_gold_templates():
    answers = task_answers(ROWS, GoldSource("ANSWER: {answer}"), ["ANSWER: {answer}!"])
    first = answers[0]
    assert first.gold == ["ANSWER: 5"]
    assert first.junk == {
        "empty": [""],
        "dont_know": ["I don't know"],
        "blank_answer": ["ANSWER: "],
        "wrong_answer": ["ANSWER: 6"],
        "other_task": ["ANSWER: 42"],
        "junk[0]": ["ANSWER: 5!"],
    }
    # q3's next task wraps round to q1, whose gold is q3's own: the next one that differs
    assert answers[2].junk["other_task"] == ["ANSWER: 42"]


def test_words_without_numbers_take_another_tasks_values():
    rows = [{"id": "a", "city": "Tolva", "hops": ["x", "y"]},
            {"id": "b", "city": "Dunmor", "hops": ["z"]}]  # fmt: skip
    gold = GoldSource([SolutionStep(each="hops", say="SEARCH: {item}"), "ANSWER: {city}"])
    first = task_answers(rows, gold)[0]
    assert first.gold == ["SEARCH: x", "SEARCH: y", "ANSWER: Tolva"]
    assert first.junk["wrong_answer"] == ["SEARCH: x", "SEARCH: y", "ANSWER: Dunmor"]
    assert first.junk["blank_answer"] == ["SEARCH: x", "SEARCH: y", "ANSWER: "]
    assert first.junk["other_task"] == ["SEARCH: z", "ANSWER: Dunmor"]
    # a list step given as a plain dict (the Python API) is read as the recipe's YAML would be
    plain = GoldSource([{"each": "hops", "say": "SEARCH: {item}"}, "ANSWER: {city}"])
    assert task_answers(rows, plain)[0].gold == first.gold
    with pytest.raises(UserError, match="check.gold"):
        GoldSource([{"each": "hops", "sing": "x"}])


def test_literal_braces_and_function_references():
    gold = GoldSource('<tool_call>{{"name": "answer", "arguments": {{"answer": "{answer}"}}}}'
                      "</tool_call>")  # fmt: skip
    turn = task_answers(ROWS[:1] * 2, gold)[0]
    assert turn.gold == ['<tool_call>{"name": "answer", "arguments": {"answer": "5"}}</tool_call>']
    assert turn.junk["wrong_answer"] == [turn.gold[0].replace('"5"', '"6"')]
    assert is_function_ref("my_pkg.gold:solve") and is_function_ref("./gold.py:solve")
    assert not is_function_ref("ANSWER: {answer}") and not is_function_ref("ANSWER: 5")
    with pytest.raises(UserError, match="check.gold: this recipe gives no gold"):
        GoldSource([])
