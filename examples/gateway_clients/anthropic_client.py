"""A tool-using loop written with the official `anthropic` SDK, pointed at `agentfly serve`.

    agentfly serve --model tiny --port 8000 &
    python examples/gateway_clients/anthropic_client.py --base-url http://127.0.0.1:8000

It asks a question with a calculator tool offered, runs each `tool_use` the model sends and
returns its `tool_result`, until the model answers in text (at most --turns requests; streamed
with --stream). Then it ends the session with a reward and prints what the gateway recorded:
segments, turns, trained tokens, token-exact or not. With the tiny model the replies are
nonsense; the loop and the record are what this shows.
"""

from __future__ import annotations

import argparse
import json
import urllib.request
import uuid

import anthropic

CALCULATOR = {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "input_schema": {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
}


def calculate(arguments: dict) -> str:
    expression = str(arguments.get("expression", ""))
    if not expression or set(expression) - set("0123456789+-*/(). "):
        return "error: only numbers and + - * / ( )"
    try:
        return str(eval(expression, {"__builtins__": {}}))  # checked: digits and operators only
    except (SyntaxError, ZeroDivisionError) as exc:
        return f"error: {exc}"


def run(client: anthropic.Anthropic, question: str, turns: int, stream: bool) -> list:
    """The agent's loop; the replies it got."""
    messages, replies = [{"role": "user", "content": question}], []
    for _ in range(turns):
        request = {"model": "policy", "max_tokens": 64, "system": "Use the calculator.",
                   "messages": messages, "tools": [CALCULATOR]}  # fmt: skip
        if stream:
            with client.messages.stream(**request) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**request)
        replies.append(reply)
        messages.append({"role": "assistant", "content": reply.content})
        calls = [block for block in reply.content if block.type == "tool_use"]
        if not calls:
            break
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c.id, "content": calculate(c.input)}
            for c in calls
        ]})  # fmt: skip
    return replies


def end_session(base_url: str, session: str, reward: float) -> dict:
    """``POST /sessions/ID/end``: the episode's recorded segments."""
    request = urllib.request.Request(
        f"{base_url}/sessions/{session}/end",
        data=json.dumps({"reward": reward}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.load(reply)


def options(argv: list[str] | None, description: str) -> argparse.Namespace:
    """The command line both gateway clients take."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--question", default="What is 17 * 23?")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--stream", action="store_true")
    return parser.parse_args(argv)


def report_session(base_url: str, session: str) -> None:
    """End the session with reward 1 and print what the gateway recorded of it."""
    record = end_session(base_url, session, reward=1.0)
    for k, segment in enumerate(record["trajectories"]):
        trained = sum(segment["loss_mask"])
        print(f"segment {k}: {len(segment['turns'])} turns, {len(segment['ids'])} ids, "
              f"{trained} trained, token_exact={segment['token_exact']}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = options(argv, __doc__.splitlines()[0])
    session = f"anthropic-{uuid.uuid4().hex[:8]}"
    client = anthropic.Anthropic(base_url=f"{args.base_url}/s/{session}", api_key="none")
    replies = run(client, args.question, args.turns, args.stream)
    for i, reply in enumerate(replies, 1):
        kinds = ", ".join(block.type for block in reply.content) or "nothing"
        print(f"reply {i}: {reply.stop_reason} ({kinds})")
    report_session(args.base_url, session)


if __name__ == "__main__":
    main()
