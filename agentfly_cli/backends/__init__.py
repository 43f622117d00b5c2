"""LLM backends: token ids in, sampled token ids and logprobs out.

The names below import on first use, so that loading the built-in backends' plugin module
(``agentfly_cli.backends.builtin``) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentfly_cli.plugin_host.lazy_exports import lazy_exports

_BASE = "agentfly_cli.backends.base"
_EXPORTS = {
    "Backend": _BASE,
    "BackendUnavailableError": _BASE,
    "Generation": _BASE,
    "RequestContext": _BASE,
    "SamplingParams": _BASE,
    "BackendSettings": "agentfly_cli.settings.rollout",
}

if TYPE_CHECKING:
    from agentfly_cli.backends.base import (
        Backend,
        BackendUnavailableError,
        Generation,
        RequestContext,
        SamplingParams,
    )
    from agentfly_cli.settings.rollout import BackendSettings

__all__ = [
    "Backend",
    "BackendSettings",
    "BackendUnavailableError",
    "Generation",
    "RequestContext",
    "SamplingParams",
]
__getattr__ = lazy_exports(globals(), _EXPORTS)
