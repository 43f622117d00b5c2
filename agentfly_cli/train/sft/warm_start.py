"""The warm start: supervised fine-tuning on a recipe's packaged solutions, before RL.

A model that solves none of a recipe's tasks gives GRPO no reward spread to learn from. The warm
start plays each *training* task's packaged solution (``trainer.warm_start.responses``) with the
``scripted`` backend under the recipe's own template, tools and envs, keeps the chains that
score, and fine-tunes the model on them (``agentfly sft``'s trainer, short by default: one epoch
leaves the policy room to explore). RL then starts from that model. The recipe's held-out tasks
(``data.holdout``) are never played: the rollout reads the train side.

Everything goes to ``RUN_DIR/warm_start/`` (``solutions.jsonl``, ``chains.jsonl``, ``model/``,
``sft.json``); a resumed run reuses the model found there.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.rollout.solutions import solution_responses
from agentfly_cli.settings.train import WarmStartSettings

FOLDER = "warm_start"
SCRIPT_FILE = "solutions.jsonl"
CHAINS_FILE = "chains.jsonl"
#: The warm start's own record: its wall time and what it trained on.
SUMMARY_FILE = "warm_start.json"

log = logging.getLogger(__name__)


def solution_script(rows: Sequence[Mapping[str, Any]], settings: WarmStartSettings) -> list[dict]:
    """One scripted-backend line per task: ``{"id", "responses"}``."""
    if not settings.responses:
        raise UserError(
            "trainer.warm_start: this recipe has no packaged solutions to fine-tune on; set "
            "trainer.warm_start.responses (e.g. ['ANSWER: {answer}']) or drop --warm-start"
        )
    script = []
    for index, row in enumerate(rows):
        task_id = row.get("id", index)
        script.append(
            {"id": str(task_id), "responses": solution_responses(row, settings.responses)}
        )
    return script


def balanced_subset(
    tasks: Sequence[Mapping[str, Any]], field: str, limit: int | None
) -> list[Mapping[str, Any]]:
    """``limit`` training tasks dealt evenly over ``field`` (``trainer.warm_start.balance``);
    the warm start then plays them by their ``id``, which must be unique."""
    from agentfly_cli.train.tasks.balance import deal_evenly

    ids = [task.get("id") for task in tasks]
    missing = sum(1 for value in ids if value is None)
    if missing or len(set(map(str, ids))) != len(ids):
        problem = f"{missing} have no id" if missing else "their ids repeat"
        raise UserError(
            f"trainer.warm_start.balance: the warm start picks its tasks by id, and of the "
            f"{len(tasks)} training tasks {problem}; give every data row a unique id field, "
            "or set trainer.warm_start.balance: null"
        )
    return deal_evenly(tasks, field, limit, setting="trainer.warm_start.balance")


def warn_if_kinds_left_out(
    chosen: Sequence[Mapping[str, Any]], everything: Sequence[Mapping[str, Any]], field: str
) -> None:
    """A warning when the first ``limit`` training tasks miss values of the field RL balances
    over (``trainer.balance``): a data file sorted by kind warm-starts on a few kinds only."""
    seen = {str(task.get(field)) for task in chosen}
    left_out = sorted({str(task.get(field)) for task in everything} - seen)
    if left_out:
        shown = ", ".join(left_out[:5]) + (", ..." if len(left_out) > 5 else "")
        log.warning(
            "the warm start's first %d training tasks hold no task of %d of the %s values RL "
            "balances over (%s); set trainer.warm_start.balance: %s to deal them evenly",
            len(chosen),
            len(left_out),
            field,
            shown,
            field,
        )


def warm_start(
    config: Any, run_dir: Path, *, console: bool = True, tasks: Any = None, **components: Any
) -> Path:
    """Fine-tune ``config``'s model on the packaged solutions of its training tasks; the
    folder of the fine-tuned model (reused when a previous run left it). ``tasks``: the run's
    :class:`~agentfly_cli.train.tasks.run_tasks.RunTasks` (None: read ``data.path`` here).
    ``components``: ``host``, ``tools`` and ``reward``, as for ``resolve_run``."""
    from agentfly_cli.models import resolve_model
    from agentfly_cli.rollout.from_settings import assemble, resolve_run, run_rollout
    from agentfly_cli.rollout.tasks import RowRules, pick_tasks
    from agentfly_cli.settings.train import SFTSettings
    from agentfly_cli.settings.train_backend import TrainBackendSettings
    from agentfly_cli.train.sft.fine_tune import fine_tune
    from agentfly_cli.train.tasks.run_tasks import RunTasks

    settings = config.trainer.warm_start
    folder = Path(run_dir) / FOLDER
    model_dir = folder / "model"
    if (model_dir / "config.json").is_file():
        return model_dir
    ranks = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if ranks > 1:  # every rank would fine-tune into the same folder
        raise UserError(
            f"the warm start runs in one process, not in each of {ranks} ranks: make it first "
            "(agentfly sft, docs/sft.md) and pass its model with --model and --no-warm-start"
        )
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    data = config.data
    if tasks is None:
        tasks = RunTasks.load(data, RowRules.of(config))
    # the training side in file order (no shuffle); its own limit applies below
    split = {"holdout": data.holdout, "holdout_seed": data.holdout_seed, "side": "train"}
    everything = pick_tasks(tasks.rows, tasks.source, None, data.where, **split)
    if settings.balance:
        chosen = balanced_subset(everything, settings.balance, settings.limit)
        picked = {str(task["id"]) for task in chosen}
        played = [task for task in everything if str(task["id"]) in picked]  # file order
    else:
        chosen = played = everything[: settings.limit]
        chose_file_order = "balance" in settings.model_fields_set  # an explicit null
        if settings.limit and config.trainer.balance and not chose_file_order:
            warn_if_kinds_left_out(chosen, everything, config.trainer.balance)
    script = folder / SCRIPT_FILE
    scripted = config.backend.model_copy(update={"name": "scripted", "script": str(script)})

    resolved = resolve_run(
        config.model_copy(
            update={
                "backend": scripted,
                "rollout": config.rollout.model_copy(update={"n": 1}),
                "out": None,
            }
        ),
        tasks=played,
        source=tasks.source,
        **components,
    )
    # the scripted backend, made once the run's tools, envs and options are checked
    from agentfly_cli.backends.scripted import ScriptedBackend, load_script

    lines = solution_script(chosen, settings)
    script.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    rollout = assemble(resolved, ScriptedBackend(load_script(script), resolved.chat))
    run_rollout(rollout, out=str(folder / CHAINS_FILE))
    sft = SFTSettings(
        epochs=settings.epochs,
        batch_size=settings.batch_size,
        min_reward=1.0,  # a solution that failed under the recipe's settings teaches nothing
        holdout=0.0,  # the recipe's held-out tasks are held out already
        micro_batch_tokens=config.trainer.micro_batch_tokens,
        seed=config.trainer.seed,
        backend=TrainBackendSettings(
            lr=settings.lr,
            lr_schedule="cosine",
            warmup_steps=2,
            gradient_checkpointing=config.trainer.backend.gradient_checkpointing,
            device=config.trainer.backend.device,
            dtype=config.trainer.backend.dtype,
        ),
    )
    model = str(resolve_model(config.model))
    fine_tune([folder / CHAINS_FILE], model, folder, sft, console=console, force=True)
    summary = {
        "seconds": round(time.monotonic() - started, 1),
        "tasks": len(chosen),
        "balance": settings.balance,
        "base_model": model,
        "epochs": settings.epochs,
        "lr": settings.lr,
    }
    (folder / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return model_dir
