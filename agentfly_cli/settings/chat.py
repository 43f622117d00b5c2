"""How tool results come back to the model: ``chat.observation``."""

from __future__ import annotations

import string

from pydantic import BaseModel, ConfigDict, Field, field_validator

_PLACEHOLDERS = {"observation", "name"}


class ObservationSettings(BaseModel):
    """How tool results come back to the model (per recipe).

    With ``role="tool"`` each result is its own tool message. With any other role (e.g. "user"
    for templates without a tool role) all results of one turn go into one message, joined by
    newlines. ``template`` formats each result; placeholders: ``{observation}``, ``{name}``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: str = Field(
        "tool",
        description='tool: one tool message per result; another role (e.g. "user", for '
        "templates without a tool role): all results of a turn in one message",
    )
    template: str = Field(
        "{observation}", description="formats each result; placeholders {observation}, {name}"
    )

    @field_validator("role")
    @classmethod
    def _check_role(cls, role: str) -> str:
        if not role.strip():
            raise ValueError('role must not be empty; use "tool" or e.g. "user"')
        return role

    @field_validator("template")
    @classmethod
    def _check_template(cls, template: str) -> str:
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
        except ValueError as exc:
            raise ValueError(
                f"bad format string ({exc}); write literal braces as {{{{ }}}}"
            ) from exc
        unknown = fields - _PLACEHOLDERS
        if unknown:
            raise ValueError(
                f"unknown placeholder(s) {', '.join(sorted(unknown))}; use {{observation}} "
                "and {name}"
            )
        if "observation" not in fields:
            raise ValueError("template must contain {observation}, e.g. 'RESULT: {observation}'")
        return template

    def format(self, name: str | None, observation: str) -> str:
        """One result as the model will read it."""
        return self.template.format(observation=observation, name=name or "")
