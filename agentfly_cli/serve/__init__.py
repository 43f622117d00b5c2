"""The OpenAI-compatible gateway: any agent program's requests, recorded token-exactly.

``build_gateway`` loads a model's chat template, tool-call parser and rollout backend;
:mod:`.app` serves it over HTTP, :mod:`.capture` turns each session into training segments.
"""

from __future__ import annotations

from typing import Any

from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.limits import ServeLimits


def build_gateway(
    model: str,
    *,
    backend: str = "hf",
    parser: str | None = None,
    template: str | None = None,
    max_tokens: int = 1024,
    host: Any = None,
    limits: ServeLimits | None = None,
    before_load: Any = None,
) -> Gateway:
    """A :class:`Gateway` for ``model`` (a folder or an alias such as ``tiny``) on the
    registered rollout ``backend``; ``parser`` and ``template`` override the model's own.
    Every argument is checked before the model's weights load; ``before_load()`` runs then
    (what should fail only once the command line is known good: opening a record file)."""
    from agentfly_cli.chat.parsers import get_parser
    from agentfly_cli.chat.templates import ChatTemplate
    from agentfly_cli.errors import UserError
    from agentfly_cli.models import resolve_model
    from agentfly_cli.settings.rollout import BackendSettings

    if host is None:
        from agentfly_cli.plugin_host.plugins import get_plugin_host

        host = get_plugin_host()
    if max_tokens < 1:
        raise UserError(f"--max-tokens must be at least 1, not {max_tokens}")
    reference = host.components.backends.get(backend)
    path = str(resolve_model(model))
    chat = ChatTemplate.load(path, template)
    chosen = get_parser(parser or chat.default_parser, host=host)
    if before_load is not None:
        before_load()
    settings = BackendSettings(name=backend, model=path)
    rollout_backend = reference.factory(settings, chat)
    if not getattr(rollout_backend, "returns_tokens", True):
        raise UserError(
            f"the {backend} backend does not return the sampled token ids, so the gateway "
            "could not record them; serve with --backend hf or vllm"
        )
    return Gateway(rollout_backend, chat, chosen, model, max_tokens=max_tokens, limits=limits)


__all__ = ["Gateway", "ServeLimits", "build_gateway"]
