"""``chat.system_prompt`` fills ``{field}``s from the task; a field the tasks lack is an error
that names it and the row's fields, before the run starts (literal braces are ``{{ }}``)."""

from __future__ import annotations

import asyncio

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.rollout.tasks import check_system_prompt, opening_messages
from tests.cli.test_cli_bad_input import agentfly, good, one_line_error, rollout_args  # noqa: F401
from tests.rollout.test_rollout_engine import chat, make_engine  # noqa: F401

TASKS = [{"question": "2+3?", "answer": "5", "level": 1}, {"question": "1+1?", "answer": "2"}]


def test_a_misspelled_field_names_the_field_and_the_rows_fields():
    with pytest.raises(UserError) as caught:
        check_system_prompt("Solve: {quesiton}", TASKS, "data.jsonl")
    message = str(caught.value)
    assert "chat.system_prompt uses {quesiton}" in message
    assert "2 of the 2 tasks of data.jsonl lack" in message
    assert "question, answer, level" in message and "{{" in message


def test_a_field_only_some_rows_have_counts_the_rows_that_lack_it():
    with pytest.raises(UserError, match=r"uses \{level\}, which 1 of the 2 tasks"):
        check_system_prompt("Level {level}.", TASKS)


# A JSON tool-call example, or any brace that is not a {field}, is the prompt's own text: it
# used to pass through unchanged, and must not stop the run (or swallow the fields around it).
JSON_EXAMPLE = 'Call it as {"name": "calc", "arguments": {"expression": "2+3"}}.'


@pytest.mark.parametrize(
    "prompt",
    [JSON_EXAMPLE, "Reply {", "Use {} here", "Use {0}", "a } b", 'Set {"a": 1}}', "{ question }"],
)
def test_braces_that_are_not_a_field_stay_literal(prompt):
    check_system_prompt(prompt, TASKS)
    assert opening_messages(TASKS[0], prompt)[0]["content"] == prompt


def test_fields_are_filled_beside_a_json_example():
    prompt = "Solve {question} (level {level}). " + JSON_EXAMPLE
    check_system_prompt(prompt, TASKS[:1])
    content = opening_messages(TASKS[0], prompt)[0]["content"]
    assert content == "Solve 2+3? (level 1). " + JSON_EXAMPLE
    with pytest.raises(UserError, match=r"uses \{quesiton\}"):
        check_system_prompt("Solve {quesiton}. " + JSON_EXAMPLE, TASKS)


def test_attributes_indices_and_format_specs_are_filled_and_checked():
    tasks = [{"question": "q", "meta": {"kind": "sum"}, "steps": [3, 4], "score": 0.5}]
    prompt = "{meta[kind]} {steps[1]} {score:.2f} {question!r} {{question}}"
    check_system_prompt(prompt, tasks)
    assert opening_messages(tasks[0], prompt)[0]["content"] == "sum 4 0.50 'q' {question}"
    with pytest.raises(UserError, match=r"\{meta\[knd\]\}.*KeyError"):
        check_system_prompt("{meta[knd]}", tasks)
    with pytest.raises(UserError, match=r"\{question:d\}"):
        check_system_prompt("{question:d}", tasks)


def test_known_fields_are_filled_and_doubled_braces_stay_literal():
    prompt = 'Answer {question} as {{"answer": "..."}}.'
    check_system_prompt(prompt, TASKS)
    system = opening_messages(TASKS[0], prompt)[0]
    assert system == {"role": "system", "content": 'Answer 2+3? as {"answer": "..."}.'}


def test_a_task_with_its_own_system_message_does_not_need_the_fields():
    own = {"messages": [{"role": "system", "content": "mine"}, {"role": "user", "content": "q"}]}
    check_system_prompt("Solve {question}", [own])
    with pytest.raises(UserError, match=r"\{question\}"):
        check_system_prompt("Solve {question}", [own, {"messages": own["messages"][1:]}])


def test_rollout_refuses_a_misspelled_field_before_the_model_loads(good, model_loads):  # noqa: F811
    result = agentfly(
        "rollout", *rollout_args(good, "--set", "chat.system_prompt=Solve {quesiton} now")
    )
    one_line_error(result, "{quesiton}", "question, answer")
    assert model_loads == []


def test_the_engine_refuses_a_misspelled_field_before_any_chain_runs(chat):  # noqa: F811
    engine = make_engine(chat, [["5"]])
    engine.system_prompt = "Solve {quesiton}"
    with pytest.raises(UserError, match=r"\{quesiton\}"):
        asyncio.run(engine.run(TASKS[:1]))
    assert engine.sampled_tokens == 0
