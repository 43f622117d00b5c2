"""Does the model see the tool schemas? Some chat templates (Gemma 3, DeepSeek-V3 and plain
ChatML ones) drop the ``tools`` argument: the prompt is the same with and without tools, and the
model is asked to call tools it was never shown. Warn once per template."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

# parsers whose tools are described in the system prompt, not by the template
TEXT_PROTOCOL_PARSERS = frozenset({"line", "react"})
_PROBE = [{"role": "user", "content": "AGENTFLYTOOLPROBE"}]
_warned: set[tuple[str, int]] = set()


def template_shows_tools(chat: Any, tools: list[dict]) -> bool:
    """False when ``chat`` renders a prompt identically with and without ``tools``."""
    try:
        with_tools = chat.render_text(_PROBE, tools, add_generation_prompt=True)
        without = chat.render_text(_PROBE, None, add_generation_prompt=True)
    except Exception:  # a template that cannot render this probe: the rollout will say so
        return True
    return with_tools != without


def warn_if_tools_unseen(chat: Any, tools: list[dict] | None, parser_name: str) -> bool:
    """Log a warning (once per template) when the template ignores ``tools`` and the parser
    expects the model to know them from the template. Returns whether it warned."""
    if not tools or parser_name in TEXT_PROTOCOL_PARSERS:
        return False
    key = (str(getattr(chat, "name", "")), hash(str(getattr(chat, "source", ""))))
    if key in _warned or template_shows_tools(chat, tools):
        return False
    _warned.add(key)
    names = ", ".join(str(t.get("function", t).get("name", "?")) for t in tools)
    log.warning(
        "chat template %r ignores `tools`: it renders the same prompt with and without them, so "
        "the model never sees the schemas of %s. Use a template that renders tools (e.g. "
        "--template hermes), or a text protocol (--parser line or react) with the tools "
        "described in chat.system_prompt",
        key[0],
        names,
    )
    return True
