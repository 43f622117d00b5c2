"""Each chain's tools: the run's, plus the ones its task row declares (``data.tools_field``).

A row's tools are schemas without an implementation. Each becomes a :class:`Tool` whose
arguments are checked against the row's schema (a bad call is an ``invalid_arguments`` error
observation, as for any tool) and whose call does what ``rollout.task_tools.on_call`` says:
``end`` the chain after the turn (finish ``declared_call``), answer with a ``mock``, or send
the call to an ``env``. A row's ``unlisted_tools`` names tools of its own that are callable
but not rendered (a later user turn describes them). A chain's :class:`ToolSet` (schemas
for the template, the parser, the callable tools) is built once per distinct tool set and
kept by its content, so a thousand rows with a thousand tool sets cost a thousand small
builds, not a thousand per turn.
"""

from __future__ import annotations

import inspect
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfly_cli.chat.tool_visibility import warn_if_tools_unseen
from agentfly_cli.components.schema import JsonSchemaArguments
from agentfly_cli.components.tools import Tool, ToolResult
from agentfly_cli.errors import UserError
from agentfly_cli.rollout.task_tool_schemas import row_tool_schemas
from agentfly_cli.settings.rollout import TaskToolsSettings
from agentfly_cli.trajectory import FINISH_REASONS

MOCK_FIELD = "mock_results"  # a row's {tool name: observation} for on_call: mock
#: a row's tool names that are callable but not rendered by the template (a later user turn
#: describes them, as BFCL's miss_func adds held-out functions in a user message)
UNLISTED_FIELD = "unlisted_tools"
CACHE_SIZE = 4096  # tool sets kept (by content)


@dataclass(frozen=True)
class ToolSet:
    """The tools of one chain."""

    schemas: list[dict[str, Any]] | None  # what the template renders: the run's, then the row's
    parser: Any  # the parser, typed by these schemas where its format reads values by schema
    tools: Mapping[str, Tool]  # every tool the chain may call, by name
    declared: frozenset[str] = field(default_factory=frozenset)  # the row's tool names


class TaskTools:
    """The run's tools and a cache of the tool sets that rows bring."""

    def __init__(
        self,
        chat: Any,
        parser: Any,
        tools: Sequence[Tool],
        settings: TaskToolsSettings | None = None,
        tools_field: str | None = "tools",
    ) -> None:
        self.chat = chat
        self.settings = settings or TaskToolsSettings()
        self.field = tools_field
        self._parser = parser
        self._parser_name = str(getattr(parser, "name", ""))
        with_tools = getattr(parser, "with_tools", None)
        self._with_tools = with_tools if callable(with_tools) else None
        run_tools = {t.name: t for t in tools}
        schemas = [t.schema for t in tools] or None
        self.base = ToolSet(schemas, self._typed_parser(schemas), run_tools)
        warn_if_tools_unseen(chat, schemas, self._parser_name)
        self._visibility_checked = bool(schemas)  # one warning check per run, not per row
        self._sets: OrderedDict[str, ToolSet] = OrderedDict()  # by content
        self._by_id: OrderedDict[int, tuple] = OrderedDict()  # by the row's own list

    @property
    def envs(self) -> tuple[str, ...]:
        """The env that the row tools' calls go to (``on_call: env``), if any."""
        if self.field and self.settings.on_call == "env" and self.settings.env:
            return (self.settings.env,)
        return ()

    def check(self, tasks: Sequence[Mapping[str, Any]], source: str) -> None:
        """Read every task's tools (a UserError naming ``source`` row N for one that cannot
        be read or that names a run tool); the sets stay cached for the chains."""
        if not self.field:
            return
        for number, task in enumerate(tasks, 1):
            self._for_task(task, f"{source} row {number}")

    def for_task(self, task: Mapping[str, Any]) -> ToolSet:
        """The tool set of a chain on ``task`` (the run's own when the row brings none)."""
        return self._for_task(task, "a task")

    def _for_task(self, task: Mapping[str, Any], where: str) -> ToolSet:
        raw = task.get(self.field) if self.field and isinstance(task, Mapping) else None
        if raw is None or raw == [] or raw == "":
            return self.base
        mocks = task.get(MOCK_FIELD) if self.settings.on_call == "mock" else None
        unlisted = task.get(UNLISTED_FIELD)
        seen = self._by_id.get(id(raw))  # the same row again (its n chains, a later epoch)
        if seen is not None and seen[0] is raw and seen[1] is mocks and seen[2] is unlisted:
            return seen[3]
        key = _content_key(raw, mocks) + ("\0" + json.dumps(unlisted) if unlisted else "")
        found = self._sets.get(key)
        if found is not None:
            self._sets.move_to_end(key)
        else:
            row = row_tool_schemas(task, self.field, set(self.base.tools), where)
            hidden = _unlisted(unlisted, {s["function"]["name"] for s in row}, where)
            found = self._build(row, mocks if isinstance(mocks, Mapping) else {}, hidden)
            _put(self._sets, key, found)
        _put(self._by_id, id(raw), (raw, mocks, unlisted, found))
        return found

    def _build(
        self, row: list[dict[str, Any]], mocks: Mapping[str, Any], hidden: frozenset[str]
    ) -> ToolSet:
        if not row:
            return self.base
        every = [*(self.base.schemas or []), *row]
        schemas = [s for s in every if s["function"]["name"] not in hidden] or None
        if not self._visibility_checked:
            self._visibility_checked = True
            warn_if_tools_unseen(self.chat, schemas, self._parser_name)
        functions = {schema["function"]["name"]: schema["function"] for schema in row}
        tools = _Tools(self.base.tools, functions, lambda f: self._declared_tool(f, mocks))
        # the parser reads every callable tool, the template renders the listed ones
        return ToolSet(schemas, self._typed_parser(every), tools, frozenset(functions))

    def _typed_parser(self, schemas: list[dict[str, Any]] | None) -> Any:
        if self._with_tools is not None and schemas:
            return self._with_tools(schemas)
        return self._parser

    def _declared_tool(self, function: Mapping[str, Any], mocks: Mapping[str, Any]) -> Tool:
        """A tool with the row's schema whose call does what ``on_call`` says."""
        name = function["name"]
        description = function.get("description") or name
        arguments = _Packed(
            JsonSchemaArguments(
                function["parameters"], label=name, description=description, check=False
            )  # checked when the row was read (rollout/task_tool_schemas.py)
        )
        mode = self.settings.on_call
        if mode == "env":
            tool = Tool(_env_step(name), name="declared", env=self.settings.env,
                        arguments=arguments, description=description)  # fmt: skip
        else:
            text = _mock_text(mocks.get(name, self.settings.mock)) if mode == "mock" else ""
            tool = Tool(_answer(text), name="declared", arguments=arguments,
                        description=description)  # fmt: skip
        tool.name = name  # row names may hold dots (BFCL's math.factorial)
        return tool

    def finish_reason(self, tools: ToolSet, results: Sequence[ToolResult]) -> str | None:
        """``declared_call`` when a row tool's call ran under ``on_call: end``; ``env_done``
        when the env reported done for one (where that finish reason exists)."""
        if not tools.declared:
            return None
        calls = [r for r in results if r.ok and r.tool in tools.declared]
        if not calls:
            return None
        if self.settings.on_call == "end":
            return "declared_call"
        if "env_done" in FINISH_REASONS and any(r.info.get("done") for r in calls):
            return "env_done"
        return None


class _Tools(Mapping):
    """The run's tools and a row's declared ones; each declared tool is built on its first use
    (a row's model calls one or two of its tools, not all)."""

    def __init__(self, run: Mapping[str, Tool], functions: dict[str, Any], build) -> None:
        self._run = run
        self._functions = functions
        self._build = build
        self._built: dict[str, Tool] = {}

    def __getitem__(self, name: str) -> Tool:
        if name in self._run:
            return self._run[name]
        tool = self._built.get(name)
        if tool is None:
            tool = self._built[name] = self._build(self._functions[name])
        return tool

    def __iter__(self):
        yield from self._run
        yield from self._functions

    def __len__(self) -> int:
        return len(self._run) + len(self._functions)

    def __contains__(self, name: object) -> bool:
        return name in self._run or name in self._functions


class _Packed:
    """A row tool's checked arguments, handed to its call as one dict (so that an argument
    may be named ``env``)."""

    def __init__(self, spec: JsonSchemaArguments) -> None:
        self.spec = spec
        self.parameters = spec.parameters
        self.description = spec.description

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"arguments": self.spec.validate(arguments)}


def _unlisted(value: Any, names: set[str], where: str) -> frozenset[str]:
    """A row's ``unlisted_tools``: names of its own tools (a UserError naming ``where`` else)."""
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise UserError(f"{where}: '{UNLISTED_FIELD}' must be a list of the row's tool names")
    unknown = sorted(set(value) - names)
    if unknown:
        raise UserError(f"{where}: '{UNLISTED_FIELD}' names {', '.join(unknown)}, which are not "
                        "among the row's tools")  # fmt: skip
    return frozenset(value)


def _put(cache: OrderedDict, key: Any, value: Any) -> None:
    if len(cache) >= CACHE_SIZE:
        cache.popitem(last=False)
    cache[key] = value


def _content_key(raw: Any, mocks: Any) -> str:
    text = raw if isinstance(raw, str) else json.dumps(raw, sort_keys=True, default=str)
    if mocks is None:
        return text
    return text + "\0" + json.dumps(mocks, sort_keys=True, default=str)


def _mock_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _answer(text: str):
    """The call of a declared tool under ``on_call: end`` (nothing to say) or ``mock``."""

    async def declared(arguments: dict[str, Any]) -> str:
        return text

    return declared


def _env_step(name: str):
    """The call of a declared tool under ``on_call: env``: one step of the chain's env."""

    async def declared(arguments: dict[str, Any], env: Any) -> Any:
        value = env.step({"tool": name, "arguments": arguments})
        if inspect.isawaitable(value):
            value = await value
        return env_result(value)

    return declared


def env_result(value: Any) -> Any:
    """An env step's return as a tool result: a str as it is; a dict's ``observation``, with
    its ``reward`` and ``done`` (and its ``info``) in the result's info for the reward channel."""
    if not isinstance(value, Mapping):
        return value
    observation = value.get("observation", "")
    if not isinstance(observation, str):
        observation = _mock_text(observation)
    extra = value.get("info")
    info = dict(extra) if isinstance(extra, Mapping) else {}
    reward = value.get("reward")
    number = isinstance(reward, (int, float)) and not isinstance(reward, bool)
    info.update(reward=float(reward) if number else None, done=bool(value.get("done", False)))
    return ToolResult(observation, info=info)
