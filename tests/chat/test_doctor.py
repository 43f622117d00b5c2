"""``agentfly doctor``: verdicts on the tiny model and on the real Qwen2.5, Qwen3 and SmolLM2
tokenizers and templates, and each failure it exists to catch, made on purpose: a tokenizer
that does not give its text back, a parser that cannot read the template's calls, a template
that refuses tool turns."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentfly_cli.chat.doctor import diagnose, training_notes
from agentfly_cli.cli.app import build_app
from tests.train.test_trainer import ON_CPU, recipe  # noqa: F401 (fixture)

TOOL_ROLE_REFUSED = (
    "{% for message in messages %}"
    "{% if message.role == 'tool' %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant') }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def statuses(verdicts) -> dict[str, str]:
    return {v.check.split(" reads")[0] if v.check.startswith("parser") else v.check: v.status
            for v in verdicts}  # fmt: skip


def test_the_tiny_model_passes_every_check(tiny_model):
    verdicts = diagnose(str(tiny_model))
    assert [v.status for v in verdicts] == ["pass"] * 5, verdicts
    assert not any(v.fix for v in verdicts)
    result = CliRunner().invoke(build_app(), ["doctor", str(tiny_model), "--json"])
    assert result.exit_code == 0, result.output
    assert [row["status"] for row in json.loads(result.output)] == ["pass"] * 5


def test_real_models_get_the_verdicts_their_templates_earn(realdata):
    qwen25 = statuses(diagnose(str(realdata / "qwen2.5")))
    assert set(qwen25.values()) == {"pass"}
    qwen3 = statuses(diagnose(str(realdata / "qwen3")))
    assert qwen3["observation deltas"] == "warn"  # it drops earlier <think> blocks
    assert qwen3["tokenizer round trip"] == qwen3["parser hermes"] == "pass"
    smollm2 = statuses(diagnose(str(realdata / "smollm2")))
    assert smollm2["tool schemas"] == "warn"  # its template has no tools
    hermes = str(realdata / "hermes" / "chat_template.jinja")
    with_hermes = statuses(diagnose(str(realdata / "smollm2"), template=hermes))
    assert set(with_hermes.values()) == {"pass"}


def test_a_tokenizer_that_drops_spaces_fails_with_the_fix(tiny_model, monkeypatch):
    """The DeepSeek-V3 tokenizer as transformers loads it decodes without its spaces: the
    same symptom, injected into the tiny model's decoding."""
    from agentfly_cli.chat.templates import ChatTemplate

    real = ChatTemplate.decode
    monkeypatch.setattr(ChatTemplate, "decode", lambda self, ids: real(self, ids).replace(" ", ""))
    [verdict] = [v for v in diagnose(str(tiny_model)) if v.check == "tokenizer round trip"]
    assert verdict.status == "fail" and "'Thequickbrownfox" in verdict.detail and verdict.fix
    [note] = training_notes(ChatTemplate.load(str(tiny_model)))
    assert note.startswith("agentfly doctor: tokenizer round trip:") and "fix:" in note
    result = CliRunner().invoke(build_app(), ["doctor", str(tiny_model)])
    assert result.exit_code == 1 and "FAIL" in result.output


def test_a_parser_that_cannot_read_the_templates_calls_fails_and_names_one_that_can(tiny_model):
    [verdict] = [v for v in diagnose(str(tiny_model), parser="mistral") if "parser" in v.check]
    assert verdict.status == "fail" and verdict.fix == "--parser hermes"


def test_a_template_that_refuses_tool_turns_gets_the_observation_role_fix(tiny_model, tmp_path):
    template = tmp_path / "strict.jinja"
    template.write_text(TOOL_ROLE_REFUSED)
    verdicts = statuses(diagnose(str(tiny_model), template=str(template)))
    assert verdicts["observation deltas"] == "fail"
    [verdict] = [
        v for v in diagnose(str(tiny_model), template=str(template))
        if v.check == "observation deltas"
    ]  # fmt: skip
    assert verdict.fix.startswith("--set chat.observation.role=user")
    fixed = diagnose(str(tiny_model), template=str(template), observation_role="user")
    assert statuses(fixed)["observation deltas"] == "pass"


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    result = CliRunner().invoke(build_app(), ["doctor", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "neither a folder nor a known alias" in result.output


@pytest.mark.parametrize("flag", ["--template", "--parser"])
def test_unknown_template_or_parser_is_one_line(tiny_model, flag):
    result = CliRunner().invoke(build_app(), ["doctor", str(tiny_model), flag, "no_such_thing"])
    assert result.exit_code in (1, 2) and "Traceback" not in result.output
    assert "no_such_thing" in result.output


def test_agentfly_train_prints_a_failed_fast_check_first(recipe, tmp_path, monkeypatch):  # noqa: F811
    from agentfly_cli.chat.templates import ChatTemplate

    real = ChatTemplate.decode
    monkeypatch.setattr(ChatTemplate, "decode", lambda self, ids: real(self, ids).replace(" ", ""))
    fields = recipe["fields"]
    args = ["train", "calculator", "--model", fields["model"], "--data", fields["data.path"],
            "--reward", fields["reward"], "--steps", "1", "--out", str(tmp_path)]  # fmt: skip
    for item in [*recipe["sets"], *ON_CPU]:
        args += ["--set", item]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    assert "agentfly doctor: tokenizer round trip" in " ".join(result.output.split())
