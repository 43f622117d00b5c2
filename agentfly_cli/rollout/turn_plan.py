"""From an assistant turn's text to what the engine does with it.

Parsing of a long turn runs in a worker thread, so that the event loop (every other chain)
never waits on it. The parsed turn becomes a plan: the calls to run, at most
``rollout.max_calls_per_turn`` of them, and the error observations the model will read:
malformed calls, one for the calls over the cap, one for tool-call markup that the parser
does not read (which would otherwise pass for a final answer), and, under ``rollout.no_call:
error``, one for a turn that neither calls a tool nor answers.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from agentfly_cli.chat.formats.markup import unparsed_markup
from agentfly_cli.chat.parsers import ParsedResponse, ToolCall, ToolCallParser
from agentfly_cli.components.tools import ToolErrorKind, ToolResult

OFF_LOOP_CHARS = 2_000  # turns at least this long are parsed in the worker thread
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _parse_executor() -> ThreadPoolExecutor:
    """One worker for every engine: parsers need not be thread-safe, and it is bounded."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentfly-parse")
        return _executor


async def parse_turn(parser: ToolCallParser, text: str) -> ParsedResponse:
    """``parser.parse(text)``; off the event loop when the turn is long."""
    if len(text) < OFF_LOOP_CHARS:
        return parser.parse(text)
    return await asyncio.get_running_loop().run_in_executor(_parse_executor(), parser.parse, text)


@dataclass
class TurnPlan:
    """What one assistant turn asks for."""

    parsed: ParsedResponse
    calls: list[ToolCall] = field(default_factory=list)  # to run, in order
    errors: list[ToolResult] = field(default_factory=list)  # error observations, after results

    @property
    def is_final(self) -> bool:
        """No call and no error: the turn is the chain's answer."""
        return not self.calls and not self.errors


def plan_turn(
    parsed: ParsedResponse, parser: ToolCallParser, max_calls: int, no_call: str = "answer"
) -> TurnPlan:
    """The calls and error observations of a parsed turn, under the per-turn cap.

    ``no_call="error"`` (``rollout.no_call``): a turn with neither a call nor an answer is a
    ``no_call`` error observation rather than the chain's answer."""
    plan = TurnPlan(parsed, parsed.calls[:max_calls])
    expected = getattr(parser, "expected", "") or ""
    for error in parsed.errors[:max_calls]:
        plan.errors.append(
            ToolResult.error(error.message, ToolErrorKind.PARSE_ERROR, raw=error.raw)
        )
    hidden = len(parsed.errors) - max_calls
    if hidden > 0:
        plan.errors.append(
            ToolResult.error(
                f"{hidden} more malformed tool calls in this turn are not shown; fix the ones "
                f"above. {expected}".strip(),
                ToolErrorKind.PARSE_ERROR,
                raw="",
            )
        )
    skipped = len(parsed.calls) - max_calls
    if skipped > 0:
        plan.errors.append(
            ToolResult.error(
                f"this turn made {len(parsed.calls)} tool calls; only the first {max_calls} ran "
                f"and the other {skipped} did not. Make at most {max_calls} calls per turn.",
                ToolErrorKind.TOO_MANY_CALLS,
                raw="",
            )
        )
    if not parsed.calls and parsed.answer is None:
        markup = unparsed_markup(parsed.content)
        if markup is not None:
            plan.errors.append(
                ToolResult.error(
                    f"your turn has tool-call markup ({markup}) in a form this run does not "
                    f"read, so no tool was called. {expected}".strip(),
                    ToolErrorKind.UNPARSED_CALL,
                    raw=markup,
                )
            )
    if no_call == "error" and plan.is_final and parsed.answer is None:
        plan.errors.append(
            ToolResult.error(
                f"your turn called no tool, so nothing happened; this task ends only through "
                f"its tools. {expected}".strip(),
                ToolErrorKind.NO_CALL,
                raw="",
            )
        )
    return plan
