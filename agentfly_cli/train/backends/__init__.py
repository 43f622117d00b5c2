"""Train backends: the policy model, its optimizer and LR schedule (torch or DeepSpeed)."""

from agentfly_cli.train.backends.base import TrainBackend, build_train_backend
from agentfly_cli.train.backends.config import LoraSettings, TrainBackendConfig

__all__ = ["LoraSettings", "TrainBackend", "TrainBackendConfig", "build_train_backend"]
