"""Training telemetry: fan per-step metrics out to JSONL, TensorBoard, W&B and the console.

Steps are numbered from 1 everywhere (console, metrics.jsonl, plot): ``log(3, ...)`` records
the third step. A record at step 0 is taken before the first step (an eval, a note).
Heavy packages (torch, tensorboard, wandb, matplotlib) are imported only when used.
"""

from __future__ import annotations

import importlib
import io
import json
import math
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

from agentfly_cli.errors import UserError
from agentfly_cli.telemetry.step_progress import StepProgress

SINKS = ("jsonl", "tensorboard", "wandb")
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.json"
PLOT_FILE = "plot.png"
TENSORBOARD_DIR = "tensorboard"
KL_KEYS = ("kl", "loss/kl")

# (label, keys tried in order, format) of the one-line-per-step console summary
STEP_LINE_FIELDS = (
    ("reward", ("reward/mean",), "{:.3f}"),
    ("loss", ("sft/loss",), "{:.3f}"),
    ("kl", KL_KEYS, "{:.4g}"),
    ("entropy", ("entropy",), "{:.3f}"),
    ("clip", ("clip_frac",), "{:.3f}"),
    ("gnorm", ("grad_norm",), "{:.3g}"),
    ("tok/s", ("throughput/tokens_per_s",), "{:.0f}"),
    ("rollout", ("time/rollout_s",), "{:.1f}s"),
    ("train", ("time/train_s",), "{:.1f}s"),
)

# (label, keys tried in order, format) of the live progress bar's fields, by default
BAR_FIELDS = (
    ("reward", ("reward/mean",), "{:.3f}"),
    ("kl", KL_KEYS, "{:.4g}"),
    ("tok/s", ("throughput/tokens_per_s",), "{:.0f}"),
)


def training_bar_fields(*, kl: bool) -> tuple[tuple[str, tuple[str, ...], str], ...]:
    """The live bar's fields for an RL run: no KL column when the run has no KL term."""
    return tuple(f for f in BAR_FIELDS if kl or f[1] != KL_KEYS)


def training_telemetry(
    config: Any,
    run_dir: Path,
    *,
    console: bool,
    console_file: IO[str] | None,
    start_step: int,
    kl: bool,
    step_progress: StepProgress | None,
) -> Telemetry:
    """The telemetry of an RL run (``config``: its RunSettings), as ``trainer.telemetry``
    says; ``start_step``: the steps a resumed run had finished (0: a new run)."""
    settings = config.trainer.telemetry
    return Telemetry(
        run_dir,
        total_steps=config.trainer.steps,
        sinks=tuple(settings.sinks),
        optional_sinks=default_optional_sinks(settings),
        console=console,
        wandb_project=settings.wandb_project,
        wandb_mode=settings.wandb_mode,
        config=config.model_dump(mode="json"),
        start_step=start_step + 1 if start_step else 0,
        console_file=console_file,
        bar_fields=training_bar_fields(kl=kl),
        step_progress=step_progress,
    )


def default_optional_sinks(settings: Any) -> tuple[str, ...]:
    """The sinks a run did not ask for by name (``trainer.telemetry.sinks`` left at its
    default): tensorboard is then skipped without a word when it is not installed (it is the
    ``tensorboard`` extra)."""
    return () if "sinks" in settings.model_fields_set else ("tensorboard",)


# (title, keys tried in order) of the plot panels after the reward panel
PLOT_PANELS = (
    ("SFT loss", ("sft/loss",)),
    ("SFT held-out loss", ("sft/heldout_loss",)),
    ("KL", KL_KEYS),
    ("entropy", ("entropy",)),
    ("grad norm", ("grad_norm",)),
    ("tool error rate", ("tools/error_rate",)),
    ("assistant turns (mean)", ("turns/mean",)),
    ("tokens / s", ("throughput/tokens_per_s",)),
)


class _StepDisplay(Progress):
    """The live display: the run's bar, and below it the running step's phase (rollout
    chains, train micro-batches, ...) with its tokens and seconds."""

    def __init__(self, *columns: Any, step_progress: StepProgress | None, **options: Any):
        self.step_progress = step_progress  # set first: Progress renders while it is built
        super().__init__(*columns, **options)

    def get_renderables(self):  # Rich's documented hook for what a Progress shows
        yield self.make_tasks_table(self.tasks)
        lines = self.step_progress.lines() if self.step_progress is not None else []
        for line in lines:
            yield Text(f"  {line}")


class Telemetry:
    """Log one dict of scalar metrics per training step to every configured sink.

    ``run_dir/metrics.jsonl`` gets one ``{"step", "time", **metrics}`` line per step (steps
    numbered from 1). On construction, lines with ``step >= start_step`` already in the file
    are dropped, so a resumed run (``start_step`` = first step it will log: the checkpoint's
    step + 1) has no duplicate steps and a fresh run (``start_step=0``) starts an empty file.
    Use it as a context manager so that :meth:`close` (which also writes
    ``run_dir/plot.png``) runs on errors and Ctrl-C too. ``step_progress`` is shown under
    the bar while a step runs. ``optional_sinks`` are skipped without a warning when their
    package is not installed.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        total_steps: int | None,
        sinks: Iterable[str] = ("jsonl", "tensorboard"),
        optional_sinks: Iterable[str] = (),
        console: bool = True,
        wandb_project: str | None = None,
        wandb_mode: str = "offline",
        config: Mapping[str, Any] | None = None,
        start_step: int = 0,
        console_file: IO[str] | None = None,
        bar_fields: tuple[tuple[str, tuple[str, ...], str], ...] = BAR_FIELDS,
        step_progress: StepProgress | None = None,
    ) -> None:
        self.sinks = tuple(dict.fromkeys(sinks))
        self.optional_sinks = frozenset(optional_sinks)  # skipped quietly when not installed
        unknown = [s for s in self.sinks if s not in SINKS]
        if unknown:
            raise UserError(
                f"unknown telemetry sink {unknown[0]!r}; trainer.telemetry.sinks takes "
                f"{', '.join(SINKS)}"
            )
        wandb = _import_wandb() if "wandb" in self.sinks else None

        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.total_steps = total_steps
        self.start_step = start_step
        self.metrics_path = self.run_dir / METRICS_FILE
        self.plot_path = self.run_dir / PLOT_FILE
        self.records: list[dict[str, Any]] = []
        self.closed = False
        self._console = (
            Console(file=console_file, force_terminal=False)
            if console_file is not None
            else Console(stderr=not console)
        )
        self._show = console
        self._jsonl: IO[str] | None = None
        self._writer: Any = None
        self._wandb_run: Any = None
        self._progress: Progress | None = None
        self._task: Any = None
        self._bar_fields = bar_fields
        self.step_progress = step_progress

        if config is not None:
            text = json.dumps(dict(config), indent=2, ensure_ascii=False, default=str)
            (self.run_dir / CONFIG_FILE).write_text(text + "\n", encoding="utf-8")
        try:
            if "jsonl" in self.sinks:
                self._jsonl = _open_jsonl(self.metrics_path, start_step)
            if "tensorboard" in self.sinks:
                self._writer = self._open_tensorboard()
            if wandb is not None:
                self._wandb_run = wandb.init(
                    project=wandb_project,
                    dir=str(self.run_dir),
                    mode=wandb_mode,
                    config=dict(config) if config is not None else None,
                )
            if console:
                self._start_progress()
        except BaseException:
            self.close(plot=False)
            raise

    # -- sinks -----------------------------------------------------------------------------------
    def _open_tensorboard(self) -> Any:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            if "tensorboard" not in self.optional_sinks:
                self.warn(
                    f"tensorboard sink skipped: {exc}; pip install tensorboard to get event files"
                )
            return None
        purge = {"purge_step": self.start_step} if self.start_step > 0 else {}
        return SummaryWriter(log_dir=str(self.run_dir / TENSORBOARD_DIR), **purge)

    def _start_progress(self) -> None:
        fields = [
            TextColumn(f"{label} {{task.fields[f{i}]}}")
            for i, (label, _, _) in enumerate(self._bar_fields)
        ]
        self._progress = _StepDisplay(
            TextColumn("steps done {task.completed:.0f}/{task.fields[total_text]}"),
            BarColumn(),
            *fields,
            TimeRemainingColumn(),
            console=self._console,
            auto_refresh=self._console.is_terminal,
            step_progress=self.step_progress,
        )
        total = self.total_steps
        self._task = self._progress.add_task(
            "train",
            total=total,
            completed=max(self.start_step - 1, 0),
            total_text="?" if total is None else str(total),
            **{f"f{i}": "-" for i in range(len(self._bar_fields))},
        )
        self._progress.start()

    def live_text(self, width: int = 100) -> str:
        """What the live display shows now, as plain text (empty with the console off)."""
        if self._progress is None:
            return ""
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(self._progress.get_renderable())
        return out.getvalue()

    def warn(self, message: str) -> None:
        """Print one warning line to the console (stderr when the console is off)."""
        self._console.print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)

    def note(self, message: str) -> None:
        """Print one plain line to the console (nothing when the console is off)."""
        if self._show:
            self._console.print(message, markup=False, highlight=False, soft_wrap=True)

    # -- logging ---------------------------------------------------------------------------------
    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Write the metrics of ``step`` to every sink and update the console."""
        scalars = self._write(int(step), metrics)
        if self._show:
            self._update_console(int(step), scalars)

    def log_eval(self, updates: int, metrics: Mapping[str, Any]) -> None:
        """Write held-out eval metrics (``eval/*``) taken after ``updates`` steps to every sink,
        as their own record, and print one line."""
        from agentfly_cli.telemetry.eval_line import format_eval_line

        scalars = self._write(int(updates), metrics)
        if self._show:
            line = format_eval_line(int(updates), scalars)
            self._console.print(line, markup=False, highlight=False, soft_wrap=True)

    def log_note(self, step: int, metrics: Mapping[str, Any], line: str) -> None:
        """Write ``metrics`` as their own record at ``step`` to every sink; print ``line``."""
        self._write(int(step), metrics)
        if self._show:
            self._console.print(line, markup=False, highlight=False, soft_wrap=True)

    def _write(self, step: int, metrics: Mapping[str, Any]) -> dict[str, float]:
        if self.closed:
            raise RuntimeError("Telemetry.log() after close()")
        record: dict[str, Any] = {"step": step, "time": time.time()}
        record.update((k, _jsonable(v)) for k, v in metrics.items() if k not in record)
        self.records.append(record)
        scalars = {k: v for k, v in record.items() if k not in ("step", "time")}
        scalars = {k: v for k, v in scalars.items() if isinstance(v, float)}

        if self._jsonl is not None:
            self._jsonl.write(json.dumps(record, ensure_ascii=False) + "\n")
            self._jsonl.flush()
        if self._writer is not None:
            for key, value in scalars.items():
                self._writer.add_scalar(key, value, global_step=step)
            self._writer.flush()
        if self._wandb_run is not None:
            self._wandb_run.log(scalars, step=step)
        return scalars

    def _update_console(self, step: int, scalars: Mapping[str, float]) -> None:
        line = format_step_line(step, self.total_steps, scalars)
        self._console.print(line, markup=False, highlight=False, soft_wrap=True)
        if self._progress is not None:
            values = {
                f"f{i}": _pick(scalars, keys, fmt)
                for i, (_, keys, fmt) in enumerate(self._bar_fields)
            }
            self._progress.update(self._task, completed=step, **values)

    # -- closing ---------------------------------------------------------------------------------
    def close(self, *, plot: bool = True) -> None:
        """Stop the live display, close every sink and write ``plot.png`` (idempotent)."""
        if self.closed:
            return
        self.closed = True
        steps = (
            (getattr(self._progress, "stop", None), "console"),
            (getattr(self._jsonl, "close", None), "jsonl"),
            (getattr(self._writer, "close", None), "tensorboard"),
            (getattr(self._wandb_run, "finish", None), "wandb"),
        )
        for action, name in steps:
            if action is None:
                continue
            try:
                action()
            except Exception as exc:  # closing one sink must not keep the others open
                self.warn(f"closing the {name} sink failed: {exc}")
        if plot:
            try:
                source = self.metrics_path if self._jsonl is not None else self.records
                plot_metrics(source, self.plot_path)
            except Exception as exc:
                self.warn(f"could not write {self.plot_path}: {exc}")

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- helpers ---------------------------------------------------------------------------------------
def _import_wandb() -> Any:
    try:
        return importlib.import_module("wandb")
    except ImportError:
        raise UserError(
            "wandb sink asked for but wandb is not installed; "
            "pip install wandb or drop it from trainer.telemetry.sinks"
        ) from None


def _open_jsonl(path: Path, start_step: int) -> IO[str]:
    """Open ``path`` for appending after dropping lines with ``step >= start_step``."""
    if path.exists():
        kept = [line for line in read_metrics(path) if line["step"] < start_step]
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            for record in kept:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    return open(path, "a", encoding="utf-8")  # noqa: SIM115


def _jsonable(value: Any) -> Any:
    """Numbers (also numpy / torch scalars) as float, non-finite ones as None."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, (bool, int, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, str):
        return value
    return str(value)


def _pick(metrics: Mapping[str, Any], keys: Iterable[str], fmt: str) -> str:
    for key in keys:
        value = metrics.get(key)
        if isinstance(value, (int, float)):
            return fmt.format(value)
    return "-"


def format_step_line(step: int, total_steps: int | None, metrics: Mapping[str, Any]) -> str:
    """One compact, plain-text line per step (numbered from 1; absent metrics left out)."""
    parts = [f"step {step}/{total_steps if total_steps is not None else '?'}"]
    for label, keys, fmt in STEP_LINE_FIELDS:
        text = _pick(metrics, keys, fmt)
        if text != "-":
            parts.append(f"{label} {text}")
    return " | ".join(parts)


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl file; torn or foreign lines are skipped."""
    records = []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                records.append(record)
    return records


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = {}
    for record in records:
        value = record.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            points[record["step"]] = float(value)
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def plot_metrics(
    metrics: str | os.PathLike | Iterable[Mapping[str, Any]], out_png: str | os.PathLike
) -> Path:
    """Draw the key training curves of a metrics.jsonl file (or its records) into a PNG.

    Panels: reward mean with a band of one std (with the held-out eval reward where one was
    logged; left out only when no reward but other metrics were logged, as by SFT), the SFT
    losses, then KL, entropy, grad norm, tool error rate, assistant turns and
    tokens/s, each only when the metric was logged.
    """
    if isinstance(metrics, (str, os.PathLike)):
        records = read_metrics(metrics)
    else:
        records = [dict(r) for r in metrics if isinstance(r.get("step"), int)]
    fig = plot_figure(records)
    out_png = Path(out_png)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    out_png.write_bytes(buffer.getvalue())
    return out_png


def plot_figure(records: list[dict[str, Any]]) -> Any:
    """The matplotlib Figure that :func:`plot_metrics` saves; x is the step of each record."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [(title, series) for title, keys in PLOT_PANELS for series in _first(records, keys)]
    steps, mean = _series(records, "reward/mean")
    held_steps, held = _series(records, "eval/reward_mean")
    with_reward = bool(steps or held_steps or not panels)  # an SFT run logs no reward

    count = int(with_reward) + len(panels)
    cols = 1 if count == 1 else 2
    rows = -(-count // cols)
    fig = Figure(figsize=(6.0 * cols, 3.2 * rows), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()

    ax = axes[0]
    if with_reward:
        ax.set_title("reward (mean ± std)")
    if with_reward and steps:
        marker = "." if len(steps) < 50 else None
        ax.plot(steps, mean, color="tab:blue", marker=marker, label="training rollouts")
        std = dict(zip(*_series(records, "reward/std"), strict=True))
        if std:
            # the band stays within the step's observed min and max (rewards are often bounded)
            floor = dict(zip(*_series(records, "reward/min"), strict=True))
            ceiling = dict(zip(*_series(records, "reward/max"), strict=True))
            low = [
                max(m - std.get(s, 0.0), floor.get(s, float("-inf")))
                for s, m in zip(steps, mean, strict=True)
            ]
            high = [
                min(m + std.get(s, 0.0), ceiling.get(s, float("inf")))
                for s, m in zip(steps, mean, strict=True)
            ]
            ax.fill_between(steps, low, high, color="tab:blue", alpha=0.2, linewidth=0)
    if with_reward and held_steps:  # held-out eval, drawn at the steps done (0: before step 1)
        ax.plot(held_steps, held, color="tab:green", marker="s", label="held-out eval")
        ax.legend(loc="best", fontsize="small")
    if with_reward and not steps and not held_steps:
        ax.text(0.5, 0.5, "no reward logged", ha="center", va="center", transform=ax.transAxes)
    for ax, (title, (steps, values)) in zip(axes[int(with_reward) :], panels, strict=False):
        ax.plot(steps, values, color="tab:orange", marker="." if len(steps) < 50 else None)
        ax.set_title(title)
    for ax in axes[:count]:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig


def _first(records: list[dict[str, Any]], keys: Iterable[str]) -> list[tuple[list, list]]:
    """The series of the first key with data, as a one-element list (empty when none)."""
    for key in keys:
        steps, values = _series(records, key)
        if steps:
            return [(steps, values)]
    return []
