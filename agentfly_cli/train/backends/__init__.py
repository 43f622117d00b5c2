"""Train backends: the policy model, its optimizer and LR schedule (torch or DeepSpeed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentfly_cli.settings.train_backend import LoraSettings, TrainBackendSettings
from agentfly_cli.train.backends.base import TrainBackend, check_schedule


def build_train_backend(
    model_path: str | Path, config: TrainBackendSettings, host: Any = None
) -> TrainBackend:
    """Load the model folder into the train backend registered as ``config.name`` (from
    ``host``, default: the installed plugins); an unknown name is a one-line error."""
    check_schedule(config)
    if host is None:
        from agentfly_cli.plugins import get_plugin_host

        host = get_plugin_host()
    return host.components.train_backends.get(config.name).factory(model_path, config)


__all__ = ["LoraSettings", "TrainBackend", "TrainBackendSettings", "build_train_backend"]
