"""Chat templates on real tokenizers: exact prompts, exact observation deltas, no drift."""

from __future__ import annotations

from dataclasses import dataclass, field

import pydantic
import pytest

from agentfly_cli.chat.sources import packaged_templates
from agentfly_cli.chat.templates import ChatTemplate, ChatTemplateError
from agentfly_cli.errors import UserError
from agentfly_cli.settings.chat import ObservationSettings

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 2 + 3"}},
                "required": ["expression"],
            },
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "You are a careful calculator agent."},
    {"role": "user", "content": "What is 12 + 30, and then 6 * 7?"},
]
CALL_1 = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 + 30"}}\n</tool_call>'
CALL_2 = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6 * 7"}}\n</tool_call>'
# Two turns with tool calls (the second with two calls at once), then a final answer.
TURNS = [
    ("I will use the calculator.\n" + CALL_1, [("calculator", "call_0_0", "42")]),
    (CALL_2 + "\n" + CALL_1, [("calculator", "call_1_0", "42"), ("calculator", "call_1_1", "42")]),
    ("Both are 42.", None),
]
LLAMA_TOKENS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
MISTRAL_TOKENS = [
    "[INST]",
    "[/INST]",
    "[TOOL_CALLS]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
]


@dataclass
class Rollout:
    """A conversation assembled the way the rollout engine does it."""

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)
    conversation: list[dict] = field(default_factory=list)
    deltas: list[list[int]] = field(default_factory=list)
    stages: list[list[dict]] = field(default_factory=list)  # conversation after each observation


def simulate(chat: ChatTemplate, messages, turns, tools=TOOLS) -> Rollout:
    run = Rollout(conversation=list(messages))
    prompt = chat.render_prompt(messages, tools)
    run.ids += prompt
    run.mask += [0] * len(prompt)
    for text, results in turns:
        sampled = chat.encode_response(text)
        run.ids += sampled
        run.mask += [1] * len(sampled)
        run.sampled += sampled
        run.conversation.append({"role": "assistant", "content": text})
        if results is None:
            break
        observation = chat.observation_messages(results)
        run.conversation += observation
        delta = chat.observation_delta(observation, tools)
        run.ids += delta
        run.mask += [0] * len(delta)
        run.deltas.append(delta)
        run.stages.append(list(run.conversation))
    return run


def assert_mask_invariant(run: Rollout) -> None:
    assert len(run.ids) == len(run.mask)
    assert [i for i, m in zip(run.ids, run.mask, strict=True) if m] == run.sampled


def assert_matches_full_render(chat: ChatTemplate, run: Rollout, tools=TOOLS) -> None:
    """For a prefix-preserving template the assembled ids are the full conversation's tokens
    (up to the text the template writes after the final end-of-turn token)."""
    full = chat.encode_text(chat.render_text(run.conversation, tools))
    assert run.ids == full[: len(run.ids)], _first_difference(chat, run.ids, full)
    assert run.ids[-1] == chat.eot_token_ids[0]
    assert not chat.decode(full[len(run.ids) :]).strip()  # only the post-turn newline, if any
    # each delta ends the prompt of its stage
    for stage, delta in zip(run.stages, run.deltas, strict=True):
        text = chat.render_text(stage, tools, add_generation_prompt=True)
        assert text.endswith(chat.decode(delta))


def _first_difference(chat, ours, theirs) -> str:
    a, b = chat.decode(ours), chat.decode(theirs)
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"ours: {a[i - 60 : i + 60]!r}\ntemplate: {b[i - 60 : i + 60]!r}"


# -- tokenizers -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def qwen25(realdata):
    return ChatTemplate.load(
        realdata / "qwen2.5", template=str(realdata / "qwen2.5" / "chat_template.jinja")
    )


@pytest.fixture(scope="module")
def qwen3_tokenizer(realdata):
    from agentfly_cli.chat.templates import load_tokenizer

    return load_tokenizer(realdata / "qwen3")


@pytest.fixture(scope="module")
def smollm2_tokenizer(realdata):
    from agentfly_cli.chat.templates import load_tokenizer

    return load_tokenizer(realdata / "smollm2")


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_model):
    """The tiny model's tokenizer plus the special tokens of the Llama-3 and Mistral formats."""
    from agentfly_cli.chat.templates import load_tokenizer

    tokenizer = load_tokenizer(tiny_model)
    tokenizer.add_tokens(LLAMA_TOKENS + MISTRAL_TOKENS, special_tokens=True)
    return tokenizer


def qwen3(tokenizer, observation=None, thinking=True) -> ChatTemplate:
    return ChatTemplate.load(
        tokenizer, observation=observation, chat_template_kwargs={"enable_thinking": thinking}
    )


# -- real templates: exact trajectories -------------------------------------------------------
def test_qwen25_trajectory_is_token_exact(qwen25, realdata):
    run = simulate(qwen25, MESSAGES, TURNS)
    assert_mask_invariant(run)
    assert_matches_full_render(qwen25, run)
    assert qwen25.name == str(realdata / "qwen2.5" / "chat_template.jinja")
    assert qwen25.decode(run.deltas[0]) == (
        "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert qwen25.decode(run.deltas[1]).count("<tool_response>") == 2  # one user turn, two results


def test_qwen25_prompt_lists_tools_and_ends_with_generation_prompt(qwen25):
    text = qwen25.decode(qwen25.render_prompt(MESSAGES, TOOLS))
    assert text.startswith("<|im_start|>system\nYou are a careful calculator agent.\n\n# Tools")
    assert '"name": "calculator"' in text
    assert text.endswith(
        "<|im_start|>user\nWhat is 12 + 30, and then 6 * 7?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_qwen3_thinking_trajectory_is_token_exact(qwen3_tokenizer):
    chat = qwen3(qwen3_tokenizer)
    turns = [
        ("<think>\nI need the calculator.\n</think>\n\n" + CALL_1, [("calculator", "c0", "42")]),
        ("<think>\nThe tool said 42.\n</think>\n\nThe answer is 42.", None),
    ]
    run = simulate(chat, MESSAGES, turns)
    assert_mask_invariant(run)
    # With tool results in the tool role and canonical think blocks, Qwen3 keeps the reasoning of
    # every turn after the last user query, so here the full render agrees token for token.
    assert_matches_full_render(chat, run)
    assert chat.decode(run.deltas[0]) == (
        "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    think = qwen3_tokenizer.convert_tokens_to_ids("<think>")
    assert run.sampled[0] == think  # the sampled ids start with the <think> token itself


def test_qwen3_drift_trap_with_user_observations(qwen3_tokenizer):
    """Results in a user turn make Qwen3 drop earlier <think> blocks when it re-renders."""
    chat = qwen3(
        qwen3_tokenizer, ObservationSettings(role="user", template="RESULT: {observation}")
    )
    first = "<think>\nI need the calculator.\n</think>\n\n" + CALL_1
    second = "<think>\nThe result came back.\n</think>\n\nThe answer is 42."
    run = simulate(chat, MESSAGES, [(first, [("calculator", "c0", "42")]), (second, None)])
    assert_mask_invariant(run)
    assert chat.decode(run.deltas[0]) == (
        "\n<|im_start|>user\nRESULT: 42<|im_end|>\n<|im_start|>assistant\n"
    )
    naive = chat.encode_text(chat.render_text(run.conversation, TOOLS))
    assert naive[: len(run.ids)] != run.ids  # re-rendering would rewrite the first turn
    assert "I need the calculator." not in chat.decode(naive)
    ours = chat.decode(run.ids)
    assert "<|im_start|>assistant\n" + first + "<|im_end|>" in ours  # kept as sampled
    # From the assistant's point of view each stage is what the template renders: the last
    # assistant turn exactly as sampled, and the delta exactly as the template continues.
    stage = chat.render_text(run.stages[0], TOOLS, add_generation_prompt=True)
    assert stage.endswith("<|im_end|>" + chat.decode(run.deltas[0]))
    for k, (text, _) in enumerate([(first, 0), (second, 0)]):
        upto = run.conversation[: len(MESSAGES) + 2 * k + 1]
        assert chat.render_text(upto, TOOLS).endswith("assistant\n" + text + "<|im_end|>\n")
    assert ours.endswith(second + "<|im_end|>")


def test_qwen3_drift_trap_with_unusual_think_spacing(qwen3_tokenizer):
    """Qwen3 normalises the whitespace around <think>; sampled ids must not be normalised."""
    chat = qwen3(qwen3_tokenizer)
    first = "<think>I need the calculator.</think>" + CALL_1
    run = simulate(chat, MESSAGES, [(first, [("calculator", "c0", "42")]), ("42", None)])
    assert_mask_invariant(run)
    naive = chat.encode_text(chat.render_text(run.conversation, TOOLS))
    assert naive[: len(run.ids)] != run.ids
    assert "<think>\nI need the calculator.\n</think>\n\n" in chat.decode(naive)
    assert "assistant\n" + first + "<|im_end|>\n<|im_start|>user\n<tool_response>" in (
        chat.decode(run.ids)
    )


def test_qwen3_thinking_off_puts_empty_think_in_prompt_and_delta(qwen3_tokenizer):
    chat = qwen3(qwen3_tokenizer, thinking=False)
    assert chat.decode(chat.render_prompt(MESSAGES, TOOLS)).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    delta = chat.observation_delta(chat.observation_messages([("calculator", None, "42")]), TOOLS)
    assert chat.decode(delta).endswith(
        "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_hermes_template_on_smollm2_is_token_exact(smollm2_tokenizer, realdata):
    chat = ChatTemplate.load(smollm2_tokenizer, str(realdata / "hermes" / "chat_template.jinja"))
    run = simulate(chat, MESSAGES, TURNS)
    assert_mask_invariant(run)
    assert_matches_full_render(chat, run)
    assert chat.decode(run.deltas[0]) == (
        '\n<|im_start|>tool\n<tool_response>\n{"name": "calculator", "content": "42"}\n'
        "</tool_response> <|im_end|>\n<|im_start|>assistant\n"
    )
    assert chat.default_parser == "hermes"


def test_smollm2_own_template_with_user_observations(smollm2_tokenizer, realdata):
    fmt = ObservationSettings(role="user", template="RESULT: {observation}")
    chat = ChatTemplate.load(
        smollm2_tokenizer, str(realdata / "smollm2" / "chat_template.jinja"), observation=fmt
    )
    turns = [
        ("CALC: 12 + 30", [("calculator", "c0", "42")]),
        ("CALC: 6 * 7\nCALC: 1 + 1", [("calculator", "c1", "42"), ("calculator", "c2", "2")]),
        ("ANSWER: 42", None),
    ]
    run = simulate(chat, MESSAGES, turns, tools=None)
    assert_mask_invariant(run)
    assert_matches_full_render(chat, run, tools=None)
    assert chat.decode(run.deltas[1]) == (
        "\n<|im_start|>user\nRESULT: 42\nRESULT: 2<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tiny_model_trajectory_is_token_exact(tiny_model):
    chat = ChatTemplate.load(tiny_model)
    assert chat.name == "model"
    run = simulate(chat, MESSAGES, TURNS)
    assert_mask_invariant(run)
    assert_matches_full_render(chat, run)
    assert chat.decode(run.deltas[1]) == (
        "\n<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\n42\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


# -- packaged templates -----------------------------------------------------------------------
PACKAGED = {  # name: (end-of-turn text, default parser, a turn that calls the tool)
    "chatml": ("<|im_end|>", "hermes", "CALC: 12 + 30"),
    "chatml-tools": ("<|im_end|>", "hermes", CALL_1),
    "hermes": ("<|im_end|>", "hermes", CALL_1),
    "qwen2.5": ("<|im_end|>", "hermes", CALL_1),
    "llama3": (
        "<|eot_id|>",
        "llama3_json",
        '{"name": "calculator", "parameters": {"expression": "12 + 30"}}',
    ),
    "pythonic": ("<|im_end|>", "pythonic", '[calculator(expression="12 + 30")]'),
    "qwen3_coder": (
        "<|im_end|>",
        "qwen3_coder",
        "<tool_call>\n<function=calculator>\n<parameter=expression>\n12 + 30\n</parameter>\n"
        "</function>\n</tool_call>",
    ),
    "mistral": (
        "<|im_end|>",
        "mistral",
        '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "12 + 30"}}]',
    ),
}


# Templates whose turns end otherwise when sampled than in history: tested on their own.
TESTED_ELSEWHERE = {"harmony": "tests/chat/test_formats_harmony.py"}


def test_every_packaged_template_is_covered():
    assert set(packaged_templates()) == set(PACKAGED) | set(TESTED_ELSEWHERE)


@pytest.mark.parametrize("name", sorted(PACKAGED))
def test_packaged_template_trajectory_is_token_exact(tiny_tokenizer, name):
    eot, parser, call = PACKAGED[name]
    chat = ChatTemplate.load(tiny_tokenizer, name)
    assert chat.name == name
    assert chat.eot_token_ids[0] == tiny_tokenizer.convert_tokens_to_ids(eot)
    assert chat.default_parser == parser
    turns = [(call, [("calculator", "call_0", "42")]), ("The answer is 42.", None)]
    run = simulate(chat, MESSAGES, turns)
    assert_mask_invariant(run)
    assert_matches_full_render(chat, run)
    assert "42" in chat.decode(run.deltas[0])


@pytest.mark.parametrize(
    "conversation",
    [
        MESSAGES,
        MESSAGES[1:],
        MESSAGES
        + [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {"name": "calculator", "arguments": {"expression": "12 + 30"}},
                    }
                ],
            },
            {"role": "tool", "content": "42", "name": "calculator"},
            {"role": "tool", "content": "7", "name": "calculator"},
            {
                "role": "assistant",
                "content": "Done.",
                "tool_calls": [{"name": "calculator", "arguments": {"expression": "1"}}],
            },
            {"role": "tool", "content": "1", "name": "calculator"},
            {"role": "assistant", "content": "It is 42."},
            {"role": "system", "content": "Late system note."},
        ],
    ],
    ids=["system", "no-system", "tool-calls"],
)
@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tools", "no-tools"])
def test_packaged_qwen25_renders_like_the_original(qwen25, conversation, tools):
    ours = ChatTemplate.load(qwen25.tokenizer, "qwen2.5")
    for generation_prompt in (False, True):
        assert ours.render_text(conversation, tools, generation_prompt) == qwen25.render_text(
            conversation, tools, generation_prompt
        )


# -- prompts, worked examples, observation messages -------------------------------------------
def test_worked_examples_render_in_the_prompt(qwen25, tiny_model):
    examples = [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": CALL_1.replace("12 + 30", "2 + 2")},
        {"role": "tool", "content": "4", "name": "calculator", "tool_call_id": "ex_0"},
        {"role": "assistant", "content": "The answer is 4."},
    ]
    messages = [MESSAGES[0], *examples, MESSAGES[1]]
    for chat in (qwen25, ChatTemplate.load(tiny_model)):
        text = chat.decode(chat.render_prompt(messages, TOOLS))
        example = (
            "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
            '{"name": "calculator", "arguments": {"expression": "2 + 2"}}\n</tool_call><|im_end|>\n'
            "<|im_start|>user\n<tool_response>\n4\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\nThe answer is 4.<|im_end|>\n"
        )
        assert example + "<|im_start|>user\nWhat is 12 + 30" in text
        assert text.endswith("<|im_start|>assistant\n")


def test_observation_messages_tool_role(tiny_model):
    fmt = ObservationSettings(template="{name} -> {observation}")
    chat = ChatTemplate.load(tiny_model, observation=fmt)
    messages = chat.observation_messages([("calculator", "call_1", "42"), (None, None, "bad call")])
    assert messages == [
        {
            "role": "tool",
            "content": "calculator -> 42",
            "name": "calculator",
            "tool_call_id": "call_1",
        },
        {"role": "tool", "content": " -> bad call", "name": ""},
    ]


def test_observation_messages_other_role_joins_results(tiny_model):
    fmt = ObservationSettings(role="user", template="RESULT: {observation}")
    chat = ChatTemplate.load(tiny_model, observation=fmt)
    assert chat.observation_messages([("a", "1", "x"), ("b", None, "{y}")]) == [
        {"role": "user", "content": "RESULT: x\nRESULT: {y}"}
    ]
    assert chat.observation_messages([]) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"template": "RESULT"},
        {"template": "{observation} {tool}"},
        {"template": "{observation"},
        {"role": " "},
        {"roles": "user"},
    ],
)
def test_observation_format_is_validated(kwargs):
    with pytest.raises(pydantic.ValidationError):
        ObservationSettings(**kwargs)


# -- encode / decode ---------------------------------------------------------------------------
def test_encode_response_appends_the_end_of_turn_once(tiny_model):
    chat = ChatTemplate.load(tiny_model)
    ids = chat.encode_response("The answer is 42.")
    assert ids[-1] == chat.eot_token_ids[0]
    assert chat.decode(ids) == "The answer is 42.<|im_end|>"
    assert chat.encode_response("The answer is 42.<|im_end|>") == ids


# -- loading and detection --------------------------------------------------------------------
def test_eot_and_parser_detection_on_real_templates(qwen25, qwen3_tokenizer, smollm2_tokenizer):
    im_end = qwen25.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert qwen25.eot_token_ids == [im_end]
    assert qwen3(qwen3_tokenizer).eot_token_ids == [im_end]
    smol = ChatTemplate.load(smollm2_tokenizer)
    assert smol.eot_token_ids == [smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert (qwen25.default_parser, smol.default_parser) == ("hermes", "hermes")


def test_eos_is_a_stop_id_when_it_differs_from_the_turn_end(tiny_tokenizer):
    chat = ChatTemplate.load(tiny_tokenizer, "llama3")
    assert chat.eot_token_ids == [
        tiny_tokenizer.convert_tokens_to_ids("<|eot_id|>"),
        tiny_tokenizer.eos_token_id,
    ]
    assert chat.encode_response("hi")[-1] == chat.eot_token_ids[0]


@pytest.mark.parametrize(
    "marker, parser",
    [
        ("[TOOL_CALLS]", "mistral"),
        ("<|python_tag|>", "llama3_json"),
        ("<tool_call>", "hermes"),
        ("nothing", "hermes"),
    ],
)
def test_default_parser_is_guessed_from_the_template(tiny_model, marker, parser):
    template = "{% for m in messages %}{{ m['content'] }}<|im_end|>{% endfor %}{# " + marker + " #}"
    assert ChatTemplate.load(tiny_model, template).default_parser == parser


def test_unknown_template_name_lists_the_known_ones(tiny_model):
    with pytest.raises(UserError, match="unknown chat template 'qwen9'.*chatml-tools"):
        ChatTemplate.load(tiny_model, "qwen9")


def test_template_from_a_jinja_path(tiny_model, tmp_path):
    path = tmp_path / "mine.jinja"
    path.write_text(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}: {{ m['content'] }}<|im_end|>"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant: {% endif %}"
    )
    chat = ChatTemplate.load(tiny_model, str(path))
    assert chat.name == str(path)
    assert chat.decode(chat.render_prompt([{"role": "user", "content": "hi"}])) == (
        "<|im_start|>user: hi<|im_end|><|im_start|>assistant: "
    )
    delta = chat.observation_delta(chat.observation_messages([("calculator", "c", "42")]))
    assert chat.decode(delta) == "<|im_start|>tool: 42<|im_end|><|im_start|>assistant: "
    with pytest.raises(UserError, match="not found"):
        ChatTemplate.load(tiny_model, str(tmp_path / "missing.jinja"))


def test_tokenizer_without_chat_template_needs_template(tiny_model):
    from agentfly_cli.chat.templates import load_tokenizer

    tokenizer = load_tokenizer(tiny_model)
    tokenizer.chat_template = None
    with pytest.raises(UserError, match="--template"):
        ChatTemplate.load(tokenizer)
    assert ChatTemplate.load(tokenizer, "chatml").name == "chatml"


def test_missing_tokenizer_folder_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not found"):
        ChatTemplate.load(tmp_path / "nope")


def test_template_that_changes_a_turn_once_results_follow_is_refused(tiny_model):
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
        "{% if m['role'] == 'assistant' and not loop.last %} (continued){% endif %}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    chat = ChatTemplate.load(tiny_model, template)
    with pytest.raises(ChatTemplateError, match="ends an assistant turn differently"):
        chat.observation_delta(chat.observation_messages([("calculator", None, "42")]))


def test_template_without_a_special_turn_end_is_refused(tiny_model):
    template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n\n{% endfor %}"
    with pytest.raises(ChatTemplateError, match="no special token"):
        ChatTemplate.load(tiny_model, template)


def test_render_errors_are_user_errors(tiny_model):
    template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        ChatTemplate.load(tiny_model, template)


CONTENT_DEPENDENT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'].startswith('!') %}{{ m['content'] | upper }}"
    "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_frames_fall_back_when_a_template_reads_contents(tiny_model):
    """Cached frames are spot-checked: a content-dependent template still renders exactly."""
    chat = ChatTemplate.load(str(tiny_model), CONTENT_DEPENDENT)
    for content in ("plain", "!shout", "plain again", "!again"):
        messages = [{"role": "user", "content": content}]
        expected = chat.encode_text(chat.render_text(messages, add_generation_prompt=True))
        assert chat.render_prompt(messages) == expected
        observation = chat.observation_messages([("calculator", None, content)])
        assert chat.delta_text(observation) == chat._render_delta(observation, None)


def test_frames_are_used_for_verbatim_templates(tiny_model):
    chat = ChatTemplate.load(str(tiny_model))
    for i in range(10):
        messages = [{"role": "user", "content": f"question {i}"}]
        assert chat.render_prompt(messages) == chat.encode_text(
            chat.render_text(messages, add_generation_prompt=True)
        )
    frames = [entry[1] for key, entry in chat._frames.items() if key[0] == "prompt"]
    assert len(frames) == 1 and frames[0] is not None and frames[0].uses == 10


EMPTY_AWARE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] %}{{ m['content'] }}{% else %}(nothing){% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_empty_contents_get_their_own_frame(tiny_model):
    chat = ChatTemplate.load(str(tiny_model), EMPTY_AWARE)
    for _ in range(6):  # past the first checked uses
        for content in ("text", ""):
            messages = [{"role": "user", "content": content}]
            expected = chat.encode_text(chat.render_text(messages, add_generation_prompt=True))
            assert chat.render_prompt(messages) == expected
            chat._prompts.clear()  # skip the whole-prompt cache: exercise the frames
    frames = [entry[1] for key, entry in chat._frames.items() if key[0] == "prompt"]
    assert len(frames) == 2 and all(f is not None for f in frames)  # none had to be dropped


# -- templates that ignore `tools` (issue 15) --------------------------------------------------
def _engine_warnings(chat, parser_name, caplog):
    from agentfly_cli.backends.scripted import ScriptedBackend
    from agentfly_cli.chat import tool_visibility
    from agentfly_cli.chat.parsers import get_parser
    from agentfly_cli.rollout.engine import RolloutEngine
    from tools_builtin.calculator import calculator

    tool_visibility._warned.clear()
    options = {"commands": {"CALC": {"tool": "calculator", "argument": "expression"}}}
    parser = get_parser(parser_name, options if parser_name == "line" else None)
    caplog.clear()
    with caplog.at_level("WARNING", logger="agentfly_cli.chat.tool_visibility"):
        for _ in range(2):  # a second engine on the same template: no second warning
            RolloutEngine(ScriptedBackend([], chat), chat, parser, [calculator])
    return [r.getMessage() for r in caplog.records if "ignores `tools`" in r.getMessage()]


def test_a_template_that_ignores_tools_is_warned_about_once(tiny_model, caplog):
    chat = ChatTemplate.load(str(tiny_model), "chatml")  # plain ChatML: no tool list
    [warning] = _engine_warnings(chat, "hermes", caplog)
    assert "'chatml'" in warning and "never sees the schemas of calculator" in warning
    assert "--template hermes" in warning and "--parser line or react" in warning


def test_smollm2_own_template_ignores_tools(smollm2_tokenizer, realdata, caplog):
    chat = ChatTemplate.load(smollm2_tokenizer, realdata / "smollm2" / "chat_template.jinja")
    assert len(_engine_warnings(chat, "hermes", caplog)) == 1


@pytest.mark.parametrize(("template", "parser"), [("chatml-tools", "hermes"), ("chatml", "line")])
def test_no_warning_when_the_model_sees_the_tools(tiny_model, caplog, template, parser):
    # chatml-tools lists the tools; a text protocol describes them in the system prompt
    chat = ChatTemplate.load(str(tiny_model), template)
    assert _engine_warnings(chat, parser, caplog) == []
