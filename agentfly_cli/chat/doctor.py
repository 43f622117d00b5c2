"""The template doctor: does a model folder support token-exact multi-turn RL, and if not, what
to change. One :class:`Verdict` per check, each with the fix when it is not a pass.

Checks: the chat template loads and ends turns with one special token (``end of turn``); the
tokenizer gives back the text it encoded (``tokenizer round trip``); the template shows tool
schemas to the model (``tool schemas``); a tool result appended as the template's delta gives
the same tokens as rendering the longer conversation afresh (``observation deltas``: prefix
preservation and role alternation); the parser reads the tool calls the template writes
(``parser reads the template's calls``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from agentfly_cli.chat.tokenizer_loading import ROUND_TRIP_SAMPLES, SUBSTITUTED

PASS, WARN, FAIL = "pass", "warn", "fail"

CALL = {"name": "calculator", "arguments": {"expression": "2 + 3"}}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
USER = [{"role": "user", "content": "What is 2 + 3?"}]


@dataclass
class Verdict:
    check: str
    status: str  # pass, warn or fail
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def diagnose(
    model: str,
    *,
    parser: str | None = None,
    template: str | None = None,
    observation_role: str = "tool",
    fast: bool = False,
    tokenizer_loader: str = "auto",
) -> list[Verdict]:
    """Every check on ``model`` (a folder or an alias); ``fast``: the ones cheap enough to run
    before each training run (no parser search); ``tokenizer_loader``: backend.tokenizer_loader."""
    from agentfly_cli.chat.templates import ChatTemplate, ChatTemplateError
    from agentfly_cli.models import resolve_model
    from agentfly_cli.settings.chat import ObservationSettings

    path = str(resolve_model(model))
    observation = ObservationSettings(role=observation_role)
    try:
        chat = ChatTemplate.load(path, template, observation, tokenizer_loader=tokenizer_loader)
    except ChatTemplateError as exc:
        return [Verdict("end of turn", FAIL, str(exc), "pass --template chatml (or a .jinja)")]
    verdicts = [end_of_turn(chat), round_trip(chat), tool_schemas(chat)]
    verdicts.append(observation_deltas(chat, template, path))
    verdicts.append(parser_reads_calls(chat, parser or chat.default_parser, search=not fast))
    return verdicts


def end_of_turn(chat: Any) -> Verdict:
    ids = chat.encode_response("Hello.")
    eot = chat.eot_token_ids[0]
    text = chat.decode([eot])
    if ids[-1:] != [eot]:
        return Verdict("end of turn", FAIL, f"a reply does not end with {text!r}",
                       "pass --template chatml (or a .jinja)")  # fmt: skip
    also = [chat.decode([i]) for i in chat.eot_token_ids[1:]]
    extra = f"; sampling also stops at {', '.join(map(repr, also))}" if also else ""
    return Verdict("end of turn", PASS, f"assistant turns end with {text!r} (id {eot}){extra}")


def round_trip(chat: Any) -> Verdict:
    for sample in ROUND_TRIP_SAMPLES:
        back = chat.decode(chat.encode_text(sample))
        if back != sample:
            return Verdict(
                "tokenizer round trip",
                FAIL,
                f"text -> ids -> text changes {sample!r} into {back!r}: the model's replies "
                "would be read back wrong (tool calls, answers)",
                _round_trip_fix(chat),
            )
    count = len(ROUND_TRIP_SAMPLES)
    substituted = getattr(chat.tokenizer, SUBSTITUTED, None)
    if substituted:  # backend.tokenizer_loader auto read tokenizer.json as is
        return Verdict(
            "tokenizer round trip",
            WARN,
            f"{count} texts come back because agentfly reads tokenizer.json as is; "
            f"{substituted}, and so would any program that loads this folder with AutoTokenizer",
            "nothing for agentfly (backend.tokenizer_loader: auto does it, and checkpoints it "
            "saves load right); elsewhere use PreTrainedTokenizerFast.from_pretrained(folder)",
        )
    return Verdict("tokenizer round trip", PASS, f"{count} texts (spaces, code, unicode) come back")


def _round_trip_fix(chat: Any) -> str:
    """Read tokenizer.json as is where that gives every sample back, else pin transformers."""
    from agentfly_cli.chat.encoding import TextEncoder
    from agentfly_cli.chat.tokenizer_loading import load_tokenizer

    folder = getattr(chat.tokenizer, "name_or_path", "") or ""
    pin = "pin the transformers version the model's release names"
    try:
        encoder = TextEncoder(load_tokenizer(folder, "tokenizer.json"))
    except Exception:  # noqa: BLE001 - no folder, no tokenizer.json, or it does not load
        return pin
    if any(encoder.decode(encoder.encode(s)) != s for s in ROUND_TRIP_SAMPLES):
        return pin
    return (
        "--set backend.tokenizer_loader=tokenizer.json (or auto, the default): the folder's "
        "tokenizer.json read as is gives every text back"
    )


def tool_schemas(chat: Any) -> Verdict:
    from agentfly_cli.chat.templates import ChatTemplateError

    try:
        with_tools = chat.render_text(USER, TOOLS, add_generation_prompt=True)
    except ChatTemplateError as exc:
        return Verdict("tool schemas", FAIL, str(exc), "pass --template hermes")
    if "calculator" in with_tools and "expression" in with_tools:
        return Verdict("tool schemas", PASS, "the template writes the tools' JSON schemas")
    return Verdict(
        "tool schemas",
        WARN,
        "the template ignores `tools`: the model is never shown the tools' schemas",
        "describe the tools in chat.system_prompt (as the recipes do), or pass a template "
        "that renders tools (--template hermes)",
    )


def observation_deltas(chat: Any, template: str | None, path: str) -> Verdict:
    """Prompt, a sampled reply, then a tool result as the template's delta: the same tokens as
    the template rendering the whole conversation?"""
    from agentfly_cli.chat.templates import ChatTemplate, ChatTemplateError

    reply = "Let me compute that."
    if "<think>" in chat.source:  # a reasoning model: its replies carry a think block
        reply = "<think>\nAdd the numbers.\n</think>\n\n" + reply
    role = chat.observation.role
    # harmony samples a turn's end otherwise than history writes it: the replies are then the
    # template's own training form of a tool call (ending <|call|>) and an answer (<|return|>)
    history_end = getattr(chat, "history_end", None)
    call = _call_message("", CALL["arguments"]) if history_end else None
    answer = {"role": "assistant", "content": reply} if history_end else None
    try:
        results = chat.observation_messages([("calculator", "call_1", "5")])
        differs = [
            kind
            for kind, follow, message in (
                ("tool result", results, call),
                ("user message", [{"role": "user", "content": "And 3 + 4?"}], answer))
            if not _delta_matches(chat, reply, follow, message)
        ]  # fmt: skip
    except ChatTemplateError as exc:
        fix = "pass another --template"
        if role != "user":
            try:
                other = ChatTemplate.load(
                    chat.tokenizer, template, type(chat.observation)(role="user")
                )
                other.observation_delta(other.observation_messages([(None, None, "5")]), TOOLS)
                fix = "--set chat.observation.role=user (tool results as user turns)"
            except ChatTemplateError:
                pass
        return Verdict("observation deltas", FAIL, f"tool results as '{role}' turns: {exc}", fix)
    if not differs:
        return Verdict("observation deltas", PASS,
                       f"tool results ('{role}' turns) and user messages append as exact deltas "
                       "(the template is prefix-preserving)")  # fmt: skip
    example = "the template drops earlier <think> blocks"
    if history_end:
        example = (f"the template writes a sampled {chat.decode(chat.eot_token_ids[:1])} as "
                   f"{history_end} once more messages follow")  # fmt: skip
    return Verdict(
        "observation deltas",
        WARN,
        f"after a {' and a '.join(differs)}, rendering the conversation afresh differs from "
        f"prompt + sampled reply + delta (e.g. {example}): "
        "trajectories keep what was sampled, exactly, but a server that re-renders shows the "
        "model another prompt than training did",
        "nothing for rollouts and training here; serve the trained model with the same deltas "
        "(agentfly serve does)",
    )


def _delta_matches(
    chat: Any, reply: str, follow: list[dict[str, Any]], message: dict | None = None
) -> bool:
    """Prompt + the reply's ids + the delta of ``follow`` == the whole conversation rendered.
    With ``message``, the reply is the template's rendering of it as the last turn."""
    prompt = chat.render_prompt(USER, TOOLS)
    if message is None:
        message, sampled = {"role": "assistant", "content": reply}, chat.encode_response(reply)
    else:
        opening = chat.render_text(USER, TOOLS, add_generation_prompt=True)
        sampled = chat.encode_text(chat.render_text([*USER, message], TOOLS)[len(opening) :])
    grown = prompt + sampled + chat.observation_delta(follow, TOOLS)
    whole = chat.encode_text(
        chat.render_text([*USER, message, *follow], TOOLS, add_generation_prompt=True)
    )
    return grown == whole


def parser_reads_calls(chat: Any, parser_name: str, *, search: bool = True) -> Verdict:
    """Render an assistant turn with a tool call through the template, parse its text back."""
    from agentfly_cli.chat.parsers import get_parser, parser_names
    from agentfly_cli.chat.templates import ChatTemplateError

    check = f"parser {parser_name} reads the template's calls"
    try:
        prompt, full = _render_call(chat)
    except ChatTemplateError as exc:
        return Verdict(check, FAIL, f"the template cannot render a tool call: {exc}",
                       "pass --template hermes")  # fmt: skip
    if not full.startswith(prompt):
        return Verdict(check, WARN, "the assistant turn could not be cut out of the rendering",
                       "check by hand with agentfly view on a rollout")  # fmt: skip
    turn = full[len(prompt) :]
    end = turn.find(chat.decode(chat.eot_token_ids[:1]))
    turn = turn[:end] if end >= 0 else turn
    if "calculator" not in turn:
        return Verdict(
            check, WARN, "the template does not write tool calls into the conversation",
            "recipes with a line protocol need none; for JSON calls pass --template hermes",
        )  # fmt: skip

    def reads(name: str) -> bool:
        try:
            parsed = get_parser(name).parse(turn)
        except Exception:  # noqa: BLE001 - a parser that cannot even run does not read it
            return False
        calls = [(c.name, c.arguments) for c in parsed.calls]
        return calls == [(CALL["name"], CALL["arguments"])]

    if reads(parser_name):
        return Verdict(check, PASS, f"{turn.strip()[:60]!r} parses back to the same call")
    others = [n for n in parser_names() if n != parser_name and reads(n)] if search else []
    fix = f"--parser {others[0]}" if others else "pass --template hermes with --parser hermes"
    return Verdict(
        check, FAIL,
        f"the template writes {turn.strip()[:80]!r}, which parser {parser_name} does not read "
        "back as the same call",
        fix,
    )  # fmt: skip


def _call_message(content: str | None, arguments: Any) -> dict[str, Any]:
    call = {"name": CALL["name"], "arguments": arguments}
    return {"role": "assistant", "content": content,
            "tool_calls": [{"id": "call_1", "type": "function", "function": call}]}  # fmt: skip


# Structured arguments first, then OpenAI's wire form (content null, arguments a JSON string),
# the only one DeepSeek-V3's template writes.
CALL_MESSAGES = [
    _call_message("", CALL["arguments"]),
    _call_message(None, json.dumps(CALL["arguments"])),
]


def _render_call(chat: Any) -> tuple[str, str]:
    """The prompt, and the conversation with one assistant tool call in the first form of
    :data:`CALL_MESSAGES` whose call the template writes (else the first it renders)."""
    from agentfly_cli.chat.templates import ChatTemplateError

    prompt = chat.render_text(USER, TOOLS, add_generation_prompt=True)
    rendered: list[str] = []
    failure: ChatTemplateError | None = None
    for message in CALL_MESSAGES:
        try:
            full = chat.render_text([*USER, message], TOOLS)
        except ChatTemplateError as exc:
            failure = failure or exc
            continue
        if full.startswith(prompt) and CALL["name"] in full[len(prompt) :]:
            return prompt, full
        rendered.append(full)
    if rendered:
        return prompt, rendered[0]
    raise failure


def training_notes(chat: Any) -> list[str]:
    """The fast checks that fail, one line each with its fix: ``agentfly train`` prints them
    before its first step (the rest of the doctor's checks fail loudly during a rollout)."""
    failed = [v for v in (end_of_turn(chat), round_trip(chat)) if v.status == FAIL]
    return [f"agentfly doctor: {v.check}: {v.detail}; fix: {v.fix}" for v in failed]


def verdicts_json(verdicts: list[Verdict]) -> str:
    return json.dumps([v.to_dict() for v in verdicts], indent=2)
