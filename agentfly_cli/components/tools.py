"""``@tool``: turn a plain function or method into an agent tool.

A tool has a ``name`` and an OpenAI function-calling ``schema`` derived from its type hints and
docstring. ``await my_tool(**arguments)`` validates the arguments, runs the function (sync ones
in a worker thread) under a timeout, and always returns a :class:`ToolResult`: bad arguments,
exceptions and timeouts become error observations the model can read, never crashes.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import inspect
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, overload

import pydantic
from pydantic_core import PydanticSerializationError, to_jsonable_python

from agentfly_cli import settings
from agentfly_cli.components.execution import call_with_timeout, is_async_callable
from agentfly_cli.components.schema import (
    ArgumentsSpec,
    JsonSchemaArguments,
    ToolDefinitionError,
    describe_function,
    format_validation_error,
)

__all__ = [
    "Tool",
    "ToolDefinitionError",
    "ToolErrorKind",
    "ToolResult",
    "tool",
    "truncate_observation",
]

ENV_PARAMETER = "env"
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-style function calling accepts
Default = Literal["default"]


class ToolErrorKind:
    """The error kinds a tool call can end with; rollout metrics count them by these names."""

    INVALID_JSON = "invalid_json"
    INVALID_ARGUMENTS = "invalid_arguments"
    MISSING_ENV = "missing_env"
    TIMEOUT = "timeout"
    EXCEPTION = "exception"
    BAD_RETURN = "bad_return"
    UNKNOWN_TOOL = "unknown_tool"
    PARSE_ERROR = "parse_error"
    UNPARSED_CALL = "unparsed_call"  # tool-call markup the configured parser does not read
    TOO_MANY_CALLS = "too_many_calls"  # calls over rollout.max_calls_per_turn, not run
    NO_CALL = "no_call"  # a turn with no call and no answer, under rollout.no_call: error


@dataclass
class ToolResult:
    """The outcome of one tool call. ``observation`` is what the model sees."""

    observation: str
    status: Literal["ok", "error"] = "ok"
    info: dict[str, Any] = field(default_factory=dict)
    tool: str | None = None
    error_kind: str | None = None
    terminal: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def error(cls, observation: str, kind: str, *, tool: str | None = None, **info: Any):
        """An error observation of the given :class:`ToolErrorKind`."""
        return cls(observation, "error", dict(info), tool=tool, error_kind=kind)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def truncate_observation(text: str, limit: int | None) -> tuple[str, bool]:
    """Cut ``text`` to about ``limit`` characters, keeping its head and tail around a marker."""
    if limit is None or limit <= 0 or len(text) <= limit:
        return text, False
    removed = len(text) - limit
    head = limit - limit // 3
    tail = limit - head
    marker = f"\n...[truncated {removed} of {len(text)} characters]...\n"
    return text[:head] + marker + (text[-tail:] if tail else ""), True


def _render_observation(value: Any) -> str:
    """Any JSON-serialisable value as observation text (strings stay as they are)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    jsonable = to_jsonable_python(value)  # pydantic models, dataclasses, enums, sets, ...
    return json.dumps(jsonable, ensure_ascii=False)


class Tool:
    """A function the model can call. Create one with :func:`tool`."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        terminal: bool = False,
        env: str | None = None,
        timeout: float | None | Default = "default",
        max_observation_chars: int | None | Default = "default",
        arguments: ArgumentsSpec | JsonSchemaArguments | None = None,
        env_spec: Any = None,
    ) -> None:
        """``arguments``: a ready argument spec (e.g. from a JSON Schema) instead of one read
        from ``func``'s signature. ``env_spec``: the :class:`~agentfly_cli.envs.base.EnvSpec`
        of ``env`` when the tool brings its own (MCP tools do) rather than a registered one."""
        if not callable(func):
            raise ToolDefinitionError(f"@tool needs a function, got {type(func).__name__}")
        self.func = func
        if name is None:
            name = getattr(func, "__name__", None)
            if name is None:
                raise ToolDefinitionError(
                    f"cannot name a tool made from a {type(func).__name__}; pass name=..."
                )
        self.name = _checked_tool_name(name)
        self.timeout = settings.tool_timeout() if timeout == "default" else timeout
        if self.timeout is not None and self.timeout <= 0:
            raise ToolDefinitionError(f"tool '{self.name}': timeout must be > 0 or None")
        self.max_observation_chars = (
            settings.max_observation_chars()
            if max_observation_chars == "default"
            else max_observation_chars
        )
        self.terminal = terminal
        self.env = env
        self.env_spec = env_spec
        try:
            parameters = list(inspect.signature(func).parameters)
        except (TypeError, ValueError) as exc:
            raise ToolDefinitionError(f"tool '{self.name}': cannot read its signature") from exc
        self.is_method = bool(parameters) and parameters[0] == "self"
        skip = set(parameters[:1]) if self.is_method else set()
        if env is not None:
            if ENV_PARAMETER not in parameters:
                raise ToolDefinitionError(
                    f"tool '{self.name}' declares env={env!r} but has no '{ENV_PARAMETER}' "
                    "parameter to receive it"
                )
            skip.add(ENV_PARAMETER)
        self._arguments: ArgumentsSpec | JsonSchemaArguments = (
            arguments
            if arguments is not None
            else describe_function(func, skip=skip, label=self.name)
        )
        self.description = description or self._arguments.description or self.name
        self._is_async = is_async_callable(func)
        self._instance: Any = None
        self._attribute: str | None = None
        self.__doc__ = getattr(func, "__doc__", None)
        self.__wrapped__ = func
        self.__module__ = getattr(func, "__module__", __name__)
        self.__qualname__ = getattr(func, "__qualname__", self.name)

    # -- description -------------------------------------------------------------------------
    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments."""
        return self._arguments.parameters

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }

    @property
    def is_bound(self) -> bool:
        """False for a method tool read from its class rather than from an instance."""
        return not self.is_method or self._instance is not None

    def signature_text(self) -> str:
        """Short human summary of the arguments, e.g. ``expression: string``."""
        properties = self.parameters.get("properties", {})
        required = set(self.parameters.get("required", []))
        parts = []
        for argument, spec in properties.items():
            kind = spec.get("type") or ("enum" if "enum" in spec else "any")
            if isinstance(kind, list):
                kind = "|".join(kind)
            parts.append(f"{argument}: {kind}" + ("" if argument in required else " (optional)"))
        return ", ".join(parts)

    def with_name(self, name: str) -> Tool:
        """A copy of this tool under another (validated) name."""
        renamed = copy.copy(self)
        renamed.name = _checked_tool_name(name)
        return renamed

    def __repr__(self) -> str:
        bound = "" if self.is_bound else " unbound"
        return f"<Tool {self.name}({self.signature_text()}){bound}>"

    # -- methods bind per instance -------------------------------------------------------------
    def __set_name__(self, owner: type, attribute: str) -> None:
        self._attribute = attribute

    def __get__(self, instance: Any, owner: type | None = None) -> Tool:
        if instance is None or not self.is_method:
            return self
        cached = getattr(instance, "__dict__", {}).get(self._attribute) if self._attribute else None
        if isinstance(cached, Tool) and cached._instance is instance:
            return cached
        bound = copy.copy(self)
        bound._instance = instance
        if self._attribute and hasattr(instance, "__dict__"):
            instance.__dict__[self._attribute] = bound  # one tool object per instance
        return bound

    # -- calling -------------------------------------------------------------------------------
    async def __call__(self, **arguments: Any) -> ToolResult:
        """Run the tool. A tool that declares ``env=`` takes the env as ``env=...``."""
        env = arguments.pop(ENV_PARAMETER, None) if self.env is not None else None
        return await self.invoke(arguments, env=env)

    def call_sync(self, arguments: Mapping[str, Any] | str | None = None, **kwargs) -> ToolResult:
        """Blocking convenience for scripts and notebooks (not for use inside an event loop)."""
        return asyncio.run(self.invoke(arguments, **kwargs))

    async def invoke(
        self,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        env: Any = None,
        timeout: float | None | Default = "default",
        max_observation_chars: int | None | Default = "default",
    ) -> ToolResult:
        """Validate ``arguments`` (a dict or a JSON object string) and run the tool."""
        if not self.is_bound:
            raise TypeError(
                f"tool '{self.name}' is a method; use it from an instance (obj.{self.name})"
            )
        started = time.perf_counter()
        result = await self._run(arguments, env, self.timeout if timeout == "default" else timeout)
        limit = (
            self.max_observation_chars
            if max_observation_chars == "default"
            else max_observation_chars
        )
        result.observation, truncated = truncate_observation(result.observation, limit)
        if truncated:
            result.info["truncated"] = True
        result.tool = self.name
        result.info["latency_s"] = round(time.perf_counter() - started, 6)
        return result

    async def _run(self, arguments: Any, env: Any, timeout: float | None) -> ToolResult:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                return ToolResult.error(
                    f"arguments for tool '{self.name}' are not valid JSON: {exc.msg} at "
                    f"position {exc.pos}; send a JSON object",
                    ToolErrorKind.INVALID_JSON,
                )
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            return ToolResult.error(
                f"arguments for tool '{self.name}' must be a JSON object, got "
                f"{type(arguments).__name__}",
                ToolErrorKind.INVALID_ARGUMENTS,
            )
        try:
            call_arguments = self._arguments.validate(dict(arguments))
        except pydantic.ValidationError as exc:
            expected = self.signature_text() or "no arguments"
            return ToolResult.error(
                f"{format_validation_error(self.name, exc)}; expected: {expected}",
                ToolErrorKind.INVALID_ARGUMENTS,
            )
        if self.env is not None:
            if env is None:
                return ToolResult.error(
                    f"tool '{self.name}' needs a '{self.env}' environment, but none was given",
                    ToolErrorKind.MISSING_ENV,
                )
            call_arguments[ENV_PARAMETER] = env
        func = functools.partial(self.func, self._instance) if self.is_method else self.func
        try:
            value = await call_with_timeout(func, call_arguments, timeout, is_async=self._is_async)
        except asyncio.TimeoutError:
            return ToolResult.error(
                f"tool '{self.name}' timed out after {timeout:g} s", ToolErrorKind.TIMEOUT
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            message = str(exc).strip() or "(no message)"
            return ToolResult.error(
                f"tool '{self.name}' failed: {type(exc).__name__}: {message}",
                ToolErrorKind.EXCEPTION,
                exception=type(exc).__name__,
            )
        if isinstance(value, ToolResult):  # a copy: the tool may reuse its result object
            return dataclasses.replace(
                value, info=dict(value.info), terminal=value.terminal or self.terminal
            )
        try:
            observation = _render_observation(value)
        except (PydanticSerializationError, TypeError, ValueError) as exc:
            return ToolResult.error(
                f"tool '{self.name}' returned a {type(value).__name__}, which is not "
                f"JSON-serialisable ({exc})",
                ToolErrorKind.BAD_RETURN,
            )
        return ToolResult(observation, "ok", {}, terminal=self.terminal)


def _checked_tool_name(name: str) -> str:
    if not TOOL_NAME.match(name):
        raise ToolDefinitionError(
            f"tool name {name!r} is not valid; use 1-64 letters, digits, '_' or '-'"
        )
    return name


@overload
def tool(func: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    func: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    terminal: bool = False,
    env: str | None = None,
    timeout: float | None | Default = "default",
    max_observation_chars: int | None | Default = "default",
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(func=None, /, **options):
    """Make a tool from a function or method: bare ``@tool`` or ``@tool(name=..., ...)``.

    Options: ``name``, ``description`` (default: the docstring summary), ``terminal`` (a call
    ends the episode), ``env`` (the environment the tool needs; it arrives as the ``env``
    argument), ``timeout`` in seconds and ``max_observation_chars`` (``None``: no limit;
    defaults: ``AGENTFLY_TOOL_TIMEOUT``, 30 s, and ``AGENTFLY_MAX_OBSERVATION_CHARS``, 8192).
    """
    if func is not None:
        return Tool(func, **options)

    def decorate(inner: Callable[..., Any]) -> Tool:
        return Tool(inner, **options)

    return decorate
