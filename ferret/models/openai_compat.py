"""Any server speaking the OpenAI chat-completions API: vLLM, llama.cpp, Ollama, LM Studio, OpenAI.

POST `{base_url}/chat/completions` with the system prompt as the first message and the tools in the
OpenAI function format; the answer's `choices[0].message` gives the text and the tool calls (whose
`arguments` are a JSON string). A key is sent as `Authorization: Bearer` only when the environment
variable `api_key_env` names one; local servers need none.

Failures: 400/401/403/404 and other 4xx answers are `ModelError` (the request or the credentials are
wrong); 429, 5xx and transport failures are `ModelUnavailable`. Connection attempts are retried by
httpx's own transport (`retries`), which retries failed connects only; nothing here loops.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx

from ferret.models.base import ModelError, ModelRequest, ModelResponse, ModelUnavailable, ToolCall, model_requests_forbidden

CONNECT_RETRIES = 3


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "[redacted]") if secret else text


class OpenAICompatModel:
    """`Model` for an OpenAI-compatible chat-completions endpoint.

    `client`: an `httpx.Client` to use as is (tests pass one over `httpx.MockTransport`). Without it, one
    is built with `timeout` and a transport that retries failed connections `CONNECT_RETRIES` times.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        client: httpx.Client | None = None,
        timeout: float = 600,
    ):
        if not base_url:
            raise ValueError("OpenAICompatModel needs a base_url, e.g. http://localhost:8000/v1")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.name = f"openai:{model}"
        self._client = client or httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(30.0, timeout)),
            transport=httpx.HTTPTransport(retries=CONNECT_RETRIES),
        )

    def __repr__(self) -> str:
        return f"OpenAICompatModel(base_url={self.base_url!r}, model={self.model!r}, api_key_env={self.api_key_env!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _key(self) -> str | None:
        key = os.environ.get(self.api_key_env, "").strip() if self.api_key_env else ""
        return key or None

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.extend({"role": m.role, "content": m.content} for m in request.messages)
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": request.max_tokens}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                }
                for t in request.tools
            ]
        return body

    def complete(self, request: ModelRequest) -> ModelResponse:
        if model_requests_forbidden():
            raise ModelUnavailable(f"{self.name}: model requests are forbidden in this process (forbid_model_requests)")
        key = self._key()
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            response = self._client.post(self.url, json=self.build_body(request), headers=headers)
        except httpx.TimeoutException as err:
            raise ModelUnavailable(f"{self.name}: {self.url} timed out ({type(err).__name__})") from err
        except httpx.TransportError as err:
            message = _redact(str(err), key)
            raise ModelUnavailable(f"{self.name}: could not reach {self.url} ({type(err).__name__}: {message})") from err
        if response.status_code >= 400:
            raise _status_error(self.name, self.url, response, key)
        try:
            payload = response.json()
        except ValueError as err:
            raise ModelError(f"{self.name}: {self.url} answered with something other than JSON: {response.text[:300]!r}") from err
        return _to_response(payload, self.name, self.model)


def _status_error(name: str, url: str, response: httpx.Response, key: str | None) -> Exception:
    status = response.status_code
    detail = response.text[:500]
    try:
        error = response.json().get("error")
        if isinstance(error, dict) and error.get("message"):
            detail = str(error["message"])[:500]
        elif isinstance(error, str):
            detail = error[:500]
    except (ValueError, AttributeError):
        pass
    detail = _redact(detail, key)
    if status == 429 or status >= 500:
        kind = "rate limited" if status == 429 else "server error"
        return ModelUnavailable(f"{name}: {kind} from {url} (HTTP {status}: {detail})")
    return ModelError(f"{name}: {url} refused the request (HTTP {status}: {detail})")


def _to_response(payload: Any, name: str, model: str) -> ModelResponse:
    try:
        choice = payload["choices"][0]
        message = choice.get("message") or {}
    except (KeyError, IndexError, TypeError, AttributeError) as err:
        raise ModelError(f"{name}: the answer has no choices[0].message: {json.dumps(payload)[:300]}") from err
    calls: list[ToolCall] = []
    for raw in message.get("tool_calls") or []:
        function = (raw or {}).get("function") or {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError as err:
                raise ModelError(
                    f"{name}: tool call {function.get('name')!r} has arguments that are not JSON: {arguments[:300]!r}"
                ) from err
        if not isinstance(arguments, dict):
            raise ModelError(f"{name}: tool call {function.get('name')!r} has arguments that are not a JSON object")
        calls.append(ToolCall(name=str(function.get("name", "")), input=arguments))
    usage: dict[str, int] = {}
    raw_usage = payload.get("usage") or {}
    for theirs, ours in (("prompt_tokens", "input_tokens"), ("completion_tokens", "output_tokens")):
        if isinstance(raw_usage.get(theirs), int):
            usage[ours] = raw_usage[theirs]
    content = message.get("content") or ""
    if isinstance(content, list):  # some servers answer with content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ModelResponse(
        text=str(content),
        tool_calls=calls,
        model=payload.get("model") or model,
        usage=usage,
        stop_reason=choice.get("finish_reason"),
    )
