"""A tool-using loop written with the official `openai` SDK's Responses API, pointed at
`agentfly serve`.

    agentfly serve --model tiny --port 8000 &
    python examples/gateway_clients/responses_client.py --base-url http://127.0.0.1:8000

It asks a question with a calculator function tool, answers each `function_call` item with a
`function_call_output` (continuing with `previous_response_id`, so only the new items are
sent), until the model answers in text (at most --turns requests; streamed with --stream).
Then it ends the session with a reward and prints what the gateway recorded. With the tiny
model the replies are nonsense; the loop and the record are what this shows.
"""

from __future__ import annotations

import json
import uuid

from anthropic_client import calculate, options, report_session  # the same tool, flags, record
from openai import OpenAI

CALCULATOR = {
    "type": "function",
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "parameters": {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
}


def respond(client: OpenAI, stream: bool, **request):
    """One Responses request; the finished Response (from its last event if streamed: the
    SDK's ``get_final_response`` takes only ``response.completed``, and a reply cut at
    ``max_output_tokens`` ends with ``response.incomplete``, as OpenAI's does)."""
    if not stream:
        return client.responses.create(**request)
    final = None
    with client.responses.stream(**request) as events:
        for event in events:
            if event.type in ("response.completed", "response.incomplete", "response.failed"):
                final = event.response
    if final is None:
        raise RuntimeError("the stream ended without its last response event")
    return final


def run(client: OpenAI, question: str, turns: int, stream: bool) -> list:
    """The agent's loop; the responses it got."""
    replies, previous, items = [], None, [{"role": "user", "content": question}]
    for _ in range(turns):
        reply = respond(client, stream, model="policy", instructions="Use the calculator.",
                        input=items, tools=[CALCULATOR], max_output_tokens=64,
                        previous_response_id=previous)  # fmt: skip
        replies.append(reply)
        calls = [item for item in reply.output if item.type == "function_call"]
        if not calls:
            break
        previous = reply.id
        items = [{"type": "function_call_output", "call_id": call.call_id,
                  "output": calculate(_arguments(call.arguments))} for call in calls]  # fmt: skip
    return replies


def _arguments(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def main(argv: list[str] | None = None) -> None:
    args = options(argv, __doc__.splitlines()[0])
    session = f"responses-{uuid.uuid4().hex[:8]}"
    client = OpenAI(base_url=f"{args.base_url}/s/{session}/v1", api_key="none")
    replies = run(client, args.question, args.turns, args.stream)
    for i, reply in enumerate(replies, 1):
        kinds = ", ".join(item.type for item in reply.output) or "nothing"
        print(f"response {i}: {reply.status} ({kinds})")
    report_session(args.base_url, session)


if __name__ == "__main__":
    main()
