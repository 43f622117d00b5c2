"""Session capture: every request of an agent's episode, recorded token-exactly for training.

An episode (one session id) is a list of **segments**, each a :class:`Trajectory`. A request
whose messages extend a segment's conversation (its messages, then the reply the gateway gave,
as the agent echoes it back) extends that segment: the new messages are rendered as the
template's delta after the last reply (mask 0), and the model samples behind the exact ids it
saw before. Nothing is decoded and re-encoded: the model's earlier tokens (a ``<think>`` block
included) stay as they were sampled. A request that does not extend any segment (the agent
trimmed or rewrote its history, or started over) opens a new segment, rendered in full by the
chat template. Segments of an episode share its reward and its group.

Each segment's ``tool_calls`` are the calls the gateway parsed in its replies (``turn``: the
segment's assistant turn), each with the observation the agent sent back for it in the request
that extends the segment (a ``tool`` message, by ``tool_call_id`` or else in order; empty until
then). Their ``status`` is ``ok``: the agent ran them, and only it knows how they went.

Two requests that extend the same segment at once (``n`` > 1, or an agent's parallel calls)
each get their own copy: the second to finish forks the segment at the point both started
from.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from agentfly_cli.backends.base import Generation, RequestContext
from agentfly_cli.trajectory import ToolCallRecord, Trajectory

Conversation = list[tuple]


def message_key(message: dict[str, Any]) -> tuple:
    """What must match for an echoed message to count as the same one: its role, its text,
    and its tool calls' names and arguments (ids and JSON spacing may change on the way)."""
    role = message.get("role", "")
    text = content_text(message.get("content")).strip()
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", call) if isinstance(call, dict) else {}
        arguments = parsed_arguments(function.get("arguments"))
        calls.append((function.get("name", ""), json.dumps(arguments, sort_keys=True)))
    return (role, text, tuple(calls))


def parsed_arguments(arguments: Any) -> Any:
    """A tool call's arguments as OpenAI sends them (a JSON string) parsed; as they are when
    they are not JSON."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            pass
    return arguments


def content_text(content: Any) -> str:
    """An OpenAI message content (a string, None, or a list of parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)


def template_messages(
    messages: list[dict[str, Any]], chat: Any = None, start: int = 0, wire: bool = False
) -> list[dict[str, Any]]:
    """OpenAI messages from ``start`` on as chat templates expect them: text content, tool call
    arguments as objects (templates ``tojson`` them), and each tool result's ``name`` (some
    templates need it; OpenAI sends only the ``tool_call_id``) from the call it answers. With
    ``chat``, tool results are presented as its ``chat.observation`` settings say (a user turn,
    a text template), as in recipes' rollouts. ``wire``: tool calls in OpenAI's wire form
    instead (arguments a JSON string, no content), the only one some templates write
    (DeepSeek-V3's)."""
    out = []
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and call.get("id"):
                names[call["id"]] = (call.get("function") or {}).get("name", "")
    for message in messages[start:]:
        converted = dict(message)
        if converted.get("role") == "tool" and not converted.get("name"):
            name = names.get(converted.get("tool_call_id") or "")
            if name:
                converted["name"] = name
        converted["content"] = content_text(message.get("content"))
        calls = []
        for call in message.get("tool_calls") or []:
            function = dict(call.get("function") or {})
            if "arguments" in function:
                arguments = parsed_arguments(function["arguments"])
                function["arguments"] = (
                    json.dumps(arguments, ensure_ascii=False) if wire else arguments
                )
            calls.append({**call, "function": function})
        if calls:
            converted["tool_calls"] = calls
            if wire and not converted["content"]:
                converted["content"] = None
        else:
            converted.pop("tool_calls", None)
        out.append(converted)
    return out if chat is None else _observations_as_configured(out, chat)


def _observations_as_configured(messages: list[dict[str, Any]], chat: Any) -> list[dict]:
    """Each run of ``tool`` messages replaced by ``chat.observation_messages`` of it."""
    out: list[dict[str, Any]] = []
    results: list[tuple[str | None, str | None, str]] = []
    for message in [*messages, None]:
        if message is not None and message.get("role") == "tool":
            results.append(
                (message.get("name") or None, message.get("tool_call_id"), message["content"])
            )
            continue
        if results:
            out.extend(chat.observation_messages(results))
            results = []
        if message is not None:
            out.append(message)
    return out


_PROBE_TOOL = "agentfly_probe_tool"


def wire_calls(chat: Any) -> bool:
    """Whether ``chat``'s template writes tool calls only in OpenAI's wire form (arguments a
    JSON string, no content), as DeepSeek-V3's does, where structured arguments render no call
    or fail. Probed once per template."""
    from agentfly_cli.chat.templates import ChatTemplateError

    known = getattr(chat, "_wire_calls", None)
    if known is not None:
        return known
    call = {"id": "c1", "type": "function",
            "function": {"name": _PROBE_TOOL, "arguments": {"x": 1}}}  # fmt: skip
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [call]}]  # fmt: skip
    try:
        structured = _PROBE_TOOL in chat.render_text(messages)
    except (ChatTemplateError, AttributeError):
        structured = False
    wire = False
    if not structured:
        messages[1] = template_messages(messages[1:], wire=True)[0]
        try:
            wire = _PROBE_TOOL in chat.render_text(messages)
        except (ChatTemplateError, AttributeError):
            wire = False
    try:
        chat._wire_calls = wire
    except AttributeError:  # a chat object that takes no attributes: probe each time
        pass
    return wire


def _wire(chat: Any, messages: list[dict[str, Any]]) -> bool:
    return any(m.get("tool_calls") for m in messages) and wire_calls(chat)


@dataclass
class Segment:
    """One token-exact trajectory of an episode, and the conversation it holds so far."""

    trajectory: Trajectory
    conversation: Conversation
    turn_closed: bool = True  # its last reply ended with the end-of-turn token


@dataclass
class Plan:
    """Where a request's prompt comes from: a segment it extends (``base``: that segment's
    length when the request began), or a new segment (``segment`` None)."""

    prompt_ids: list[int]
    context_ids: list[int]  # appended with mask 0 before the reply
    conversation: Conversation
    segment: Segment | None = None
    base: int = 0
    added: list[dict[str, Any]] = field(default_factory=list)  # the request's new messages


@dataclass
class Match:
    """The segment a request extends (None: a new one), with its ids as they were then."""

    conversation: Conversation
    segment: Segment | None = None
    ids: list[int] = field(default_factory=list)
    closed: bool = True
    start: int = 0  # the first message after the segment's conversation


@dataclass
class Episode:
    """One session: its segments, its reward, its group; ``task_index`` and ``task_id``: the
    task an agent engine's episode plays (None for a plain ``agentfly serve`` session);
    ``greedy``: every request of it samples at temperature 0, whatever it asks (ReMax's
    baseline episode)."""

    id: str
    group_id: str = ""
    task_index: int | None = None
    task_id: str | None = None
    segments: list[Segment] = field(default_factory=list)
    reward: float | None = None
    requests: int = 0
    busy: int = 0  # requests under way (a busy session never goes idle)
    last_used: float = 0.0  # time.monotonic() of its last request
    greedy: bool = False

    def request_context(self, choice: int = 0) -> RequestContext:
        """What a backend learns of the episode's next request (choice ``choice`` of it): its
        task (index and id) where an engine opened the episode for one, else task 0 with the
        session id as the task id (``agentfly serve``); its turn is the request's number."""
        if self.task_index is None:  # a plain session: no task behind it
            return RequestContext(0, choice, self.requests, self.group_id, self.id)
        return RequestContext(self.task_index, choice, self.requests, self.group_id, self.task_id)

    def plan(self, chat: Any, messages: list[dict[str, Any]], tools: list | None) -> Plan:
        """The prompt for ``messages``: the longest segment they extend, else a new one."""
        return self.render(chat, messages, tools, self.match(messages))

    def match(self, messages: list[dict[str, Any]]) -> Match:
        """Which segment ``messages`` extend (the longest), as it is now: cheap, on the event
        loop; :meth:`render` (the slow part) may then run in a worker thread."""
        conversation = [message_key(m) for m in messages]
        best: Segment | None = None
        for segment in self.segments:
            size = len(segment.conversation)
            if len(conversation) > size and conversation[:size] == segment.conversation:
                if best is None or size > len(best.conversation):
                    best = segment
        if best is None:
            return Match(conversation)
        return Match(conversation, best, list(best.trajectory.ids), best.turn_closed,
                     len(best.conversation))  # fmt: skip

    def render(
        self, chat: Any, messages: list[dict[str, Any]], tools: list | None, match: Match
    ) -> Plan:
        """The plan of a :meth:`match`: the full prompt, or the delta after its segment."""
        if match.segment is None:
            converted = template_messages(messages, chat, wire=_wire(chat, messages))
            ids = chat.render_prompt(converted, tools)
            return Plan(list(ids), list(ids), match.conversation, added=list(messages))
        start = match.start
        new = template_messages(messages, chat, start, _wire(chat, messages[start:]))
        delta = chat.observation_delta(new, tools, closed=match.closed)
        ids = match.ids
        return Plan([*ids, *delta], delta, match.conversation, match.segment, len(ids),
                    list(messages[start:]))  # fmt: skip

    def record(self, plan: Plan, generation: Generation, reply: dict[str, Any], eot: set) -> None:
        """Add the request's context and the sampled reply to its segment (a fork of it when
        another request extended it meanwhile, a new segment when it extended none)."""
        segment = plan.segment
        if segment is None:
            trajectory = Trajectory(group_id=self.group_id, sample_index=len(self.segments))
            trajectory.append("prompt", plan.context_ids, sampled=False)
            segment = Segment(trajectory, [])
            self.segments.append(segment)
        else:
            if len(segment.trajectory.ids) != plan.base:  # extended meanwhile: fork it
                segment = Segment(prefix_copy(segment.trajectory, plan.base), [])
                segment.trajectory.sample_index = len(self.segments)
                self.segments.append(segment)
            segment.trajectory.append("observation", plan.context_ids, sampled=False)
        answer_calls(segment.trajectory, plan.added)
        ids = list(generation.token_ids)
        segment.trajectory.append(
            "assistant",
            ids,
            sampled=True,
            logprobs=generation.logprobs,
            finish_reason=generation.finish_reason,
            policy_version=generation.policy_version,
            episode_turn=self.requests,  # replies numbered in the order they are recorded
        )
        segment.trajectory.token_exact = segment.trajectory.token_exact and generation.token_exact
        segment.trajectory.tool_calls.extend(parsed_calls(segment.trajectory.num_turns - 1, reply))
        segment.conversation = [*plan.conversation, message_key(reply)]
        segment.turn_closed = bool(ids) and ids[-1] in eot
        self.requests += 1

    def trajectories(self) -> list[Trajectory]:
        """The segments' trajectories, each carrying the episode's reward."""
        out = []
        for segment in self.segments:
            segment.trajectory.reward = self.reward
            segment.trajectory.meta["episode"] = self.id
            out.append(segment.trajectory)
        return out


def parsed_calls(turn: int, reply: dict[str, Any]) -> list[ToolCallRecord]:
    """The records of the tool calls the gateway parsed into ``reply`` (assistant turn
    ``turn``); their observations come with the agent's next request."""
    records = []
    for call in reply.get("tool_calls") or []:
        function = call.get("function") or {}
        records.append(
            ToolCallRecord(
                turn=turn,
                id=str(call.get("id") or ""),
                name=str(function.get("name") or ""),
                arguments=parsed_arguments(function.get("arguments")),
                observation="",
                status="ok",
            )
        )
    return records


def answer_calls(trajectory: Trajectory, messages: list[dict[str, Any]]) -> None:
    """Give the calls of the trajectory's last assistant turn the observations that
    ``messages`` bring back: each ``tool`` message answers the call of its ``tool_call_id``,
    or (an id the agent changed or left out) the next call still unanswered, in order."""
    last = trajectory.num_turns - 1
    waiting = [c for c in trajectory.tool_calls if c.turn == last and not c.observation]
    for message in messages:
        if message.get("role") != "tool" or not waiting:
            continue
        call_id = message.get("tool_call_id") or ""
        call = next((c for c in waiting if c.id and c.id == call_id), waiting[0])
        waiting.remove(call)
        call.observation = content_text(message.get("content"))


def prefix_copy(trajectory: Trajectory, length: int) -> Trajectory:
    """A new trajectory holding the turns of ``trajectory`` that end by ``length`` (and the
    tool calls of its assistant turns among them)."""
    copy = Trajectory(group_id=trajectory.group_id, task=dict(trajectory.task))
    for turn in trajectory.turns:
        if turn.end > length:
            break
        sampled = turn.sampled_ids is not None
        logprobs = trajectory.logprobs[turn.start : turn.end]
        copy.append(
            turn.role,
            trajectory.ids[turn.start : turn.end],
            sampled=sampled,
            logprobs=logprobs if sampled and None not in logprobs else None,
            finish_reason=turn.finish_reason,
            policy_version=turn.policy_version,
            episode_turn=turn.episode_turn,
        )
    kept = copy.num_turns
    copy.tool_calls = [dataclasses.replace(c) for c in trajectory.tool_calls if c.turn < kept]
    return copy
