"""The ``openai`` backend: any OpenAI-compatible server, for rollouts and evaluation.

It posts the prompt's token ids to ``{base_url}/completions`` with vLLM's extras
(``return_tokens_as_token_ids``, ``stop_token_ids``, ``skip_special_tokens: false``). A vLLM
server then answers with the exact ids it sampled and their logprobs: token-exact, fit for
training. A server that refuses token prompts, or answers without ids, gets a text prompt and
its reply is re-encoded locally (``token_exact=False``, ``returns_tokens`` becomes False):
fine for evaluation, never for training.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.rollout.backends.base import (
    Backend,
    BackendConfig,
    BackendUnavailableError,
    Generation,
    RequestContext,
    SamplingParams,
)

log = logging.getLogger(__name__)

_TOKEN_ID = re.compile(r"^token_id:(\d+)$")
_FINISH = {"stop": "stop", "length": "length", "abort": "abort", "content_filter": "abort"}
_RETRY_AS_TEXT = {400, 415, 422}  # statuses that may mean "token prompts not supported"


class ServerError(BackendUnavailableError):
    """The server could not be reached, timed out, or answered with an HTTP error."""

    def __init__(self, message: str, url: str, status: int | None = None):
        super().__init__(message)
        self.url = url
        self.status = status


class OpenAIBackend(Backend):
    """Token-in, token-out over an OpenAI-compatible ``/completions`` endpoint."""

    name = "openai"

    def __init__(self, config: BackendConfig, tokenizer: Any = None):
        try:
            import httpx
        except ImportError as exc:
            raise BackendUnavailableError(
                "the openai backend needs httpx: run `pip install httpx`"
            ) from exc
        if not config.base_url:
            raise UserError(
                "the openai backend needs backend.base_url, e.g. http://localhost:8000/v1"
            )
        self.config = config
        self._httpx = httpx
        self.base_url = config.base_url.rstrip("/")
        self.url = f"{self.base_url}/completions"
        self.served_model = config.served_model or (
            Path(config.model).name if config.model else None
        )
        self.tokenizer = tokenizer
        self.returns_tokens = True
        self.token_prompts = True  # False once the server refused a token-id prompt
        self._warned = False
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}
        key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}

    # ---- public API -------------------------------------------------------------------------

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, context: RequestContext | None = None
    ) -> Generation:
        """Sample one response from the server."""
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("openai backend: prompt_ids is empty")
        model = await self._model_name()
        if self.token_prompts:
            status, reply = await self._post(self._body(model, prompt, params, exact=True))
            if status == 200:
                exact = self._exact(reply)
                return exact if exact is not None else self._inexact(reply, params, "tokens")
            if status not in _RETRY_AS_TEXT:
                self._raise(status, reply)
            if not self._can_tokenize():
                self._raise(
                    status,
                    reply,
                    "; if the server takes only text prompts, set "
                    "backend.tokenizer so that agentfly can send text",
                )
        status, reply = await self._post(self._text_body(model, prompt, params))
        if status != 200:
            self._raise(status, reply)
        if self.token_prompts:
            self.token_prompts = False
            log.info("openai backend: %s refused token-id prompts; sending text", self.url)
        return self._inexact(reply, params, "text")

    async def close(self) -> None:
        """Close the HTTP connections of the running event loop."""
        loop = asyncio.get_running_loop()
        client = self._clients.pop(loop, None)
        self._clients.clear()  # clients of other (finished) loops cannot be closed from here
        if client is not None:
            await client.aclose()

    # ---- requests ---------------------------------------------------------------------------

    def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            for old in [lp for lp in self._clients if lp.is_closed()]:
                del self._clients[old]
            httpx = self._httpx
            client = httpx.AsyncClient(
                headers=self._headers,
                timeout=httpx.Timeout(self.config.request_timeout),
                limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            )
            self._clients[loop] = client
        return client

    async def _send(self, method: str, url: str, body: dict | None = None) -> tuple[int, Any]:
        httpx = self._httpx
        try:
            response = await self._client().request(method, url, json=body)
        except httpx.TimeoutException as exc:
            raise ServerError(
                f"openai backend: {method} {url} timed out after {self.config.request_timeout:g}s; "
                "check the server or raise backend.request_timeout",
                url,
            ) from exc
        except httpx.HTTPError as exc:
            raise ServerError(
                f"openai backend: cannot reach {url} ({type(exc).__name__}: {exc}); "
                "is the server running? check backend.base_url",
                url,
            ) from exc
        try:
            payload = response.json()
        except ValueError:
            payload = response.text
        return response.status_code, payload

    async def _post(self, body: dict) -> tuple[int, Any]:
        return await self._send("POST", self.url, body)

    def _raise(self, status: int, reply: Any, hint: str = "") -> None:
        detail = reply
        if isinstance(reply, dict):
            error = reply.get("error", reply)
            detail = error.get("message", error) if isinstance(error, dict) else error
        detail = " ".join(str(detail).split())[:300]
        if status in (401, 403):
            hint = f"; set the API key in ${self.config.api_key_env}"
        elif status == 404:
            hint = "; check backend.base_url (it usually ends in /v1) and backend.served_model"
        raise ServerError(
            f"openai backend: POST {self.url} -> HTTP {status}: {detail}{hint}", self.url, status
        )

    async def _model_name(self) -> str:
        if self.served_model:
            return self.served_model
        status, reply = await self._send("GET", f"{self.base_url}/models")
        models = reply.get("data") if status == 200 and isinstance(reply, dict) else None
        if not models:
            raise UserError(
                f"openai backend: cannot tell which model {self.base_url} serves; "
                "set backend.served_model"
            )
        self.served_model = str(models[0]["id"])
        return self.served_model

    def _body(self, model: str, prompt: Any, params: SamplingParams, exact: bool) -> dict:
        body: dict[str, Any] = {
            "model": model,
            "prompt": prompt,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 1,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if exact:  # vLLM's extensions to the OpenAI API
            body["return_tokens_as_token_ids"] = True
            body["return_token_ids"] = True
            body["skip_special_tokens"] = False
            if params.stop_token_ids:
                body["stop_token_ids"] = list(params.stop_token_ids)
            if params.top_k > 0:
                body["top_k"] = params.top_k
        return body

    def _text_body(self, model: str, prompt: list[int], params: SamplingParams) -> dict:
        tokenizer = self._tokenizer()
        body = self._body(model, tokenizer.decode(prompt), params, exact=False)
        stops = [tokenizer.decode([t]) for t in params.stop_token_ids]
        if stops := [s for s in stops if s][:4]:  # OpenAI allows four stop strings
            body["stop"] = stops
        return body

    # ---- replies ----------------------------------------------------------------------------

    def _choice(self, reply: Any) -> dict:
        if not isinstance(reply, dict) or not reply.get("choices"):
            raise ServerError(
                f"openai backend: {self.url} sent a reply without choices: {str(reply)[:200]}",
                self.url,
            )
        return reply["choices"][0]

    def _exact(self, reply: Any) -> Generation | None:
        """The ids and logprobs of a vLLM-style reply, or None when it has no token ids."""
        choice = self._choice(reply)
        logprobs = choice.get("logprobs") or {}
        tokens = [str(t) for t in logprobs.get("tokens") or []]
        ids = choice.get("token_ids")  # vLLM >= 0.10.2 with return_token_ids
        if not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
            matches = [_TOKEN_ID.match(t) for t in tokens]
            if not all(matches) or (not tokens and choice.get("text")):
                return None  # text tokens, or text without logprobs: no exact ids
            ids = [int(m.group(1)) for m in matches]
        values = logprobs.get("token_logprobs") or []
        floats = None
        if len(values) == len(ids) and all(isinstance(v, (int, float)) for v in values):
            floats = [float(v) for v in values]
        return Generation(
            ids,
            floats,
            _FINISH.get(choice.get("finish_reason"), "stop"),
            text=choice.get("text"),
            info={"server_finish_reason": choice.get("finish_reason"), "prompt": "tokens"},
        )

    def _inexact(self, reply: Any, params: SamplingParams, prompt_mode: str) -> Generation:
        """Re-encode the reply's text locally: ids approximate, no logprobs."""
        choice = self._choice(reply)
        text = choice.get("text") or ""
        tokenizer = self._tokenizer()
        ids = list(tokenizer.encode(text, add_special_tokens=False))
        reason = _FINISH.get(choice.get("finish_reason"), "stop")
        if reason == "stop":  # close the turn the way the model did, as best we can tell
            stops = list(params.stop_token_ids) or [getattr(tokenizer, "eos_token_id", None)]
            if stops[0] is not None and (not ids or ids[-1] not in stops):
                ids.append(int(stops[0]))
        if not self._warned:
            self._warned = True
            log.warning(
                "openai backend: %s does not return token ids; replies are re-encoded from text "
                "(token_exact=False). That serves evaluation only: training needs a backend "
                "that returns tokens (hf, vllm, or a vLLM server).",
                self.url,
            )
        self.returns_tokens = False
        return Generation(
            ids,
            None,
            reason,
            text=text,
            token_exact=False,
            info={"server_finish_reason": choice.get("finish_reason"), "prompt": prompt_mode},
        )

    def _can_tokenize(self) -> bool:
        return bool(self.tokenizer is not None or self.config.tokenizer or self.config.model)

    def _tokenizer(self) -> Any:
        if self.tokenizer is None:
            source = self.config.tokenizer or self.config.model
            if not source:
                raise BackendUnavailableError(
                    f"openai backend: {self.url} works in text, and turning text into token ids "
                    "needs a tokenizer; set backend.tokenizer (or backend.model) to a local folder"
                )
            from agentfly_cli.chat.templates import load_tokenizer

            self.tokenizer = load_tokenizer(source)
        return self.tokenizer
