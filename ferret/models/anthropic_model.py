"""Claude through the Anthropic Messages API, with the official `anthropic` SDK.

Retries are the SDK's own: it retries connection errors, timeouts, 408, 409, 429 and 5xx (529
"overloaded" included) up to `max_retries` times with backoff, honouring `retry-after-ms` /
`retry-after` headers. What is still failing after those retries is mapped, in `_classify` alone, to
`ModelUnavailable` (try later or fall back) or `ModelError` (a request or credential problem that
retrying will not fix).

The API key comes from the injected client or from ANTHROPIC_API_KEY. It is never stored on the model,
put into its repr, or into any message this module writes.

Notes on the installed SDK (anthropic 2.x): it is built on `httpx2`, not `httpx`, so a custom
`http_client` must be an `httpx2.Client`; it sends the key as `Authorization: Bearer <key>`; and its
`messages.create` has no `temperature` (nor any sampling parameter), so `ModelRequest.temperature` is
sent only to SDKs that take it.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

import anthropic

from ferret.models.base import ModelError, ModelRequest, ModelResponse, ModelUnavailable, ToolCall, model_requests_forbidden

# claude-sonnet-4-5 reaches end of life on 2026-11-30 (the SDK's deprecated-models table); one of the
# current models in the installed SDK's model list:
DEFAULT_MODEL = "claude-sonnet-5-5"
API_KEY_ENV = "ANTHROPIC_API_KEY"

# Statuses the SDK retries by itself (see its `_should_retry`): still failing after the retries means
# the service is busy or down, not that the request is wrong.
_TRANSIENT_STATUSES = {408, 409, 429}
# Statuses that say the request or the credentials are wrong.
_FATAL_ERRORS = (
    anthropic.AuthenticationError,
    anthropic.PermissionDeniedError,
    anthropic.BadRequestError,
    anthropic.NotFoundError,
)


@functools.lru_cache(maxsize=1)
def _sdk_takes_temperature() -> bool:
    """Whether this SDK's `messages.create` has a `temperature` parameter. anthropic 2.x has none (the
    API version it speaks dropped sampling parameters), so `ModelRequest.temperature` is not sent there;
    older SDKs take it."""
    from anthropic.resources.messages import Messages

    return "temperature" in inspect.signature(Messages.create).parameters


def _redact(text: str, secret: str | None) -> str:
    if secret:
        text = text.replace(secret, "[redacted]")
    return text


def _status_detail(err: anthropic.APIStatusError) -> str:
    body = err.body if isinstance(err.body, dict) else {}
    raw_error = body.get("error")
    error = raw_error if isinstance(raw_error, dict) else {}
    kind = getattr(err, "type", None) or error.get("type")
    message = getattr(err, "api_message", None) or error.get("message") or (err.body if isinstance(err.body, str) else "")
    request_id = getattr(err, "request_id", None)
    detail = f"HTTP {err.status_code}"
    if kind:
        detail += f" {kind}"
    if message:
        detail += f": {str(message)[:500]}"
    if request_id:
        detail += f"; request-id {request_id}"
    return detail


def _classify(err: Exception, *, model: str, attempts: int | None = None, secret: str | None = None) -> Exception:
    """The one place an SDK error becomes a Ferret error: ModelError (do not retry) or ModelUnavailable."""
    after = f" after {attempts} attempts" if attempts else ""
    if isinstance(err, anthropic.APITimeoutError):
        exc: Exception = ModelUnavailable(f"anthropic:{model}: the request timed out{after}")
    elif isinstance(err, anthropic.APIConnectionError):
        exc = ModelUnavailable(f"anthropic:{model}: could not reach the Anthropic API{after} ({err.message})")
    elif isinstance(err, _FATAL_ERRORS):
        exc = ModelError(f"anthropic:{model}: the API refused the request ({_status_detail(err)})")
    elif isinstance(err, anthropic.APIStatusError):
        status = err.status_code
        if status in _TRANSIENT_STATUSES or status >= 500:
            kind = {429: "rate limited", 529: "overloaded"}.get(status, "unavailable")
            exc = ModelUnavailable(f"anthropic:{model}: {kind}{after} ({_status_detail(err)})")
        else:
            exc = ModelError(f"anthropic:{model}: the API refused the request ({_status_detail(err)})")
    elif isinstance(err, anthropic.APIResponseValidationError):
        exc = ModelError(f"anthropic:{model}: the API answered with data the SDK could not read ({err.message})")
    elif isinstance(err, anthropic.AnthropicError):
        exc = ModelError(f"anthropic:{model}: {type(err).__name__}: {err}")
    else:
        exc = ModelError(f"anthropic:{model}: {type(err).__name__}: {err}")
    return type(exc)(_redact(str(exc), secret))


class AnthropicModel:
    """`Model` for the Anthropic Messages API.

    `client`: an `anthropic.Anthropic` to use as is (its own `max_retries`, base URL and HTTP client are
    kept; tests inject one over a mock transport). Without it, one is built from ANTHROPIC_API_KEY with
    `max_retries` and `timeout`; no key raises `ModelUnavailable`.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        client: anthropic.Anthropic | None = None,
        max_retries: int = 4,
        timeout: float = 600,
    ):
        self.model = model
        self.name = f"anthropic:{model}"
        self.timeout = timeout
        if client is None:
            key = os.environ.get(API_KEY_ENV, "").strip()
            if not key:
                raise ModelUnavailable(f"{self.name}: {API_KEY_ENV} is not set, so the Anthropic API cannot be used")
            client = anthropic.Anthropic(api_key=key, max_retries=max_retries, timeout=timeout)
        self._client = client

    @property
    def max_retries(self) -> int:
        return int(self._client.max_retries)

    def __repr__(self) -> str:
        return f"AnthropicModel(model={self.model!r}, max_retries={self.max_retries}, timeout={self.timeout!r})"

    def _secret(self) -> str | None:
        return getattr(self._client, "api_key", None) or getattr(self._client, "auth_token", None)

    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of `messages.create` for `request`."""
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "timeout": self.timeout,
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in request.tools
            ]
        if request.temperature is not None and _sdk_takes_temperature():
            params["temperature"] = request.temperature
        return params

    def complete(self, request: ModelRequest) -> ModelResponse:
        if model_requests_forbidden():
            raise ModelUnavailable(f"{self.name}: model requests are forbidden in this process (forbid_model_requests)")
        try:
            message = self._client.messages.create(**self.build_params(request))
        except anthropic.AnthropicError as err:
            raise _classify(err, model=self.model, attempts=self.max_retries + 1, secret=self._secret()) from err
        return _to_response(message, fallback_model=self.model)


def _to_response(message: Any, fallback_model: str) -> ModelResponse:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in message.content or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
        elif kind == "tool_use":
            calls.append(ToolCall(name=block.name, input=dict(block.input or {})))
    usage: dict[str, int] = {}
    raw_usage = getattr(message, "usage", None)
    for field in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        value = getattr(raw_usage, field, None)
        if isinstance(value, int):
            usage[field] = value
    return ModelResponse(
        text="\n".join(t for t in texts if t),
        tool_calls=calls,
        model=getattr(message, "model", None) or fallback_model,
        usage=usage,
        stop_reason=getattr(message, "stop_reason", None),
    )
