"""Errors that speak to the user: one line, naming the problem and the fix."""

from __future__ import annotations


class AgentflyError(Exception):
    """Base class of the toolkit's own errors."""


class UserError(AgentflyError):
    """Bad input from the user (flag, config, name). The CLI prints it as one line, exit code 2."""


class UnknownComponentError(UserError, KeyError):
    """A tool, reward, env, recipe or backend name that no plugin registered."""

    def __str__(self) -> str:  # KeyError would otherwise wrap the message in quotes
        return str(self.args[0]) if self.args else ""


class ComponentConflictError(UserError):
    """Two plugins registered a component of one kind under the same name."""


class RewardError(AgentflyError):
    """A reward failed and its policy is `on_error="raise"`."""
