"""Supervised fine-tuning on trajectories: the warm start before RL.

Reads trajectory files (``agentfly rollout --out``), keeps the token-exact chains that have
trained tokens (with ``min_reward``, only those that scored at least that), and trains the
loss-masked tokens with cross-entropy: exactly the tokens an RL step would train, each with
weight 1. Prompts and tool observations are context, never targets. Typical inputs: a recipe's
packaged solutions played by the scripted backend, or a stronger model's best chains
(rejection sampling).

A seeded share of the tasks is held out; their loss is measured before and after, so that a
run tells memorising from learning.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.files.staged_folder import staged_folder
from agentfly_cli.files.surrogates import json_line
from agentfly_cli.runtime.malloc import trim_heap
from agentfly_cli.settings.train import SFTSettings
from agentfly_cli.trajectory import Trajectory, read_trajectories

SUMMARY_FILE = "sft.json"
MODEL_DIR = "model"
HELDOUT_FILE = "heldout_tasks.jsonl"
TRAIN_FILE = "train_tasks.jsonl"


def build_settings(sets: Sequence[str] = (), **flags: Any) -> SFTSettings:
    """SFT settings from ``--set key=value`` overrides, then the flags that were given (typed
    values at dotted keys), with the loader every command uses."""
    from agentfly_cli.recipes.loader import apply_overrides, apply_values, validate_settings

    defaults = SFTSettings().model_dump()
    # left unset unless --set names it: the default tensorboard sink is then skipped quietly
    # where the extra is missing (telemetry.default_optional_sinks), as in `train`
    defaults["telemetry"].pop("sinks")
    data = apply_overrides(defaults, list(sets))  # keeps the SFT defaults
    apply_values(data, flags)
    return validate_settings(SFTSettings, data, "sft settings")


def default_model(chains: Sequence[Trajectory]) -> str:
    """The model the chains were tokenized for (their rollout's tokenizer folder)."""
    sources = {str(t.meta.get("tokenizer") or "") for t in chains}
    if len(sources) == 1 and (source := sources.pop()) and Path(source).is_dir():
        return source
    raise UserError(
        "the trajectories do not name one model folder that exists here; pass --model "
        "(the model their token ids were made for, e.g. --model smollm2)"
    )


@dataclass
class SFTResult:
    """What a run did: where the model went, what it kept, the losses before and after."""

    out: Path
    model_dir: Path
    kept: int
    dropped: dict[str, int]
    train_chains: int
    heldout_chains: int
    heldout_tasks: int
    optimizer_steps: int
    trained_tokens: int
    heldout_loss_before: float | None
    heldout_loss_after: float | None
    train_loss_first: float | None
    train_loss_last: float | None
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The JSON-able record written to ``sft.json`` and printed by ``--json``."""
        out = {k: v for k, v in self.__dict__.items() if k != "history"}
        out["out"], out["model_dir"] = str(self.out), str(self.model_dir)
        return out


def select_chains(
    trajectories: Sequence[Trajectory], min_reward: float | None
) -> tuple[list[Trajectory], dict[str, int]]:
    """The chains worth imitating, and how many were dropped for each reason."""
    dropped = {"not_token_exact": 0, "no_trained_tokens": 0, "below_min_reward": 0}
    kept = []
    for t in trajectories:
        if not t.token_exact:
            dropped["not_token_exact"] += 1
        elif sum(t.loss_mask) == 0:
            dropped["no_trained_tokens"] += 1
        elif min_reward is not None and not (t.reward is not None and t.reward >= min_reward):
            dropped["below_min_reward"] += 1
        else:
            kept.append(t)
    return kept, dropped


def split_by_task(
    chains: Sequence[Trajectory], fraction: float, seed: int
) -> tuple[list[Trajectory], list[Trajectory]]:
    """(train, held out): a seeded ``fraction`` of the tasks, with all of their chains, is held
    out; at least one task when the fraction is above 0 and there are two tasks or more."""
    keys = list(dict.fromkeys(_task_key(t) for t in chains))
    count = round(len(keys) * fraction)
    if fraction > 0 and len(keys) > 1:
        count = min(max(count, 1), len(keys) - 1)
    held = set(random.Random(f"{seed}:sft-holdout").sample(keys, count)) if count else set()
    train = [t for t in chains if _task_key(t) not in held]
    return train, [t for t in chains if _task_key(t) in held]


def _task_key(t: Trajectory) -> str:
    return t.group_id or f"task-{t.task_index}"


def write_tasks(chains: Sequence[Trajectory], path: Path) -> int:
    """The tasks of ``chains`` (one line per task, in order) as a JSONL task file."""
    tasks = {_task_key(t): t.task for t in chains}
    with open(path, "w", encoding="utf-8") as out:
        for task in tasks.values():
            out.write(json_line(task) + "\n")  # a lone surrogate is escaped
    return len(tasks)


def train_rows(chains: Sequence[Trajectory]) -> list[Any]:
    """Chains as training rows of one group: the micro-batch planner then forwards the prompt
    prefix that *all* chains of a micro-batch share (a recipe's system prompt and examples)
    once, not only a task's own. Exact, and 2.4x faster on code_math's chains
    (``benchmarks/sft_bench.py``)."""
    from agentfly_cli.train.tensors.batch import TrainRow

    return [TrainRow(t.ids, t.loss_mask, "sft") for t in chains]


def load_chains(paths: Sequence[str | Path]) -> list[Trajectory]:
    """Every trajectory of the given JSONL files; group ids made unique per file."""
    chains: list[Trajectory] = []
    for number, path in enumerate(paths):
        if not Path(path).exists():
            raise UserError(
                f"trajectory file {str(path)!r} not found; write one with "
                "`agentfly rollout RECIPE --out FILE.jsonl`"
            )
        for t in read_trajectories(path):
            t.group_id = f"{number}:{_task_key(t)}"
            chains.append(t)
    if not chains:
        raise UserError(f"no trajectories in {', '.join(map(str, paths))}")
    return chains


def check_tokenizer(chains: Sequence[Trajectory], tokenizer: Any, model_dir: Path) -> None:
    """Refuse chains whose token ids come from another vocabulary than the model's."""
    vocab = len(tokenizer)
    for source in dict.fromkeys(str(t.meta.get("tokenizer") or "") for t in chains):
        if not source or not Path(source).is_dir() or Path(source) == model_dir:
            continue
        from agentfly_cli.chat.tokenizer_loading import load_tokenizer

        theirs = load_tokenizer(source)
        if theirs.get_vocab() != tokenizer.get_vocab():
            raise UserError(
                f"the trajectories were tokenized with {source}, whose vocabulary is not the "
                f"model's ({model_dir}); roll them out again with --model set to the model "
                "you fine-tune"
            )
    top = max(max(t.ids) for t in chains)
    if top >= vocab:
        raise UserError(
            f"the trajectories hold token id {top}, beyond the model's vocabulary of {vocab}; "
            "roll them out again with --model set to the model you fine-tune"
        )


class SFTRunner:
    """Cross-entropy on the loss-masked tokens of kept chains, with the torch train backend."""

    def __init__(self, model_dir: Path, settings: SFTSettings) -> None:
        from agentfly_cli.runtime.malloc import return_freed_memory
        from agentfly_cli.train.tensors.logprobs import auto_chunk_size, split_model
        from agentfly_cli.train_backends import build_train_backend

        return_freed_memory()
        self.settings = settings
        try:
            self.train = build_train_backend(model_dir, settings.backend)
        except UserError:
            raise
        except Exception as exc:  # a broken weights file fails in many libraries' own ways
            raise UserError(
                f"cannot load the model in {model_dir} ({type(exc).__name__}: {exc}); pass a "
                "model folder whose weight files are complete"
            ) from None
        self.chunk = settings.logprob_chunk or auto_chunk_size(split_model(self.train.model)[1])
        self.share_prefix = settings.share_prefix

    def _micro_batches(self, rows, indices):
        from agentfly_cli.train.tensors.batch import plan_micro_batches

        plans = plan_micro_batches(
            rows,
            indices,
            max_tokens=self.settings.micro_batch_tokens,
            share_prefix=self.share_prefix,
        )
        return [p.to(self.train.device) for p in plans]

    def _token_nll(self, plan) -> Any:
        from agentfly_cli.train.tensors.logprobs import sequence_logprobs

        stats = sequence_logprobs(
            self.train.model,
            plan.batch,
            chunk_size=self.chunk,
            plain_grads=self.train.plain_grad_accumulation,
        )
        return -stats.logprobs

    def mean_loss(self, rows) -> float | None:
        """Mean cross-entropy per trained token of ``rows`` (None when there are none)."""
        import torch

        if not rows:
            return None
        self.train.model.eval()
        total, tokens = 0.0, 0
        with torch.no_grad():
            for plan in self._micro_batches(rows, range(len(rows))):
                nll = self._token_nll(plan)
                total += float(nll.sum())
                tokens += nll.numel()
        return total / max(tokens, 1)

    def step(self, rows, indices) -> dict[str, float]:
        """One optimizer step on ``rows[indices]``: token-mean cross-entropy."""
        tokens = sum(rows[i].num_trained for i in indices)
        self.train.model.train()
        total = 0.0
        trim_heap()  # train/heap.py
        for plan in self._micro_batches(rows, indices):
            nll = self._token_nll(plan)
            loss = nll.sum() / tokens
            self.train.backward(loss)
            trim_heap()
            total += float(loss.detach())
        grad_norm = self.train.step()
        return {
            "sft/loss": total,
            "grad_norm": grad_norm,
            "lr": self.train.current_lr(),
            "train/trained_tokens": float(tokens),
        }

    def save(self, folder: Path, tokenizer: Any) -> None:
        self.train.save_model(folder)
        tokenizer.save_pretrained(str(folder))


def _train(runner: SFTRunner, rows, held_rows, settings: SFTSettings, telemetry):
    """Epochs of seeded-order batches; the held-out loss before and after. Returns
    (per-step metrics, held-out loss before, after)."""
    before = runner.mean_loss(held_rows)
    if before is not None:
        line = f"held-out loss before training: {before:.3f} ({len(held_rows)} chains)"
        telemetry.log_note(0, {"sft/heldout_loss": before}, line)
    rng = random.Random(f"{settings.seed}:sft-order")
    history: list[dict[str, float]] = []
    for epoch in range(settings.epochs):
        order = list(range(len(rows)))
        rng.shuffle(order)
        for start in range(0, len(order), settings.batch_size):
            began = time.perf_counter()
            metrics = runner.step(rows, order[start : start + settings.batch_size])
            seconds = time.perf_counter() - began
            metrics["sft/epoch"] = float(epoch + 1)
            metrics["time/train_s"] = seconds
            metrics["sft/trained_tokens_per_s"] = metrics["train/trained_tokens"] / seconds
            telemetry.log(len(history) + 1, metrics)  # steps are numbered from 1
            history.append(metrics)
            _stop_unless_finite(metrics["sft/loss"], f"at training step {len(history)}", settings)
    after = runner.mean_loss(held_rows)
    if after is not None:
        _stop_unless_finite(after, "on the held-out chains after training", settings)
        line = f"held-out loss after {len(history)} steps: {after:.3f} (before: {before:.3f})"
        telemetry.log_note(len(history), {"sft/heldout_loss": after}, line)
    return history, before, after


def _stop_unless_finite(loss: float, where: str, settings: SFTSettings) -> None:
    """A loss that is NaN or infinite ends the run: the model would be garbage."""
    if not math.isfinite(loss):
        raise UserError(
            f"the loss became {loss} {where} (lr {settings.backend.lr:g}), so no model "
            "was written; lower --lr, or keep max_grad_norm set (--set backend.max_grad_norm=1)"
        )


def _check_weights(runner: SFTRunner, settings: SFTSettings) -> None:
    """Refuse to save weights that hold NaN or infinity (an lr too large for one step)."""
    import torch

    for name, tensor in runner.train.model.named_parameters():
        if not bool(torch.isfinite(tensor).all()):
            _stop_unless_finite(float("nan"), f"in the weights ({name})", settings)


def fine_tune(
    paths: Sequence[str | Path],
    model: str | None,
    out: str | Path,
    settings: SFTSettings,
    *,
    console: bool = True,
    force: bool = False,
) -> SFTResult:
    """Fine-tune ``model`` (default: the chains' own) on the chains of ``paths``; write
    ``out/model``, ``out/sft.json``, ``out/metrics.jsonl`` and ``out/plot.png``, all at the end
    (a failed run leaves ``out`` as it was)."""
    from agentfly_cli.chat.tokenizer_loading import load_tokenizer
    from agentfly_cli.models.resolve import resolve_model
    from agentfly_cli.telemetry.sinks import Telemetry, default_optional_sinks

    if settings.backend.name != "torch":
        raise UserError(
            "sft trains with the torch backend only; drop "
            f"--set backend.name={settings.backend.name}"
        )
    if model is not None and not model.strip():
        raise UserError("--model is empty; pass a model folder or alias, or leave it out")
    started = time.perf_counter()
    out = Path(out)
    model_dir = out / MODEL_DIR
    if model_dir.exists() and not force:
        raise UserError(f"{model_dir} exists; pass --force to replace it or pick another --out")
    chains, dropped = select_chains(load_chains(paths), settings.min_reward)
    if not chains:
        reasons = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in dropped.items() if v)
        raise UserError(
            f"no chain to learn from ({reasons}); lower --min-reward or roll out chains that score"
        )
    model_path = resolve_model(model) if model else Path(default_model(chains))
    tokenizer = load_tokenizer(model_path)  # as rollouts read it (DeepSeek-V3 needs that)
    check_tokenizer(chains, tokenizer, model_path)
    train_chains, held_chains = split_by_task(chains, settings.holdout, settings.seed)
    with staged_folder(out, replaces=(MODEL_DIR, HELDOUT_FILE)) as stage:
        heldout_tasks = write_tasks(held_chains, stage / HELDOUT_FILE) if held_chains else 0
        write_tasks(train_chains, stage / TRAIN_FILE)  # for RL next, on the same side of the split
        rows, held_rows = train_rows(train_chains), train_rows(held_chains)
        per_epoch = math.ceil(len(rows) / settings.batch_size)
        total_steps = settings.epochs * per_epoch
        backend = settings.backend
        if backend.total_steps is None:
            backend = backend.model_copy(update={"total_steps": total_steps})
        runner = SFTRunner(model_path, settings.model_copy(update={"backend": backend}))
        telemetry = Telemetry(
            stage,
            total_steps=total_steps,
            sinks=settings.telemetry.sinks,
            optional_sinks=default_optional_sinks(settings.telemetry),
            console=console and settings.telemetry.console,
            wandb_project=settings.telemetry.wandb_project,
            wandb_mode=settings.telemetry.wandb_mode,
            config={"sft": settings.model_dump(mode="json"), "data": [str(p) for p in paths]},
            bar_fields=(
                ("loss", ("sft/loss",), "{:.3f}"),
                ("trained tok/s", ("sft/trained_tokens_per_s",), "{:.0f}"),
            ),
        )
        with telemetry:
            history, before, after = _train(runner, rows, held_rows, settings, telemetry)
        _check_weights(runner, settings)
        runner.save(stage / MODEL_DIR, tokenizer)
        result = SFTResult(
            out=out,
            model_dir=model_dir,
            kept=len(chains),
            dropped=dropped,
            train_chains=len(rows),
            heldout_chains=len(held_rows),
            heldout_tasks=heldout_tasks,
            optimizer_steps=len(history),
            trained_tokens=sum(r.num_trained for r in rows) * settings.epochs,
            heldout_loss_before=before,
            heldout_loss_after=after,
            train_loss_first=history[0]["sft/loss"] if history else None,
            train_loss_last=history[-1]["sft/loss"] if history else None,
            seconds=time.perf_counter() - started,
            history=history,
        )
        text = json.dumps(result.summary(), indent=2) + "\n"
        (stage / SUMMARY_FILE).write_text(text, encoding="utf-8")
    return result
