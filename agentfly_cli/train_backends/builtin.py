"""The built-in train backends, registered through the same hook a plugin would use.

A train backend factory takes ``(model_path, config: TrainBackendSettings)`` and returns a
:class:`~agentfly_cli.train_backends.base.TrainBackend`; torch and DeepSpeed load only when a
backend is built. (An FSDP backend, say, is a plugin with one ``register_train_backends``.)
"""

from __future__ import annotations

from agentfly_cli.plugin_host.hookspecs import hookimpl


def make_torch(model_path, config):
    from agentfly_cli.train_backends.torch_backend import TorchBackend

    return TorchBackend(model_path, config)


def make_deepspeed(model_path, config):
    from agentfly_cli.train_backends.deepspeed_backend import DeepSpeedBackend

    return DeepSpeedBackend(model_path, config)


@hookimpl
def register_train_backends(register):
    register("torch", make_torch, "PyTorch on one device (CPU or CUDA); LoRA with PEFT")
    register("deepspeed", make_deepspeed, "DeepSpeed ZeRO 0-3 over ranks (make install-deepspeed)")
