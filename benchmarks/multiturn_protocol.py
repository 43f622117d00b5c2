"""The calculator recipe's line protocol as both trainers of ``train_bench.py --case multiturn``
see it: its tasks, prompt, reward and tool, and the chat and response templates that give TRL's
tool loop the same tokens (SmolLM2's template plus ``CALC:`` calls and ``RESULT:`` turns).

Nothing here needs TRL or a model: tests/scripts_and_benchmarks checks it without them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECIPE = "calculator"
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
# SmolLM2's chat template, plus a tool-calling assistant turn (CALC: lines) and a tool turn
# (a user turn "RESULT: ..."): the recipe's line protocol in the form TRL renders.
LINE_PROTOCOL_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\n" + SMOLLM2_SYSTEM + "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- if message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\nRESULT: ' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set f = call['function'] %}"
    "{%- if f['arguments'] is mapping and 'expression' in f['arguments'] %}"
    "{{- 'CALC: ' + f['arguments']['expression'] }}"
    "{%- else %}{{- 'CALL: ' + f['name'] + ' ' + (f['arguments'] | tojson) }}{%- endif %}"
    "{%- if not loop.last %}{{- '\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# transformers' response_template (>= 5.13): every "CALC: ..." line is a calculator call, the
# rest of the turn is its content.
LINE_PROTOCOL_RESPONSE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open_pattern": r"(?:^|(?<=\n))[ \t]*CALC:[ \t]*",
            "close_pattern": r"[ \t]*(?:\n|(?=<\|im_end\|>)|$)",
            "repeats": True,
            "content": "text",
            "transform": {
                "type": "function",
                "function": {"name": "calculator", "arguments": {"expression": "{content}"}},
            },
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def recipe_rows(count: int) -> list[dict]:
    """The calculator recipe's first ``count`` tasks, in file order."""
    from agentfly_cli.recipes.loader import load_config

    config = load_config(RECIPE)
    path = Path(config.data.path)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if len(rows) < count:
        raise ValueError(f"{path} has {len(rows)} tasks, fewer than the {count} asked for")
    return rows[:count]


def recipe_chat() -> dict[str, Any]:
    """The recipe's system prompt, few-shot turns and line-parser commands."""
    from agentfly_cli.recipes.loader import load_config

    chat = load_config(RECIPE).chat
    return {
        "system_prompt": chat.system_prompt,
        "examples": [dict(m) for m in chat.examples],
        "commands": dict(chat.parser_options["commands"]),
    }


def prompt_messages(question: str, chat: dict[str, Any]) -> list[dict[str, str]]:
    """The first prompt of a chain: system prompt, few-shot turns, the question."""
    messages = [{"role": "system", "content": chat["system_prompt"]}]
    messages += [{"role": m["role"], "content": m["content"]} for m in chat["examples"]]
    return messages + [{"role": "user", "content": question}]


def line_parser(chat: dict[str, Any]):
    from agentfly_cli.chat.formats.text import LineParser

    return LineParser.from_options({"commands": chat["commands"]})


def chain_prediction(assistant_texts: list[str], has_calls: list[bool], parser) -> str:
    """What agentfly's chain would answer, read from a TRL chain's assistant turns: the first
    ``ANSWER:`` value, else the text of the first turn without a tool call, else ''."""
    for text, called in zip(assistant_texts, has_calls, strict=True):
        parsed = parser.parse_body(text)
        answers = [c for c in parsed.calls if c.name == "answer"]
        if answers:  # the terminal answer tool: its observation is the prediction
            return str(next(iter(answers[0].arguments.values()), "")).strip()
        if not called:
            return parsed.content
    return ""


def exact_match_reward(prediction: str, answer: Any) -> float:
    """The recipe's reward (``rewards_builtin.text.exact_match``), called as agentfly does."""
    from rewards_builtin.scoring import exact_match_score

    return exact_match_score(prediction, answer)


def trl_reward(parser):
    """A TRL reward function over conversational completions (the chain's messages)."""

    def calculator_exact_match(completions, answer, **kwargs):
        scores = []
        for messages, gold in zip(completions, answer, strict=True):
            turns = [m for m in messages if m.get("role") == "assistant"]
            texts = [m.get("content") or "" for m in turns]
            called = [bool(m.get("tool_calls")) for m in turns]
            scores.append(exact_match_reward(chain_prediction(texts, called, parser), gold))
        return scores

    return calculator_exact_match


def trl_calculator():
    """The built-in calculator tool as the async function TRL calls."""
    from tools_builtin.calculator import calculator as tool

    async def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression and return the number.

        Args:
            expression: The expression to evaluate, for example "2**10 + 3*7".
        """
        return (await tool(expression=expression)).observation

    return calculator


def line_protocol_tokenizer(model_path: str):
    """SmolLM2's tokenizer with the line-protocol chat and response templates."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.chat_template = LINE_PROTOCOL_TEMPLATE
    tokenizer.response_template = LINE_PROTOCOL_RESPONSE
    return tokenizer
