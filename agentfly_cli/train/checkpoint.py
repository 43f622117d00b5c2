"""Checkpoints of a run: ``RUN_DIR/checkpoints/step-000004/``, written atomically.

A checkpoint holds the model as a Hugging Face folder (``model/``, with the tokenizer, so that
``agentfly export`` and ``from_pretrained`` read it as is), the train backend's own state
(optimizer and scheduler, in ``backend/``; the weights are read back from ``model/``, not
stored twice), the trainer's state (``trainer_state.pt``: step, data position, extras such as
a value head) and each rank's RNG states (``rng-rank<N>.pt``). ``step-000004`` is the state
after step 4 (steps are numbered from 1). With ``only_model`` a checkpoint holds ``model/``
and the trainer's state only: it cannot be resumed.

Everything is written into a temporary folder beside the final one, then renamed: a crash
leaves either the previous checkpoint or the new one, never a half-written one. A write that
fails removes the temporary folder; a full disk is one error naming the fix.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import torch

_STEP = re.compile(r"^step-(\d{6,})$")


def _out_of_space(err: BaseException, folder: Path) -> bool:
    """Whether a failed write is the disk running full (:func:`output_paths.out_of_space`)."""
    from agentfly_cli.files.output_paths import out_of_space

    return out_of_space(err, folder)


def _free_bytes(folder: Path) -> int:
    from agentfly_cli.files.output_paths import free_bytes

    return free_bytes(folder)


def rng_state() -> dict[str, Any]:
    """Python, NumPy and torch RNG states (CUDA too where present)."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy

        state["numpy"] = numpy.random.get_state()
    except ImportError:  # pragma: no cover - numpy comes with torch
        pass
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy

        numpy.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class CheckpointManager:
    """Saves, finds, loads and prunes the checkpoints of one run folder."""

    def __init__(self, run_dir: str | Path, *, keep: int = 2) -> None:
        self.root = Path(run_dir) / "checkpoints"
        self.keep = keep

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints, oldest first."""
        if not self.root.is_dir():
            return []
        found = [_STEP.match(p.name) for p in self.root.iterdir() if p.is_dir()]
        return sorted(int(m.group(1)) for m in found if m)

    def path(self, step: int) -> Path:
        return self.root / f"step-{step:06d}"

    def latest(self) -> Path | None:
        steps = self.steps()
        return self.path(steps[-1]) if steps else None

    def save(
        self,
        step: int,
        *,
        backend: Any,
        tokenizer: Any = None,
        data_position: int = 0,
        extra: dict[str, Any] | None = None,
        only_model: bool = False,
    ) -> Path:
        """Write the checkpoint of ``step`` (the number of finished steps); ``only_model``
        leaves out the optimizer, schedule and RNG states (not resumable)."""
        final = self.path(step)
        temp = self.root / f".tmp-step-{step:06d}"  # one name for every rank
        try:
            return self._write(
                step, temp, final, backend, tokenizer, data_position, extra, only_model
            )
        except BaseException as err:  # safetensors' SafetensorError is a bare Exception
            shutil.rmtree(temp, ignore_errors=True)  # the partial copy, not the last good one
            if isinstance(err, Exception) and _out_of_space(err, self.root):
                raise self._disk_full(step) from err
            raise

    def _disk_full(self, step: int) -> Exception:
        from agentfly_cli.errors import UserError

        free = _free_bytes(self.root) / 2**20
        latest = self.latest()
        kept = f"{latest.name} is intact" if latest else "no earlier checkpoint was written"
        return UserError(
            f"the disk ran out of space writing checkpoint step-{step:06d} in {self.root} "
            f"({free:.0f} MiB free after removing the partial copy; {kept}): free space, or "
            "keep fewer checkpoints (trainer.keep_checkpoints) or write them less often "
            "(trainer.save_every), then run the same command with --resume"
        )

    def _write(
        self,
        step: int,
        temp: Path,
        final: Path,
        backend: Any,
        tokenizer: Any,
        data_position: int,
        extra: dict[str, Any] | None,
        only_model: bool,
    ) -> Path:
        if backend.is_main:
            shutil.rmtree(temp, ignore_errors=True)
            temp.mkdir(parents=True)
        backend.barrier()
        backend.save_model(temp / "model")
        if not only_model:
            backend.save_checkpoint(temp / "backend", model_folder=temp / "model")
            torch.save(rng_state(), temp / f"rng-rank{backend.rank}.pt")  # each rank its own
        if backend.is_main:
            if tokenizer is not None:
                tokenizer.save_pretrained(str(temp / "model"))
            state = {"step": step, "data_position": data_position, "extra": extra or {}}
            if only_model:
                state = {**state, "extra": {}, "only_model": True}
            torch.save(state, temp / "trainer_state.pt")
        backend.barrier()
        if backend.is_main:
            self._publish(temp, final)
            self._prune()
        backend.barrier()
        return final

    def _publish(self, temp: Path, final: Path) -> None:
        """Rename ``temp`` into place; an older copy of the same step goes only afterwards."""
        old = final.with_name(f".old-{final.name}")
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(temp, final)
        shutil.rmtree(old, ignore_errors=True)

    def load_latest(self, backend: Any) -> dict[str, Any] | None:
        """Load the newest checkpoint into ``backend``; its trainer state, or None if none."""
        latest = self.latest()
        if latest is None:
            return None
        if not (latest / "backend").is_dir():
            from agentfly_cli.errors import UserError

            raise UserError(
                f"{latest} holds the model only (trainer.save_only_model: true), so training "
                f"cannot resume from it; start a new run on it with --model {latest / 'model'}"
            )
        backend.load_checkpoint(latest / "backend")
        state = torch.load(latest / "trainer_state.pt", weights_only=False)
        rng = latest / f"rng-rank{backend.rank}.pt"
        set_rng_state(
            torch.load(rng if rng.is_file() else latest / "rng-rank0.pt", weights_only=False)
        )
        return state

    def _prune(self) -> None:
        for step in self.steps()[: -self.keep]:
            shutil.rmtree(self.path(step), ignore_errors=True)


def find_model_folder(run_dir: str | Path) -> Path:
    """The HF model folder of a run's newest checkpoint (or ``run_dir`` given a checkpoint)."""
    from agentfly_cli.errors import UserError

    run_dir = Path(run_dir)
    if (run_dir / "model" / "config.json").is_file():
        return run_dir / "model"
    latest = CheckpointManager(run_dir).latest()
    if latest is None or not (latest / "model" / "config.json").is_file():
        raise UserError(
            f"{run_dir} holds no checkpoint; pass the folder of an `agentfly train` run "
            "(it has checkpoints/step-*/model)"
        )
    return latest / "model"
