"""``check``: what ``agentfly recipes check`` plays to test a recipe's reward: each task's gold
answer, and junk answers that the gold one must beat."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentfly_cli.settings.train import SolutionStep


class CheckSettings(BaseModel):
    """The recipe's self-check (`agentfly recipes check NAME`): gold and junk answers per task."""

    model_config = ConfigDict(extra="forbid")

    gold: str | list[str | SolutionStep] | None = Field(
        None,
        description="each task's gold answer: a response template of the row's fields (e.g. "
        "'ANSWER: {answer}'), a list of them (one per assistant turn; items may also play a "
        "list field, as trainer.warm_start.responses does), or module:fn / file.py:fn "
        "(the task row -> its list of assistant responses); null: pass --gold",
    )
    junk: list[str | list[str]] = Field(
        default_factory=list,
        description="extra junk answers, each a response template of the row's fields or a "
        "list of them (turns); played besides the built-in junk (an empty reply, \"I don't "
        "know\", an empty and a wrong answer in the gold's format, another task's gold)",
    )
    missing: str | None = Field(
        None,
        description="why the recipe has no gold answer and how to give one: the one line "
        "`recipes check` says (exit code 2) when neither check.gold nor --gold is set",
    )
    skip_junk: list[Literal["empty", "dont_know", "blank_answer", "wrong_answer", "other_task"]] = (
        Field(
            default_factory=list,
            description="built-in junk answers that are not junk for this recipe, left out: "
            "e.g. wrong_answer for code, where a program with one number changed may still "
            "be right",
        )
    )
