"""One data path: a training run reads its data file once, its settings stay as given (the
derived values are in its RunPlan), in-memory tasks, typed flags and the deprecated aliases."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.recipes.loader import load_config

WARM_RUN = (
    "trainer.warm_start.enabled=true", "trainer.warm_start.limit=3", "trainer.steps=1",
    "trainer.tasks_per_step=2", "rollout.n=2", "trainer.eval.every=1", "trainer.eval.limit=2",
    "trainer.backend.device=cpu", "rollout.max_total_tokens=3000",
)  # fmt: skip


def test_a_warm_started_run_with_held_out_eval_reads_its_data_once(
    tiny_model, tmp_path, monkeypatch
):
    import agentfly_cli.rollout.tasks as tasks_module
    import agentfly_cli.train.sft.fine_tune as fine_tune_module
    from agentfly_cli.api.experiment import Experiment

    config = load_config("search_qa", list(WARM_RUN), model=str(tiny_model))
    assert config.data.holdout and config.trainer.eval.every  # held-out eval, from data.holdout
    given = config.model_dump()
    reads = []
    read_rows = tasks_module.read_rows
    monkeypatch.setattr(tasks_module, "read_rows", lambda p: reads.append(p) or read_rows(p))

    def fine_tune(chains, model, out, settings, **options):  # the warm start's model: a copy
        shutil.copytree(model, out / "model")

    monkeypatch.setattr(fine_tune_module, "fine_tune", fine_tune)
    run = tmp_path / "run"
    trainer = Experiment(config)._trainer(run, resume=False, console=False)
    trainer._setup()
    try:
        assert len(reads) == 1, reads  # the warm start, RL and the held-out eval share one read
        assert trainer.tasks.split.eval and trainer.tasks.split.train
    finally:
        trainer.train.close()
    assert config.model_dump() == given  # the settings the user gave are unchanged
    warm = str(run / "warm_start" / "model")
    assert config.model == str(tiny_model) and trainer.config.model == warm
    plan = json.loads((run / "plan.json").read_text())
    assert plan["warm_started"] and plan["model"] == warm and plan["total_steps"] == 1
    assert plan["base_model"] == str(tiny_model) and plan["run_dir"] == str(run)


def test_training_on_rows_in_memory_keeps_them_and_never_reads_them_back(
    tiny_model, tmp_path, monkeypatch
):
    import agentfly_cli.rollout.tasks as tasks_module
    from agentfly_cli.api.experiment import Experiment

    config = load_config("calculator", ["trainer.steps=1", "trainer.eval.every=1"])
    config = config.model_copy(update={"model": str(tiny_model)})
    rows = [{"question": f"{i} + 1?", "answer": str(i + 1)} for i in range(10)]
    reads = []
    read_rows = tasks_module.read_rows
    monkeypatch.setattr(tasks_module, "read_rows", lambda p: reads.append(p) or read_rows(p))
    trainer = Experiment(config, tasks=rows)._trainer(tmp_path / "run", False, False)
    trainer._setup()
    try:
        assert reads == []  # the rows in memory, not a read of the file that records them
        split = trainer.tasks.split
        assert sorted(split.train + split.eval, key=str) == sorted(rows, key=str)
        assert len(split.eval) == 1  # the recipe's data.holdout 0.1, drawn over the rows
    finally:
        trainer.train.close()
    kept = (tmp_path / "run" / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in kept] == rows


def test_tasks_in_memory_are_checked_like_a_files_rows(tiny_model):
    from agentfly_cli.rollout.from_settings import resolve_run

    config = load_config("calculator", model=str(tiny_model))
    rows = [{"question": "1 + 1?", "answer": "2"}, {"answer": "3"}]
    with pytest.raises(UserError, match=r"^tasks row 2: needs a 'question' field"):
        resolve_run(config, tasks=rows)
    with pytest.raises(UserError, match="no task rows given"):
        resolve_run(config, tasks=[])
    prompted = load_config(
        "calculator", model=str(tiny_model), **{"chat.system_prompt": "Level {level}."}
    )
    with pytest.raises(UserError, match=r"chat.system_prompt uses \{level\}.*tasks"):
        resolve_run(prompted, tasks=rows[:1])
    resolved = resolve_run(config, tasks=rows[:1])
    assert resolved.tasks == rows[:1]  # used as given: data.path is not read


def test_flags_are_typed_values_before_set():
    from agentfly_cli.cli.run_options import build_config

    config = build_config({"spec": "calculator"}, {"trainer.steps": 3})
    assert config.trainer.steps == 3
    chosen = build_config({"spec": "calculator", "sets": ["trainer.steps=5"]}, {"trainer.steps": 3})
    assert chosen.trainer.steps == 5  # --set of the same key wins, as it did
    with pytest.raises(UserError, match="trainer.steps: Input should be greater than"):
        build_config({"spec": "calculator"}, {"trainer.steps": 0})


def test_backend_model_is_a_deprecated_alias_of_model(caplog):
    with caplog.at_level(logging.WARNING, logger="agentfly_cli.settings"):
        config = load_config("calculator", ["backend.model=tiny"], model="smollm2")
    assert config.model == "tiny" and config.backend.model is None  # it wins, as it did
    assert "backend.model is deprecated; use model" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agentfly_cli.settings"):
        assert load_config("calculator", model="tiny").model == "tiny"
    assert "deprecated" not in caplog.text


ALIAS_WARNING = (
    "trainer.eval.holdout is deprecated; use data.holdout (the same share, held out of every "
    "phase, drawn by data.holdout_seed 3)"
)


def test_eval_holdout_is_an_alias_of_data_holdout_with_one_warning(caplog):
    from agentfly_cli.settings.run import RunSettings
    from agentfly_cli.train.tasks.plan import TaskPlan
    from agentfly_cli.train.tasks.run_tasks import RunTasks

    sets = ["trainer.eval.every=1", "data.holdout_seed=3"]
    with caplog.at_level(logging.WARNING, logger="agentfly_cli.settings"):
        alias = load_config("calculator", [*sets, "trainer.eval.holdout=0.25"])
    assert [r.getMessage() for r in caplog.records] == [ALIAS_WARNING]  # one line, once
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agentfly_cli.settings"):
        direct = load_config("calculator", [*sets, "data.holdout=0.25"])
        again = RunSettings.model_validate(alias.model_dump())  # the validated settings
    assert caplog.records == []  # ... carry no alias left to warn about
    assert alias.trainer.eval.holdout == 0.0 and alias.data.holdout == 0.25  # the recipe's 0.1
    assert alias.data.holdout_seed == 3  # replaced, its seed kept
    assert alias == direct == again and alias.model_dump() == direct.model_dump()

    def eval_tasks(config):
        run = RunTasks.load(config.data)
        plan = TaskPlan(run.train, config.trainer, config.data, file_rows=run.rows)
        return plan.split.train, plan.split.eval

    assert eval_tasks(alias) == eval_tasks(direct)
    train, held = eval_tasks(alias)
    assert len(held) > 0 and not any(row in train for row in held)


def test_eval_holdout_and_data_holdout_set_in_one_place_must_agree(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"question": str(i)}) + "\n" for i in range(10)))
    both = tmp_path / "both.yaml"
    both.write_text(f"data: {{path: {data}, holdout: 0.1}}\ntrainer: {{eval: {{holdout: 0.2}}}}\n")
    with pytest.raises(UserError, match="^.*$") as error:
        load_config(str(both))
    assert str(error.value) == (
        f"{both}: data.holdout 0.1 and trainer.eval.holdout 0.2 disagree; keep data.holdout "
        "(the held-out share) and drop trainer.eval.holdout, its deprecated alias"
    )
    with pytest.raises(UserError, match="data.holdout 0.3 and trainer.eval.holdout 0.2"):
        load_config("calculator", ["data.holdout=0.3", "trainer.eval.holdout=0.2"])
    same = both.with_name("same.yaml")
    same.write_text(both.read_text().replace("0.2", "0.1"))
    assert load_config(str(same)).data.holdout == 0.1
    # a --set of one replaces the file's value of the other: the later layer wins
    assert load_config(str(both), ["data.holdout=0.2"]).data.holdout == 0.2
    assert load_config(str(same), ["trainer.eval.holdout=0.3"]).data.holdout == 0.3
