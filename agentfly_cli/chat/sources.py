"""Where a chat template comes from: the tokenizer, a packaged name, a .jinja path, or inline."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agentfly_cli.errors import UserError

TEMPLATE_DIR = Path(__file__).resolve().parent / "template_files"


@dataclass(frozen=True)
class TemplateSource:
    """A chat template's Jinja text and the name it is reported under."""

    name: str
    text: str


def packaged_templates() -> dict[str, Path]:
    """The templates shipped in ``chat/template_files``, by name (the file name without .jinja)."""
    return {p.name[: -len(".jinja")]: p for p in sorted(TEMPLATE_DIR.glob("*.jinja"))}


def _looks_like_path(spec: str) -> bool:
    return spec.endswith(".jinja") or os.sep in spec or "/" in spec or Path(spec).is_file()


def resolve_template(tokenizer, template: str | os.PathLike | None) -> TemplateSource:
    """Pick the template text: the tokenizer's own (``None``), a packaged name, a path, or inline.

    Inline Jinja (a string containing ``{{`` or ``{%``) is accepted for recipes that embed it.
    """
    if template is None:
        return TemplateSource("model", _own_template(tokenizer))
    spec = os.fspath(template)
    if "{{" in spec or "{%" in spec:
        return TemplateSource("inline", spec)
    known = packaged_templates()
    if spec in known:
        return TemplateSource(spec, known[spec].read_text(encoding="utf-8"))
    if _looks_like_path(spec):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise UserError(
                f"chat template file {spec!r} not found; pass an existing .jinja file or one of: "
                f"{', '.join(known)}"
            )
        return TemplateSource(spec, _read_template(path, spec))
    raise UserError(
        f"unknown chat template {spec!r}; use one of: {', '.join(known)}, "
        "or a path to a .jinja file"
    )


def _read_template(path: Path, spec: str) -> str:
    """A template file's text; a binary or non-UTF-8 file is a one-line UserError."""
    raw = path.read_bytes()
    try:
        if b"\x00" not in raw:
            return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    raise UserError(f"chat template file {spec!r} is not UTF-8 text; pass a .jinja file")


def _own_template(tokenizer) -> str:
    """The tokenizer's chat template; of named templates, "tool_use" first, then "default"."""
    own = getattr(tokenizer, "chat_template", None)
    if isinstance(own, dict):
        own = own.get("tool_use") or own.get("default") or next(iter(own.values()), None)
    if not own:
        raise UserError(
            "the tokenizer has no chat template; pass --template with a packaged name "
            f"({', '.join(packaged_templates())}) or a .jinja file"
        )
    return own


def guess_parser(text: str) -> str:
    """The tool-call parser that matches the markup a template teaches the model."""
    if "<|channel|>" in text:  # gpt-oss harmony
        return "harmony"
    if "func_name1(params_name1=" in text or "python list of calls" in text:
        return "pythonic"  # Llama 3.2/4's pythonic prompt, or the packaged pythonic template
    if "<｜tool▁call▁begin｜>" in text:
        return "deepseek_v3"
    if "<function=" in text:  # Qwen3-Coder's XML calls, inside <tool_call> tags
        return "qwen3_coder"
    if "<tool_call>" in text:
        return "hermes"
    if "[TOOL_CALLS]" in text:
        return "mistral"
    if "<|python_tag|>" in text or "ipython" in text:
        return "llama3_json"
    return "hermes"
