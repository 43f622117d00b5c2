"""Train backends: the policy model, its optimizer and LR schedule (torch or DeepSpeed).

The names below import on first use, so that loading the built-in train backends' plugin
module (``agentfly_cli.train_backends.builtin``) stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_cli.plugin_host.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from agentfly_cli.settings.train_backend import LoraSettings, TrainBackendSettings
    from agentfly_cli.train_backends.base import TrainBackend

_EXPORTS = {
    "LoraSettings": "agentfly_cli.settings.train_backend",
    "TrainBackendSettings": "agentfly_cli.settings.train_backend",
    "TrainBackend": "agentfly_cli.train_backends.base",
}


def build_train_backend(
    model_path: str | Path, config: TrainBackendSettings, host: Any = None
) -> TrainBackend:
    """Load the model folder into the train backend registered as ``config.name`` (from
    ``host``, default: the installed plugins); an unknown name is a one-line error."""
    from agentfly_cli.train_backends.base import check_schedule

    check_schedule(config)
    if host is None:
        from agentfly_cli.plugin_host.plugins import get_plugin_host

        host = get_plugin_host()
    return host.components.train_backends.get(config.name).factory(model_path, config)


__all__ = ["LoraSettings", "TrainBackend", "TrainBackendSettings", "build_train_backend"]
__getattr__ = lazy_exports(globals(), _EXPORTS)
