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

from agentfly_cli.backends.base import (
    Backend,
    BackendUnavailableError,
    Generation,
    RequestContext,
    SamplingParams,
)
from agentfly_cli.errors import UserError
from agentfly_cli.settings.rollout import BackendSettings

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


class OpenAIHTTP:
    """The HTTP side of an OpenAI-compatible API, shared by the backend and the LLM judge.

    One pooled ``httpx.AsyncClient`` per event loop (safe for concurrent requests), bounded
    timeouts, the API key from an environment variable, and one-line :class:`ServerError`
    messages that name the URL, the status and the setting to fix. ``label`` starts each
    message; ``settings`` names the config keys to mention (``base_url``, ``timeout``, ``model``).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float,
        api_key_env: str | None = None,
        label: str = "openai backend",
        settings: dict[str, str] | None = None,
        pooled: bool = True,
    ) -> None:
        try:
            import httpx
        except ImportError as exc:
            raise BackendUnavailableError(
                f"the {label} needs httpx: run `pip install httpx`"
            ) from exc
        self._httpx = httpx
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.api_key_env = api_key_env
        self.label = label
        self.pooled = pooled  # False: a client per request, for users without a close hook
        self.settings = {
            "base_url": "backend.base_url",
            "timeout": "backend.request_timeout",
            "model": "backend.served_model",
            **(settings or {}),
        }
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}
        self._ssl: Any = None
        key = os.environ.get(api_key_env, "") if api_key_env else ""
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}

    def client(self) -> Any:
        """This event loop's client (clients of closed loops are dropped)."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            for old in [lp for lp in self._clients if lp.is_closed()]:
                del self._clients[old]
            client = self._clients[loop] = self._new_client()
        return client

    def _new_client(self) -> Any:
        httpx = self._httpx
        if self._ssl is None:  # building one costs ~25 ms: once, not per client
            self._ssl = httpx.create_ssl_context()
        return httpx.AsyncClient(
            headers=self._headers,
            timeout=httpx.Timeout(self.timeout),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            verify=self._ssl,
        )

    async def close(self) -> None:
        """Close the HTTP connections of the running event loop."""
        loop = asyncio.get_running_loop()
        client = self._clients.pop(loop, None)
        self._clients.clear()  # clients of other (finished) loops cannot be closed from here
        if client is not None:
            await client.aclose()

    async def send(self, method: str, url: str, body: dict | None = None) -> tuple[int, Any]:
        """``(status, JSON reply or text)``; unreachable servers and timeouts raise."""
        httpx = self._httpx
        try:
            if self.pooled:
                response = await self.client().request(method, url, json=body)
            else:
                async with self._new_client() as client:
                    response = await client.request(method, url, json=body)
        except httpx.TimeoutException as exc:
            raise ServerError(
                f"{self.label}: {method} {url} timed out after {self.timeout:g}s; "
                f"check the server or raise {self.settings['timeout']}",
                url,
            ) from exc
        except httpx.HTTPError as exc:
            raise ServerError(
                f"{self.label}: cannot reach {url} ({type(exc).__name__}: {exc}); "
                f"is the server running? check {self.settings['base_url']}",
                url,
            ) from exc
        try:
            payload = response.json()
        except ValueError:
            payload = response.text
        return response.status_code, payload

    def error(self, url: str, status: int, reply: Any, hint: str = "") -> ServerError:
        """The one-line error of an HTTP error reply."""
        detail = reply
        if isinstance(reply, dict):
            error = reply.get("error", reply)
            detail = error.get("message", error) if isinstance(error, dict) else error
        detail = " ".join(str(detail).split())[:300]
        if status in (401, 403):
            hint = f"; set the API key in ${self.api_key_env}"
        elif status == 404:
            hint = (
                f"; check {self.settings['base_url']} (it usually ends in /v1) and "
                f"{self.settings['model']}"
            )
        return ServerError(
            f"{self.label}: POST {url} -> HTTP {status}: {detail}{hint}", url, status
        )

    async def first_model(self) -> str:
        """The first model that ``GET {base_url}/models`` lists."""
        status, reply = await self.send("GET", f"{self.base_url}/models")
        models = reply.get("data") if status == 200 and isinstance(reply, dict) else None
        if not models:
            raise UserError(
                f"{self.label}: cannot tell which model {self.base_url} serves; "
                f"set {self.settings['model']}"
            )
        return str(models[0]["id"])


class OpenAIBackend(Backend):
    """Token-in, token-out over an OpenAI-compatible ``/completions`` endpoint."""

    name = "openai"

    def __init__(self, config: BackendSettings, tokenizer: Any = None):
        if not config.base_url:
            raise UserError(
                "the openai backend needs backend.base_url, e.g. http://localhost:8000/v1"
            )
        self.config = config
        self.http = OpenAIHTTP(
            config.base_url, timeout=config.request_timeout, api_key_env=config.api_key_env
        )
        self.base_url = self.http.base_url
        self.url = f"{self.base_url}/completions"
        self.served_model = config.served_model or (
            Path(config.model).name if config.model else None
        )
        self.tokenizer = tokenizer
        self.returns_tokens = True
        self.token_prompts = True  # False once the server refused a token-id prompt
        self._warned = False

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
        await self.http.close()

    # ---- requests ---------------------------------------------------------------------------

    async def _post(self, body: dict) -> tuple[int, Any]:
        return await self.http.send("POST", self.url, body)

    def _raise(self, status: int, reply: Any, hint: str = "") -> None:
        raise self.http.error(self.url, status, reply, hint)

    async def _model_name(self) -> str:
        if not self.served_model:
            self.served_model = await self.http.first_model()
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

            self.tokenizer = load_tokenizer(source, self.config.tokenizer_loader)
        return self.tokenizer
