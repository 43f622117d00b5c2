"""``llm_judge``: an LLM grades the final answer, through any OpenAI-compatible chat endpoint.

Configure it in a run's reward list::

    reward:
      - name: llm_judge
        options: {base_url: http://127.0.0.1:8000/v1, model: judge, verdict: yes_no}

The judge sees the question (``question_field``), the reference answer (``reference_field``)
when the row has one, and the prediction. Its reply is parsed as ``VERDICT: YES/NO`` (1 or 0)
or ``SCORE: N`` (N / ``max_score``, in [0, 1]). A reply that says neither, an HTTP error or a
timeout is a failed reward with a one-line error (scored 0 by default, see ``on_error``).
Requests go through :class:`~agentfly_cli.backends.openai.OpenAIHTTP`, as the
``openai`` backend's do.
"""

from __future__ import annotations

import asyncio
import os
import re
import string
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentfly_cli.components.rewards import MissingFieldError, Reward, RewardResult
from agentfly_cli.errors import UserError

SYSTEM_PROMPT = (
    "You are a strict, fair grader. You compare a candidate answer with the question and, when "
    "one is given, the reference answer. Judge meaning, not wording or formatting."
)
YES_NO_PROMPT = """Question:
{question}

Reference answer:
{reference}

Candidate answer:
{prediction}

Is the candidate answer correct? Reply with one line: VERDICT: YES or VERDICT: NO"""
SCORE_PROMPT = """Question:
{question}

Reference answer:
{reference}

Candidate answer:
{prediction}

How good is the candidate answer, from 0 (wrong) to {max_score} (fully correct)? Reply with \
one line: SCORE: N"""
NO_REFERENCE = "(none given)"
PLACEHOLDERS = {"question", "reference", "prediction", "max_score"}
BACKOFF_S = 0.5

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_VERDICT = re.compile(
    r"\bverdict\b\W{0,6}(yes|no|correct|incorrect)\b", re.IGNORECASE
)  # "VERDICT: YES", "**Verdict:** no"
_BARE_VERDICT = re.compile(r"^\W*(yes|no|correct|incorrect)\W*$", re.IGNORECASE)
_SCORE = re.compile(
    r"\bscore\b[^\w-]{0,6}(-?\d+(?:\.\d+)?)(?:\s*(?:/|out of)\s*(\d+(?:\.\d+)?))?", re.IGNORECASE
)
_BARE_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*$")


class JudgeOutputError(ValueError):
    """The judge's reply holds no verdict or score that can be read."""


class JudgeOptions(BaseModel):
    """The options of ``llm_judge`` (``reward: [{name: llm_judge, options: {...}}]``)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(
        None, description="OpenAI-compatible server, e.g. http://host:8000/v1; $OPENAI_BASE_URL"
    )
    model: str | None = Field(None, description="judge model; default: the first it serves")
    api_key_env: str | None = Field("OPENAI_API_KEY", description="env variable of the API key")
    verdict: Literal["yes_no", "score"] = Field(
        "yes_no", description="yes_no: 'VERDICT: YES' -> 1, NO -> 0; score: 'SCORE: N' -> N/max"
    )
    max_score: float = Field(10.0, gt=0, description="top of the score scale (verdict: score)")
    prompt: str | None = Field(
        None, description="user message template: {question} {reference} {prediction} {max_score}"
    )
    system_prompt: str | None = SYSTEM_PROMPT
    question_field: str = Field("question", description="dataset field of the question")
    reference_field: str | None = Field("answer", description="dataset field of the reference")
    temperature: float = Field(0.0, ge=0)
    max_tokens: int = Field(64, ge=1, description="tokens of the judge's reply")
    timeout: float = Field(30.0, gt=0, description="seconds per request")
    retries: int = Field(1, ge=0, le=5, description="retries after a timeout, 429 or 5xx")
    on_error: Literal["zero", "raise"] = Field("zero", description="a failed judgment: 0 or abort")

    def template(self) -> str:
        if self.prompt is not None:
            return self.prompt
        return YES_NO_PROMPT if self.verdict == "yes_no" else SCORE_PROMPT


class LLMJudge(Reward):
    """A reward that asks an LLM whether the final answer is right."""

    def __init__(self, options: JudgeOptions | None = None) -> None:
        self.options = options or JudgeOptions()
        attempts = self.options.retries + 1
        backoff = sum(BACKOFF_S * 2**i for i in range(self.options.retries))
        super().__init__(
            self._judge,
            name="llm_judge",
            description="An LLM grades the answer (any OpenAI-compatible endpoint; needs options)",
            timeout=self.options.timeout * attempts + backoff + 5.0,
            on_error=self.options.on_error,
        )
        self._http: Any = None
        self._model: str | None = self.options.model

    @property
    def fields(self) -> list[str]:
        return [self.options.question_field]

    def with_options(self, options: Mapping[str, Any]) -> LLMJudge:
        """A judge with these options (checked now: a bad one is a one-line UserError)."""
        try:
            parsed = JudgeOptions.model_validate(dict(options))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "options"
            raise UserError(f"reward llm_judge: options.{where}: {first['msg']}") from None
        unknown = _placeholders(parsed.template()) - PLACEHOLDERS
        if unknown:
            raise UserError(
                f"reward llm_judge: options.prompt uses {{{sorted(unknown)[0]}}}; the prompt "
                f"may use {', '.join('{' + p + '}' for p in sorted(PLACEHOLDERS))} (write "
                "literal braces as {{ }})"
            )
        if not (parsed.base_url or os.environ.get("OPENAI_BASE_URL")):
            raise UserError(
                "reward llm_judge needs options.base_url (an OpenAI-compatible server, e.g. "
                "http://127.0.0.1:8000/v1) or $OPENAI_BASE_URL"
            )
        return LLMJudge(parsed)

    # -- scoring ----------------------------------------------------------------------------------
    async def _judge(self, prediction: Any, trajectory: Any = None, **row: Any) -> RewardResult:
        options = self.options
        if prediction is None or not str(prediction).strip():
            return RewardResult(0.0, {"verdict": "no answer"}, self.name)
        if options.question_field not in row:
            available = ", ".join(sorted(map(str, row))) or "none"
            raise MissingFieldError(
                f"reward 'llm_judge' needs the dataset field '{options.question_field}' "
                f"(options.question_field); the row has: {available}"
            )
        reference = row.get(options.reference_field) if options.reference_field else None
        values = {
            "question": str(row[options.question_field]),
            "reference": NO_REFERENCE if reference is None else _text(reference),
            "prediction": str(prediction).strip(),
            "max_score": f"{options.max_score:g}",
        }
        messages = [{"role": "user", "content": options.template().format_map(values)}]
        if options.system_prompt:
            messages.insert(0, {"role": "system", "content": options.system_prompt})
        reply = await self._ask(messages)
        score, verdict = parse_judgment(reply, options.verdict, options.max_score)
        return RewardResult(score, {"verdict": verdict, "judge_reply": reply[:300]}, self.name)

    def _client(self) -> Any:
        if self._http is None:
            from agentfly_cli.backends.openai import OpenAIHTTP

            base_url = self.options.base_url or os.environ.get("OPENAI_BASE_URL")
            if not base_url:
                raise UserError("llm_judge needs options.base_url (or $OPENAI_BASE_URL)")
            self._http = OpenAIHTTP(
                base_url,
                timeout=self.options.timeout,
                api_key_env=self.options.api_key_env,
                label="llm_judge",
                settings={
                    "base_url": "options.base_url",
                    "timeout": "options.timeout",
                    "model": "options.model",
                },
                pooled=False,  # a reward has no close hook: no connection outlives its call
            )
        return self._http

    async def _ask(self, messages: list[dict[str, str]]) -> str:
        from agentfly_cli.backends.openai import ServerError

        http = self._client()
        if self._model is None:
            self._model = await http.first_model()
        url = f"{http.base_url}/chat/completions"
        body = {
            "model": self._model,
            "messages": messages,
            "temperature": self.options.temperature,
            "max_tokens": self.options.max_tokens,
        }
        for attempt in range(self.options.retries + 1):
            last = attempt == self.options.retries
            try:
                status, reply = await http.send("POST", url, body)
            except ServerError:
                if last:
                    raise
            else:
                if status == 200:
                    return _content(reply, url)
                if last or not (status == 429 or status >= 500):
                    raise http.error(url, status, reply)
            await asyncio.sleep(BACKOFF_S * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover


def parse_judgment(reply: str, mode: str, max_score: float = 10.0) -> tuple[float, str]:
    """``(score in [0, 1], verdict label)`` from the judge's reply; JudgeOutputError if none."""
    text = _THINK.sub("", reply).strip()
    snippet = " ".join(text.split())[:120]
    if mode == "yes_no":
        found = _VERDICT.findall(text) or _BARE_VERDICT.findall(text)
        if not found:
            raise JudgeOutputError(f"the judge's reply has no 'VERDICT: YES/NO': {snippet!r}")
        word = found[-1].upper()
        return (1.0 if word in ("YES", "CORRECT") else 0.0), word
    found = _SCORE.findall(text) or [(m, "") for m in _BARE_NUMBER.findall(text)]
    if not found:
        raise JudgeOutputError(f"the judge's reply has no 'SCORE: N': {snippet!r}")
    value, scale = float(found[-1][0]), float(found[-1][1] or max_score)
    if scale <= 0 or not 0 <= value <= scale:
        raise JudgeOutputError(f"the judge's score {value:g} is outside 0..{scale:g}: {snippet!r}")
    return value / scale, f"{value:g}/{scale:g}"


def _content(reply: Any, url: str) -> str:
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise JudgeOutputError(
            f"{url} sent no choices[0].message.content: {' '.join(str(reply).split())[:160]!r}"
        ) from None
    if not isinstance(content, str):
        raise JudgeOutputError(f"{url} sent a non-text message content: {content!r:.80}")
    return content


def _placeholders(template: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise UserError(
            f"reward llm_judge: options.prompt is not a valid template ({exc})"
        ) from None


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return " | ".join(map(str, value))  # several acceptable answers
    return str(value)


llm_judge = LLMJudge()
