"""The typed API: an Experiment resolves its components once, tasks and tools come from memory,
the results are real types, and ``agentfly eval`` reports what ``run_eval`` returns."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

ROWS = [
    {"id": "t0", "question": "What is 2 + 3?", "answer": "5"},
    {"id": "t1", "question": "What is 4 * 4?", "answer": "16"},
]


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "script.jsonl"
    lines = [
        {"responses": [call("calculator", expression="2 + 3"), call("answer", answer="5")]},
        {"responses": [call("calculator", expression="4 * 4"), call("answer", answer="15")]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def settings(tiny_model, script):
    from agentfly_cli import load_settings

    return load_settings(
        model=str(tiny_model),
        backend={"name": "scripted", "script": script},
        tools=["calculator", "answer"],
        reward="math_equal",
        rollout={"n": 2, "max_turns": 4},
        chat={"parser": "hermes"},
    )


def test_an_experiment_resolves_its_components_once(settings, monkeypatch):
    from agentfly_cli import EvalReport, Experiment, RolloutResult
    from agentfly_cli.chat.templates import ChatTemplate
    from agentfly_cli.rollout import from_settings

    calls = {"resolve": 0, "template": 0}
    resolve, load = from_settings.resolve_run, ChatTemplate.load.__func__

    def counted_resolve(*args, **kwargs):
        calls["resolve"] += 1
        return resolve(*args, **kwargs)

    def counted_load(cls, *args, **kwargs):
        calls["template"] += 1
        return load(cls, *args, **kwargs)

    monkeypatch.setattr(from_settings, "resolve_run", counted_resolve)
    monkeypatch.setattr(ChatTemplate, "load", classmethod(counted_load))
    experiment = Experiment(settings, tasks=ROWS)
    assert calls == {"resolve": 0, "template": 0}  # nothing resolved before first use
    first, second = experiment.rollout(), experiment.rollout()
    report = experiment.evaluate()
    assert calls == {"resolve": 1, "template": 1}
    assert isinstance(first, RolloutResult) and isinstance(report, EvalReport)
    assert [t.reward for t in first.trajectories] == [1.0, 1.0, 0.0, 0.0]
    assert [t.reward for t in second.trajectories] == [1.0, 1.0, 0.0, 0.0]
    assert [t.task["id"] for t in first.trajectories] == ["t0", "t0", "t1", "t1"]
    assert report.n == 2 and report.pass_at(1) == 0.5 and report.mean == 0.5
    assert [row["correct"] for row in report.tasks] == [2, 0]
    assert first.summary()["backend"] == "scripted" and first.summary()["chains"] == 4


def test_tasks_in_memory_are_checked_like_a_files_rows(settings):
    from agentfly_cli import Experiment, UserError, run_rollout

    with pytest.raises(UserError, match=r"^tasks row 2: expected a JSON object, got str"):
        Experiment(settings, tasks=[ROWS[0], "What is 1 + 1?"]).rollout()
    with pytest.raises(UserError, match="tasks: expected a non-empty list of task rows"):
        run_rollout(settings, tasks=[])
    where = settings.model_copy(update={"data": settings.data.model_copy(update={"limit": 1})})
    assert [t["id"] for t in Experiment(where, tasks=ROWS).tasks] == ["t0"]  # data.limit holds


def test_a_data_file_works_as_tasks_too(settings, tmp_path):
    from agentfly_cli import Experiment

    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS[::-1]))
    assert [t["id"] for t in Experiment(settings, tasks=data).tasks] == ["t1", "t0"]


def test_plain_functions_become_a_tool_and_a_reward(settings):
    from agentfly_cli import Reward, Tool, run_rollout

    def calculator(expression: str) -> str:
        """A marked calculator.

        Args:
            expression: Ignored.
        """
        return f"plain says {expression}"

    def always_quarter(prediction: str) -> float:
        """0.25."""
        return 0.25

    result = run_rollout(
        settings, tasks=ROWS[:1], tools=[calculator, "answer"], reward=always_quarter
    )
    [chain, _] = result.trajectories
    assert chain.reward == 0.25
    assert any("plain says 2 + 3" in str(m.get("content")) for m in chain.messages)
    from agentfly_cli.api.experiment import _as_reward, _as_tools

    assert isinstance(_as_tools([calculator])[0], Tool)
    assert isinstance(_as_reward(always_quarter), Reward)


def test_the_eval_report_reads_as_its_json_document(settings):
    from agentfly_cli import run_eval
    from agentfly_cli.rollout.summary import evaluate

    report = run_eval(settings, tasks=ROWS, threshold=1.0)
    assert report.to_dict() == evaluate(report.rollout.trajectories, 1.0)
    assert dict(report) == report.to_dict() and report["overall"]["pass@2"] == 0.5
    assert report.ks == [1, 2]
    with pytest.raises(KeyError, match=r"pass@4 is not in this report; it has \[1, 2\]"):
        report.pass_at(4)


def test_agentfly_eval_prints_what_run_eval_returns(settings, tiny_model, script, tmp_path):
    from agentfly_cli import run_eval
    from agentfly_cli.cli.app import build_app

    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    arguments = ["eval", "--model", tiny_model, "--backend", "scripted", "--script", script]
    arguments += ["--data", data, "--tools", "calculator,answer", "--reward", "math_equal"]
    arguments += ["--n", "2", "--max-turns", "4", "--parser", "hermes", "--json"]
    arguments += ["--out", tmp_path / "out.jsonl"]
    result = CliRunner().invoke(build_app(), [str(a) for a in arguments])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    report = run_eval(settings, tasks=ROWS)
    assert printed["eval"] == report.to_dict()
    summary = report.rollout.summary()
    for key in ("chains", "tasks", "reward_mean", "tool_calls", "finish_reasons", "backend"):
        assert printed["summary"][key] == summary[key]


def test_the_blocking_calls_refuse_a_running_loop(settings):
    import asyncio

    from agentfly_cli import Experiment, UserError, run_eval

    async def inside():
        with pytest.raises(UserError, match=r"^evaluate\(\) cannot start an event loop"):
            Experiment(settings, tasks=ROWS).evaluate()
        with pytest.raises(UserError, match=r"^run_eval\(\) cannot start an event loop"):
            run_eval(settings, tasks=ROWS)
        return await Experiment(settings, tasks=ROWS).evaluate_async()

    assert asyncio.run(inside()).pass_at(2) == 0.5


def test_the_result_types_are_exported_lazily():
    import agentfly_cli
    from agentfly_cli.api import results
    from agentfly_cli.settings.run import RunSettings
    from agentfly_cli.trajectory import Trajectory

    assert agentfly_cli.EvalReport is results.EvalReport
    assert agentfly_cli.RolloutResult is results.RolloutResult
    assert agentfly_cli.TrainingResult is results.TrainingResult
    assert agentfly_cli.Trajectory is Trajectory and agentfly_cli.RunSettings is RunSettings


def test_the_api_package_hands_on_the_functions_it_had_as_one_module():
    import agentfly_cli
    import agentfly_cli.api as api

    assert sorted(api.__all__) == sorted(api._EXPORTS)
    for name in set(api.__all__) - {"for_eval"}:  # for_eval: the CLI's, not the root's
        assert getattr(api, name) is getattr(agentfly_cli, name), name
    assert api.for_eval.__module__ == "agentfly_cli.api.settings"
