"""The built-in tool-call parsers, registered through the same entry point a plugin would use.

Each format module is imported when the register hook runs (the first use of the components),
never when the CLI starts. A new built-in format is one line of :data:`BUILTIN_PARSERS`.
"""

from __future__ import annotations

import importlib

from agentfly_cli.plugin_host.hookspecs import hookimpl

# (module in agentfly_cli.chat, class, description): the class's ``name`` is the parser's name;
# an empty description takes its docstring's first line. `agentfly parsers list` shows them.
BUILTIN_PARSERS = (
    (".formats.json_calls", "HermesParser", "Hermes / Qwen: <tool_call>{JSON}</tool_call>"),
    (
        ".formats.json_calls",
        "Llama3JsonParser",
        "Llama 3.x: JSON calls, optionally after <|python_tag|>",
    ),
    (
        ".formats.json_calls",
        "MistralParser",
        "Mistral: [TOOL_CALLS] [{JSON}, ...] or name[ARGS]{...}",
    ),
    (".formats.text", "ReactParser", "ReAct: Action: / Action Input: lines, then Final Answer:"),
    (".formats.text", "LineParser", "a line protocol set by parser_options (CALC: 2 + 3)"),
    (".formats.deepseek", "DeepSeekV3Parser", "DeepSeek-V3/V3.1: <｜tool▁call▁begin｜> blocks"),
    (
        ".formats.xml_calls",
        "Qwen3CoderParser",
        "Qwen3-Coder: <tool_call><function=NAME><parameter=KEY>",
    ),
    (".formats.harmony", "HarmonyParser", "gpt-oss harmony: functions.NAME calls, JSON arguments"),
    (".formats.pythonic", "PythonicParser", "Llama 3.2/4 pythonic: [tool(a=1), other(b='x')]"),
)


@hookimpl
def register_parsers(register):
    for module, class_name, description in BUILTIN_PARSERS:
        parser = getattr(importlib.import_module(module, __package__), class_name)
        register(parser, description=description)
