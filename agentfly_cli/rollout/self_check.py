"""``agentfly recipes check``: does a recipe's reward tell each task's gold answer from junk?

Every task's gold answer and its junk answers (:mod:`.check_answers`) are played by the
``scripted`` backend through the recipe's own engine: its template, parser, tools, envs and
reward (or its agent program, through the gateway). The script is kept in memory, one line per
chain, served by the chain's position (so rows keep their own ids, and rows without one need
none). A task is **flagged** when its gold answer scores under ``min_gold`` (default: the best
gold score of the checked tasks, i.e. the reward's maximum seen) or when some junk answer scores
within ``margin`` of the gold one (default 1e-9: the gold must score strictly more).

The check tests the reward, not the token budget: unless ``keep_limits``, the rollout's token
limits (``max_tokens_per_turn``, ``max_total_tokens``) are lifted, so that no answer is cut
under a tokenizer other than the one they were tuned for (``--model tiny`` writes code and
documents in several times SmolLM2's tokens). ``max_turns`` stays: a gold answer longer than
the recipe allows is flagged.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.rollout.check_answers import BUILTIN_JUNK, GoldSource, task_answers
from agentfly_cli.settings.run import RunSettings

DEFAULT_MARGIN = 1e-9
TOLERANCE = 1e-9  # float noise allowed under min_gold
UNLIMITED_TOKENS = 10**7  # the token limits of a check that lifts them


@dataclass
class TaskCheck:
    """One task's scores: its gold answer's and each junk answer's, and why it is flagged."""

    index: int  # the task's position among the checked tasks
    task_id: str | None
    gold: float
    junk: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # "gold" or a junk name -> its error
    gold_finish: str | None = None  # why the gold chain ended (``length``: cut)
    gold_tool_errors: list[str] = field(default_factory=list)  # "kind: observation" of each
    reasons: list[str] = field(default_factory=list)

    @property
    def flagged(self) -> bool:
        return bool(self.reasons)

    @property
    def best_junk(self) -> tuple[str, float] | None:
        """The junk answer that scored highest, and its score."""
        if not self.junk:
            return None
        name = max(self.junk, key=lambda k: self.junk[k])
        return name, self.junk[name]

    def to_dict(self) -> dict[str, Any]:
        best = self.best_junk
        return {
            "index": self.index,
            "task": self.task_id,
            "gold": self.gold,
            "best_junk": best[0] if best else None,
            "best_junk_score": best[1] if best else None,
            "junk": dict(self.junk),
            "errors": dict(self.errors),
            "gold_finish": self.gold_finish,
            "gold_tool_errors": list(self.gold_tool_errors),
            "flagged": self.flagged,
            "reasons": list(self.reasons),
        }


@dataclass
class CheckReport:
    """What ``agentfly recipes check`` found for one recipe."""

    recipe: str
    model: str
    split: str
    min_gold: float
    margin: float
    tasks: list[TaskCheck]
    chains: int
    seconds: float

    @property
    def flagged(self) -> list[TaskCheck]:
        return [task for task in self.tasks if task.flagged]

    @property
    def ok(self) -> bool:
        return not self.flagged

    def junk_summary(self) -> dict[str, dict[str, Any]]:
        """Per junk kind: how many tasks played it, its mean and best score, and on how many
        tasks it scored within the margin of the gold (``fooled``)."""
        out: dict[str, dict[str, Any]] = {}
        for task in self.tasks:
            for name, score in task.junk.items():
                kind = out.setdefault(name, {"played": 0, "mean": 0.0, "max": None, "fooled": 0})
                kind["played"] += 1
                kind["mean"] += score
                kind["max"] = score if kind["max"] is None else max(kind["max"], score)
                kind["fooled"] += score > task.gold - self.margin
        for kind in out.values():
            kind["mean"] /= kind["played"]
        order = {name: i for i, name in enumerate(BUILTIN_JUNK)}
        return dict(sorted(out.items(), key=lambda item: (order.get(item[0], 99), item[0])))

    def to_dict(self) -> dict[str, Any]:
        golds = [task.gold for task in self.tasks]
        return {
            "recipe": self.recipe,
            "model": self.model,
            "split": self.split,
            "ok": self.ok,
            "tasks_checked": len(self.tasks),
            "flagged_count": len(self.flagged),
            "chains": self.chains,
            "seconds": round(self.seconds, 2),
            "min_gold": self.min_gold,
            "margin": self.margin,
            "gold": {
                "mean": sum(golds) / len(golds) if golds else None,
                "min": min(golds, default=None),
                "max": max(golds, default=None),
            },
            "junk": self.junk_summary(),
            "flagged": [task.to_dict() for task in self.flagged],
            "tasks": [task.to_dict() for task in self.tasks],
        }


def check_rows(config: RunSettings) -> tuple[list[dict[str, Any]], str]:
    """The task rows the check reads: ``config.data``'s side of its file (split and limit
    set), and the file's name."""
    from agentfly_cli.rollout.tasks import RowRules, data_side, read_tasks

    if not config.data.path:
        raise UserError(f"recipe {config.name!r} has no data to check; set data.path")
    path = str(config.data.path)
    rows = data_side(read_tasks(path, RowRules.of(config)), config.data, path)
    if not rows:
        raise UserError(f"{path}: no task to check in split {config.data.split}; pick another "
                        "--split or loosen data.where")  # fmt: skip
    return rows, path


def check_settings(
    config: RunSettings,
    *,
    host: Any = None,
    gold: Any = None,
    junk: Sequence[str | Sequence[str]] | None = None,
    min_gold: float | None = None,
    margin: float = DEFAULT_MARGIN,
    out: str | None = None,
    keep_limits: bool = False,
    tools: list | None = None,
    reward: Any = None,
) -> CheckReport:
    """Check ``config``'s reward on its tasks (``config.data``: its split and limit apply).
    ``gold`` and ``junk`` replace and extend the config's ``check`` section; ``out``: write
    every chain played (JSONL); ``keep_limits``: play under the rollout's token limits;
    ``tools``/``reward``: objects, as for ``resolve_run``."""
    from agentfly_cli.backends.scripted import ScriptedBackend
    from agentfly_cli.rollout.from_settings import assemble, resolve_run, run_rollout

    started = time.perf_counter()
    section = config.check
    gold = gold if gold else (section.gold if section is not None else None)
    if not gold and section is not None and section.missing:
        raise UserError(section.missing)  # the recipe says why it has none, and the fix
    if not gold:
        raise UserError(
            f"recipe {config.name!r} has no check section: add check: {{gold: 'ANSWER: "
            "{answer}'} to it (a response template of the row's fields), or pass --gold "
            "TEMPLATE"
        )
    if margin < 0:
        raise UserError(f"--margin {margin:g}: give a margin of 0 or more (e.g. 1e-9)")
    if config.reward == [] and reward is None and config.agent is None:
        raise UserError(f"recipe {config.name!r} has no reward to check; set reward")
    rows, path = check_rows(config)
    extra = [*(section.junk if section is not None else []), *(junk or [])]
    skip = section.skip_junk if section is not None else []
    answers = task_answers(rows, GoldSource(gold), extra, skip)
    plays = [(i, "gold", a.gold) for i, a in enumerate(answers)]
    plays += [(i, name, said) for i, a in enumerate(answers) for name, said in a.junk.items()]
    turns = config.rollout.max_turns
    script = [[*said, *[""] * max(0, turns - len(said))] for _, _, said in plays]
    scripted = config.backend.model_copy(update={"name": "scripted", "script": None})
    rollout = {"n": 1}
    if not keep_limits:
        rollout.update(max_tokens_per_turn=UNLIMITED_TOKENS, max_total_tokens=UNLIMITED_TOKENS)
    run_config = config.model_copy(
        update={"backend": scripted, "rollout": config.rollout.model_copy(update=rollout),
                "out": None}
    )  # fmt: skip
    resolved = resolve_run(
        run_config, host, tasks=[rows[i] for i, _, _ in plays], source=path,
        tools=tools, reward=reward,
    )  # fmt: skip
    run = assemble(resolved, ScriptedBackend(script, resolved.chat))
    result = run_rollout(run, out=out)
    chains: dict[int, Any] = {}
    for trajectory in result.trajectories:  # an agent's episode may hold several segments
        chains.setdefault(trajectory.task_index, trajectory)
    tasks = [TaskCheck(i, _id(row), 0.0) for i, row in enumerate(rows)]
    for position, (i, name, _) in enumerate(plays):
        chain = chains.get(position)
        score = 0.0 if chain is None or chain.reward is None else float(chain.reward)
        error = "the chain was not played" if chain is None else chain.error
        if name == "gold":
            tasks[i].gold = score
            tasks[i].gold_finish = None if chain is None else chain.finish_reason
            tasks[i].gold_tool_errors = [
                f"{call.error_kind or 'error'}: {' '.join(call.observation.split())[:160]}"
                for call in (chain.tool_calls if chain is not None else [])
                if call.status != "ok"
            ]
        else:
            tasks[i].junk[name] = score
        if error:
            tasks[i].errors[name] = error
    floor = max(t.gold for t in tasks) if min_gold is None else min_gold
    for task in tasks:
        judge(task, floor, margin)
    return CheckReport(
        config.name, resolved.model_path, config.data.split, floor, margin, tasks,
        len(plays), time.perf_counter() - started,
    )  # fmt: skip


def judge(task: TaskCheck, min_gold: float, margin: float) -> None:
    """Set ``task``'s reasons: its gold under ``min_gold``, or a junk answer within
    ``margin`` of its gold."""
    if "gold" in task.errors:
        task.reasons.append(f"the gold chain failed: {task.errors['gold'][:160]}")
    if task.gold_finish == "length":
        task.reasons.append(
            "the gold chain was cut by the token limits (rollout.max_tokens_per_turn, "
            "max_total_tokens): check without --keep-limits, or raise them"
        )
    if task.gold < min_gold - TOLERANCE:
        task.reasons.append(f"gold scores {task.gold:.4g}, under the min-gold {min_gold:.4g}")
    fooled = [name for name, score in task.junk.items() if score > task.gold - margin]
    for name in fooled:
        task.reasons.append(f"{name} scores {task.junk[name]:.4g}, not below the gold's "
                            f"{task.gold:.4g}")  # fmt: skip
    if task.reasons and task.gold_tool_errors:  # the likely cause first: a tool or env failed
        count = len(task.gold_tool_errors)
        task.reasons.insert(0, f"the gold chain met {count} tool error(s), first "
                               f"{task.gold_tool_errors[0]}")  # fmt: skip


def _id(row: Mapping[str, Any]) -> str | None:
    value = row.get("id")
    return None if value is None else str(value)
