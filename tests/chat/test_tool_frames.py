"""Frames for any tool set: prompts and deltas of many distinct tool lists, rendered exactly,
without a measurement (or a cached frame) per list."""

from __future__ import annotations

import pytest

from agentfly_cli.chat import templates
from agentfly_cli.chat.frames import NOT_TOOL_INDEPENDENT, TextFrame
from agentfly_cli.chat.templates import ChatTemplate


def tool_set(i: int, size: int = 2) -> list[dict]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"fn_{i}_{k}",
                "description": f'Row {i} tool {k}: "quoted" & <tagged> \\ {{braces}}',
                "parameters": {
                    "type": "object",
                    "properties": {
                        "a": {"type": "string", "description": f"arg of {i}"},
                        "b": {"type": "array", "items": {"type": "number"}},
                    },
                    "required": ["a"],
                },
            },
        }
        for k in range(size)
    ]


def exact_prompt(chat: ChatTemplate, messages, tools) -> list[int]:
    return chat.encode_text(chat.render_text(messages, tools, add_generation_prompt=True))


def frames_of(chat: ChatTemplate, kind: str) -> list:
    return [entry[1] for key, entry in chat._frames.items() if key[0] == kind]


def test_distinct_tool_sets_share_one_frame_and_render_exactly(tiny_model):
    chat = ChatTemplate.load(str(tiny_model))  # chatml-tools: writes each tool as its JSON
    observation = chat.observation_messages([("fn_0_0", None, "a result")])
    for i in range(40):
        tools = tool_set(i)
        messages = [{"role": "user", "content": f"question {i}"}]
        assert chat.render_prompt(messages, tools) == exact_prompt(chat, messages, tools)
        assert chat.delta_text(observation, tools) == chat._render_delta(observation, tools)
    [prompt] = frames_of(chat, "prompt")
    [delta] = frames_of(chat, "delta")
    assert prompt.tool_format == "json" and prompt.uses == 40
    assert delta is not None and delta.tool_format is None  # a delta holds no tool
    assert chat._set_frames == {}


def test_a_new_tool_count_gets_its_own_frame(tiny_model):
    chat = ChatTemplate.load(str(tiny_model))
    messages = [{"role": "user", "content": "q"}]
    for size in (1, 2, 3, 2, 1):
        tools = tool_set(size, size)
        assert chat.render_prompt(messages, tools) == exact_prompt(chat, messages, tools)
        chat._prompts.clear()
    assert sorted(key[2] for key in chat._frames if key[0] == "prompt") == [1, 2, 3]


# writes every tool name a second time, outside the JSON: no frame serves every tool list
NAMES_TWICE = (
    "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    "names: {% for t in tools %}{{ t.function.name }} {% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_that_writes_tools_otherwise_gets_frames_per_tool_list(tiny_model):
    chat = ChatTemplate.load(str(tiny_model), NAMES_TWICE)
    for i in range(6):
        tools = tool_set(i)
        messages = [{"role": "user", "content": f"question {i}"}]
        assert chat.render_prompt(messages, tools) == exact_prompt(chat, messages, tools)
    assert frames_of(chat, "prompt") == [NOT_TOOL_INDEPENDENT]
    assert len(chat._set_frames) == 6
    # a list seen once is rendered, not measured; from its second use on it has a frame
    assert not any(isinstance(entry[1], TextFrame) for entry in chat._set_frames.values())
    for i in range(3):
        messages = [{"role": "user", "content": f"again {i}"}]
        assert chat.render_prompt(messages, tools) == exact_prompt(chat, messages, tools)
    measured = [e[1] for e in chat._set_frames.values() if isinstance(e[1], TextFrame)]
    assert len(measured) == 1 and measured[0].uses == 3


def test_frames_per_tool_list_are_bounded(tiny_model, monkeypatch):
    monkeypatch.setattr(templates, "SET_FRAMES", 4)
    chat = ChatTemplate.load(str(tiny_model), NAMES_TWICE)
    kept = []  # keep the lists alive: ids stay distinct
    for i in range(10):
        kept.append(tool_set(i))
        messages = [{"role": "user", "content": f"question {i}"}]
        assert chat.render_prompt(messages, kept[-1]) == exact_prompt(chat, messages, kept[-1])
    assert len(chat._set_frames) == 4


# branches on a tool's description: the probes pass, the spot checks of real tools do not
DESCRIPTION_DEPENDENT = (
    "{% if tools %}<|im_start|>system\n{% for t in tools %}"
    "{% if 'SHOUT' in t.function.description %}LOUD {% endif %}{{ t | tojson }}\n{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("first_loud", [0, 3])
def test_a_tool_dependent_template_is_still_rendered_exactly(tiny_model, first_loud):
    """Within the spot-checked first uses (as for message contents, a template that branches on
    what a tool says is caught by the checks of the first uses and every 64th)."""
    chat = ChatTemplate.load(str(tiny_model), DESCRIPTION_DEPENDENT)
    for i in range(first_loud + 1):
        tools = tool_set(i)
        if i == first_loud:
            tools[0]["function"]["description"] = "SHOUT it"
        messages = [{"role": "user", "content": f"question {i}"}]
        assert chat.render_prompt(messages, tools) == exact_prompt(chat, messages, tools)


# writes each tool's "function" part (a bare schema as it is)
FUNCTION_PART = (
    "{% if tools %}<|im_start|>system\n{% for t in tools %}"
    "{{ (t.function if t.function is defined else t) | tojson }}\n{% endfor %}<|im_end|>\n"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_tools_a_format_cannot_write_render_in_full(tiny_model):
    chat = ChatTemplate.load(str(tiny_model), FUNCTION_PART)
    messages = [{"role": "user", "content": "q"}]
    tools = tool_set(0, 1)
    assert chat.render_prompt(messages, tools) == exact_prompt(chat, messages, tools)
    assert frames_of(chat, "prompt")[0].tool_format == "json-function"
    bare = [{"name": "bare", "description": "no wrapper", "parameters": {"type": "object"}}]
    assert chat.render_prompt(messages, bare) == exact_prompt(chat, messages, bare)


def odd_tools(i: int) -> list[dict]:
    """Tools the qwen3_coder template writes tag by tag: padded descriptions to trim, values
    of every JSON type, no description, no parameters, an empty required list."""
    return [
        {"type": "function", "function": {
            "name": f"geo.area_{i}", "description": f"  Area {i}: <b>&</b> ünï 🙂\n\n",
            "parameters": {"type": "object", "properties": {
                "base": {"type": "number", "minimum": 0, "default": 1.5, "enum": [1, 2.5]},
                "tags": {"type": "array", "items": {"type": "string"}, "nullable": True},
                "mode": {"type": ["string", "null"], "description": ""}},
                "required": ["base", "mode"]}}},
        {"type": "function", "function": {"name": f"noop_{i}", "parameters": {}}},
        {"type": "function", "function": {"name": f"bare_{i}", "description": "x",
                                          "parameters": {"type": "object", "required": []}}},
    ]  # fmt: skip


def test_the_qwen3_coder_template_gets_one_frame_for_its_xml_tools(tiny_model):
    chat = ChatTemplate.load(str(tiny_model), "qwen3_coder")
    renders = []
    original = chat._render_prompt_text
    chat._render_prompt_text = lambda m, t: renders.append(1) or original(m, t)
    for i in range(30):
        tools = odd_tools(i)
        messages = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": f"q {i}"},
        ]
        assert chat.render_prompt(messages, tools) == exact_prompt(chat, messages, tools)
    [prompt] = frames_of(chat, "prompt")
    assert prompt.tool_format == "coder-xml" and prompt.uses == 30
    # the measurement's renders and the spot checks of the first uses, not one per tool list
    assert len(renders) < 12
