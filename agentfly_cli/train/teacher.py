"""The teacher of on-policy distillation (``trainer.distill.teacher``): resolved and checked
against the student's tokenizer at setup, then loaded where the reference model would be
(the policy's dtype and device, frozen, in eval mode)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError

FIELD = "trainer.distill.teacher"


def resolve_teacher(spec: str) -> Path:
    """The teacher's local folder: a path, or a ``--model`` alias (built on first use)."""
    from agentfly_cli.models.resolve import known_models, resolve_model

    path = Path(spec).expanduser()
    aliases = ", ".join(sorted(known_models()))
    if not path.exists() and (os.sep in spec or spec.lower() not in known_models()):
        raise UserError(
            f"{FIELD}: no model folder at {spec!r}; pass a local model folder that has the "
            f"student's tokenizer, or an alias: {aliases}"
        )
    try:
        return resolve_model(spec)
    except UserError as exc:
        raise UserError(f"{FIELD}: {exc}") from None


def vocab_difference(student: Any, teacher: Any) -> str | None:
    """How two tokenizers' vocabularies (token -> id, added tokens included) differ, in a few
    words; None when they are the same."""
    ours, theirs = student.get_vocab(), teacher.get_vocab()
    if ours == theirs:
        return None
    if len(ours) != len(theirs):
        return f"{len(ours)} vs {len(theirs)} tokens"
    token = next(t for t in sorted(ours) if ours[t] != theirs.get(t))
    other = theirs.get(token)
    where = "absent" if other is None else f"id {other}"
    return f"token {token!r} is id {ours[token]} in the student's and {where} in the teacher's"


def check_teacher(spec: str, student_tokenizer: Any, student: str, loader: str = "auto") -> Path:
    """The teacher's folder, once its tokenizer is known to be the student's (same tokens with
    the same ids); a one-line UserError naming both models otherwise."""
    from agentfly_cli.chat.tokenizer_loading import load_tokenizer

    path = resolve_teacher(spec)
    try:
        tokenizer = load_tokenizer(path, loader)
    except UserError as exc:
        raise UserError(f"{FIELD}: {exc}") from None
    difference = vocab_difference(student_tokenizer, tokenizer)
    if difference is not None:
        raise UserError(
            f"{FIELD}: the teacher {spec!r} and the student {student!r} have different "
            f"tokenizers ({difference}); distillation scores the student's token ids, so pick "
            "a teacher with the student's tokenizer (e.g. one trained from the same base model)"
        )
    return path


def load_teacher(path: Path, train: Any) -> Any:
    """The teacher's weights, as the reference model's: the policy's dtype and device, frozen."""
    from agentfly_cli.train_backends.base import load_reference_model

    return load_reference_model(path, train)


def frozen_models(needs_reference: bool, model_path: Any, teacher: Path | None, train: Any):
    """The frozen models of a run, loaded the same way (the policy's dtype and device): the
    reference (the KL's, when ``needs_reference``) and the distillation teacher (when a
    checked ``teacher`` folder is given); None for each one the run does not use."""
    from agentfly_cli.train_backends.base import load_reference_model

    reference = load_reference_model(model_path, train) if needs_reference else None
    return reference, (load_teacher(teacher, train) if teacher is not None else None)
