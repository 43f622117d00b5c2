"""``train_bench.py --case multiturn`` without TRL: the tasks, prompt, reward and tool both
trainers get, the line-protocol templates that give TRL's tool loop SmolLM2's tokens, and the
report's JSON at a smoke size. The TRL run itself skips where TRL is not installed."""

from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest

from tests.helpers.paths import load_script

BENCH = load_script("benchmarks/train_bench.py")  # puts benchmarks/ on sys.path
import multiturn_case as case  # noqa: E402
import multiturn_protocol as protocol  # noqa: E402


def test_both_trainers_get_the_recipe_tasks_in_file_order_and_its_prompt():
    rows = protocol.recipe_rows(3)
    assert [r["id"] for r in rows] == ["calc-000", "calc-001", "calc-002"]
    chat = protocol.recipe_chat()
    messages = protocol.prompt_messages(rows[0]["question"], chat)
    assert messages[0] == {"role": "system", "content": chat["system_prompt"]}
    assert "CALC:" in chat["system_prompt"]
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[-1] == {"role": "user", "content": "What is 70 + 33?"}
    with pytest.raises(ValueError, match="fewer than"):
        protocol.recipe_rows(10_000)


@pytest.mark.parametrize(
    ("texts", "called", "prediction"),
    [
        (["CALC: 70+33", "ANSWER: 103"], [True, False], "103"),  # the answer tool's argument
        (["CALC: 70+33\nANSWER: 99", "ANSWER: 103"], [True, False], "99"),  # first answer ends it
        (["The sum is 103."], [False], "The sum is 103."),  # a turn without a call: its text
        (["CALC: 1+1", "CALC: 2+2", "CALC: 3+3"], [True, True, True], ""),  # out of turns
    ],
)
def test_a_trl_chain_is_read_as_agentfly_would_end_it(texts, called, prediction):
    parser = protocol.line_parser(protocol.recipe_chat())
    assert protocol.chain_prediction(texts, called, parser) == prediction


def test_the_trl_reward_is_exact_match_on_the_chain_prediction():
    reward = protocol.trl_reward(protocol.line_parser(protocol.recipe_chat()))
    call = [{"type": "function", "function": {"name": "calculator", "arguments": {}}}]
    completions = [
        [
            {"role": "assistant", "content": "", "tool_calls": call},
            {"role": "tool", "name": "calculator", "content": "103"},
            {"role": "assistant", "content": "ANSWER: 103"},
        ],
        [{"role": "assistant", "content": "ANSWER: 103.0"}],  # strict: not the gold string
        [{"role": "assistant", "content": "103"}],  # a plain reply equal to the gold
        [{"role": "assistant", "content": "", "tool_calls": call}],  # no answer
    ]
    assert reward(completions, answer=["103", "103", "103", "103"]) == [1.0, 0.0, 1.0, 0.0]


def test_trl_calls_the_builtin_calculator_and_sees_its_error_observations():
    calculator = protocol.trl_calculator()
    assert calculator.__name__ == "calculator" and "Args:" in calculator.__doc__
    assert asyncio.run(calculator(expression="35*62")) == "2170"
    error = asyncio.run(calculator(expression="1/0"))
    assert error.startswith("tool 'calculator' failed") and "division by zero" in error


def test_the_line_protocol_template_renders_smollm2s_tokens(realdata):
    from transformers import AutoTokenizer

    path = realdata / "smollm2"
    own = AutoTokenizer.from_pretrained(path)
    ours = protocol.line_protocol_tokenizer(str(path))
    chat = protocol.recipe_chat()
    for messages in (
        protocol.prompt_messages("What is 70 + 33?", chat),
        [{"role": "user", "content": "hi"}],  # SmolLM2's default system turn
    ):
        expected = own.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
        assert ours.apply_chat_template(
            messages, add_generation_prompt=True, return_dict=False
        ) == (expected)
    # a tool call and its result render as the recipe's CALC: turn and RESULT: user turn
    call = {
        "type": "function",
        "function": {"name": "calculator", "arguments": {"expression": "7*6"}},
    }
    tool_turns = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "calculator", "content": "42"},
    ]
    plain_turns = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "CALC: 7*6"},
        {"role": "user", "content": "RESULT: 42"},
    ]
    assert ours.apply_chat_template(tool_turns, tokenize=False) == own.apply_chat_template(
        plain_turns, tokenize=False
    )


def test_the_response_template_reads_calc_lines_as_calculator_calls(realdata):
    tokenizer = protocol.line_protocol_tokenizer(str(realdata / "smollm2"))
    prefix = tokenizer.apply_chat_template(
        [{"role": "user", "content": "q"}], add_generation_prompt=True, return_dict=False
    )

    def parse(text):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return tokenizer.parse_response(ids, prefix=prefix)

    def expressions(parsed):
        return [c["function"]["arguments"]["expression"] for c in parsed.get("tool_calls", [])]

    one = parse("CALC: 12*34<|im_end|>")
    assert expressions(one) == ["12*34"]
    assert one["tool_calls"][0]["function"]["name"] == "calculator"
    assert expressions(parse("CALC: 1+1\nCALC: 2+2<|im_end|>")) == ["1+1", "2+2"]
    answer = parse("ANSWER: 5<|im_end|>")
    assert expressions(answer) == [] and answer["content"] == "ANSWER: 5"
    assert expressions(parse("I think CALC: 3<|im_end|>")) == []  # a command starts its line


def test_size_flags_are_checked(capsys):
    assert case.parse_size("2x3", 4) == {
        "tasks": 2,
        "group": 3,
        "steps": 4,
        "max_new": 24,
        "max_turns": 3,
    }
    with pytest.raises(SystemExit) as exit_info:
        BENCH.main(["--case", "multiturn", "--size", "4x1", "--skip-trl"])
    assert exit_info.value.code == 2
    assert "--size: expected TASKSxGROUP with GROUP >= 2" in capsys.readouterr().err


def test_the_agentfly_side_reports_steps_rewards_and_tokens(tiny_model, tmp_path):
    out = tmp_path / "multiturn.json"
    argv = ["--case", "multiturn", "--models", str(tiny_model), "--skip-trl"]
    assert BENCH.main([*argv, "--steps", "2", "--size", "2x2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["benchmark"] == "multiturn_tool_train_vs_trl"
    assert len(report["machine"]["load_average_at_start"]) == 3
    assert len(report["machine"]["load_average_at_end"]) == 3
    assert report["settings"]["max_turns"] == 3 and report["settings"]["steps"] == 2
    [result] = report["cases"].values()
    assert result["tasks"] == ["calc-000", "calc-001", "calc-002", "calc-003"]
    ours = result["agentfly"]
    assert len(ours["steps"]) == len(ours["reward_per_step"]) == 2
    # step 1 is the warm-up: the median of one timed step is that step
    assert ours["step_s_median"] == pytest.approx(ours["steps"][1]["step_s"], abs=1e-3)
    for step in ours["steps"]:
        assert step["sampled_tokens"] > 0 and step["tokens"] > step["sampled_tokens"]
        assert 0.0 <= step["reward"] <= 1.0 and step["rollout_s"] <= step["step_s"]
    assert ours["sampled_tokens_per_s"] == pytest.approx(
        ours["sampled_tokens_per_step"] / ours["step_s_median"], rel=0.01
    )
    watch = ours["machine"]  # what else ran meanwhile
    assert len(watch["load_average_at_end"]) == 3 and isinstance(watch["busy_at_start"], list)
    assert watch["peak_rss_mib"] > 0 and watch["cpu_s"] > 0
    assert "trl" not in result


def test_the_comparison_is_trl_over_agentfly_seconds():
    ours = {"step_s_median": 10.0, "sampled_tokens_per_s_of_steps": 30.0}
    theirs = {"step_s_median": 25.0, "sampled_tokens_per_s_of_steps": 12.0}
    assert case.compare(ours, theirs) == {
        "step_s_trl_over_agentfly": 2.5,
        "sampled_tokens_per_s_agentfly_over_trl": 2.5,
    }


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("trl") is None,
    reason="TRL lives only in .venv-bench (make bench-venv); run this file with its python",
)
def test_trl_trains_the_same_chains_with_its_tool_loop(realdata, tmp_path):
    from agentfly_cli.models import resolve_model

    size = case.parse_size("2x2", 2)
    rows = protocol.recipe_rows(4)
    result = case.trl_run(str(resolve_model("smollm2")), rows, size, tmp_path)
    assert len(result["steps"]) == 2
    for step in result["steps"]:
        assert step["sampled_tokens"] > 0 and 0.0 <= step["reward"] <= 1.0
    own = __import__("transformers").AutoTokenizer.from_pretrained(realdata / "smollm2")
    messages = protocol.prompt_messages(rows[0]["question"], protocol.recipe_chat())
    assert result["first_prompt_ids"] == own.apply_chat_template(
        messages, add_generation_prompt=True, return_dict=False
    )
