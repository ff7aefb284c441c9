"""AnthropicModel driven through the real `anthropic` SDK over a mock HTTP transport.

The installed SDK (anthropic 2.x) is built on `httpx2`: its `http_client` must be an `httpx2.Client`
(an `httpx.Client` is refused with a TypeError). Older SDKs used `httpx`; the transport module is
picked from what the SDK imports. Retry waits are kept short with `retry-after-ms: 1`, which the SDK's
`_calculate_retry_timeout` obeys before its own backoff.
"""

import importlib
import json
import logging
from typing import Any

import anthropic
import httpx
import pytest

from ferret.models import Message, ModelError, ModelRequest, ModelUnavailable, ToolSpec, forbid_model_requests
from ferret.models.anthropic_model import AnthropicModel, _classify, _sdk_takes_temperature

# The default model is on the SDK's deprecation list; its warning is not what these tests are about.
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

sdk_http: Any = importlib.import_module("httpx2") if hasattr(anthropic._base_client, "httpx2") else httpx

KEY = "sk-ant-test-7f3a91c2-SECRET"
MODEL = "claude-sonnet-4-5"
SCHEMA = {
    "type": "object",
    "properties": {"source": {"type": "string"}, "approach": {"type": "string"}},
    "required": ["source", "approach"],
}
REQUEST = ModelRequest(
    system="You write Triton kernels.",
    messages=[
        Message(role="user", content="Make rmsnorm fast."),
        Message(role="assistant", content="Which shapes?"),
        Message(role="user", content="4096 x 7168, bf16."),
    ],
    tools=[ToolSpec(name="submit_candidate", description="The optimizer's answer.", input_schema=SCHEMA)],
    max_tokens=2048,
    temperature=0.2,
)
MESSAGE = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "text", "text": "A fused single-pass kernel; submitting it."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "submit_candidate",
            "input": {"source": "import triton\n", "approach": "fused-one-pass"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 1523, "output_tokens": 311, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
}
FAST_RETRY = {"retry-after-ms": "1"}


def _error(status, kind, message):
    return sdk_http.Response(
        status,
        json={"type": "error", "error": {"type": kind, "message": message}},
        headers={**FAST_RETRY, "request-id": "req_011CTest"},
    )


class Recorder:
    """A transport handler that serves `responses` in order (the last one repeats) and counts calls."""

    def __init__(self, *responses):
        self.responses = list(responses)
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        item = self.responses[min(len(self.requests), len(self.responses)) - 1]
        if isinstance(item, Exception):
            raise item
        return item() if callable(item) else item

    @property
    def calls(self):
        return len(self.requests)


def _client(handler, max_retries=2):
    return anthropic.Anthropic(
        api_key=KEY,
        base_url="http://anthropic.test",
        http_client=sdk_http.Client(transport=sdk_http.MockTransport(handler)),
        max_retries=max_retries,
    )


def _model(handler, max_retries=2):
    return AnthropicModel(model=MODEL, client=_client(handler, max_retries))


def _ok():
    return sdk_http.Response(200, json=MESSAGE)


def test_request_is_mapped_and_response_read_back():
    seen = {}

    def handler(request):
        seen["method"], seen["path"] = request.method, request.url.path
        seen["headers"] = request.headers
        seen["body"] = json.loads(request.content)
        return _ok()

    response = _model(handler).complete(REQUEST)

    assert (seen["method"], seen["path"]) == ("POST", "/v1/messages")
    headers = seen["headers"]
    # anthropic 2.x sends the key as a bearer token; older SDKs as x-api-key.
    assert headers.get("x-api-key") == KEY or headers.get("authorization") == f"Bearer {KEY}"
    assert headers.get("anthropic-version")
    body = seen["body"]
    assert body["model"] == MODEL
    assert body["system"] == "You write Triton kernels."
    assert body["messages"] == [
        {"role": "user", "content": "Make rmsnorm fast."},
        {"role": "assistant", "content": "Which shapes?"},
        {"role": "user", "content": "4096 x 7168, bf16."},
    ]
    assert body["tools"] == [{"name": "submit_candidate", "description": "The optimizer's answer.", "input_schema": SCHEMA}]
    assert body["max_tokens"] == 2048
    if _sdk_takes_temperature():
        assert body["temperature"] == 0.2
    else:  # anthropic 2.x dropped sampling parameters from messages.create
        assert "temperature" not in body
    assert "stream" not in body or body["stream"] is False

    assert response.text == "A fused single-pass kernel; submitting it."
    assert [(c.name, c.input) for c in response.tool_calls] == [
        ("submit_candidate", {"source": "import triton\n", "approach": "fused-one-pass"})
    ]
    assert response.usage["input_tokens"] == 1523 and response.usage["output_tokens"] == 311
    assert response.stop_reason == "tool_use"
    assert response.model == "claude-sonnet-4-5-20250929"


def test_optional_fields_are_left_out():
    bodies = []

    def handler(request):
        bodies.append(json.loads(request.content))
        return sdk_http.Response(200, json={**MESSAGE, "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"})

    request = ModelRequest(system="", messages=[Message(role="user", content="hi")])
    response = _model(handler).complete(request)
    assert "tools" not in bodies[0] and "temperature" not in bodies[0] and "system" not in bodies[0]
    assert (response.text, response.tool_calls, response.stop_reason) == ("hi", [], "end_turn")


@pytest.mark.parametrize("status,kind", [(529, "overloaded_error"), (500, "api_error")])
def test_transient_errors_are_retried_by_the_sdk(status, kind):
    handler = Recorder(lambda: _error(status, kind, "try again"), lambda: _error(status, kind, "try again"), _ok)
    response = _model(handler, max_retries=2).complete(REQUEST)
    assert handler.calls == 3  # two failures retried by the SDK, then the answer
    assert response.tool_calls[0].name == "submit_candidate"
    retry_counts = [r.headers.get("x-stainless-retry-count") for r in handler.requests]
    assert retry_counts == ["0", "1", "2"]


def test_persistent_overload_is_unavailable_after_the_sdks_retries():
    handler = Recorder(lambda: _error(529, "overloaded_error", "Overloaded"))
    with pytest.raises(ModelUnavailable) as info:
        _model(handler, max_retries=2).complete(REQUEST)
    assert handler.calls == 3  # max_retries + 1
    assert "529" in str(info.value) and "overloaded" in str(info.value)
    assert isinstance(info.value.__cause__, anthropic.APIStatusError)


def test_rate_limit_is_unavailable_with_its_status():
    handler = Recorder(
        lambda: _error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")
    )
    with pytest.raises(ModelUnavailable, match="429"):
        _model(handler, max_retries=1).complete(REQUEST)
    assert handler.calls == 2


@pytest.mark.parametrize(
    "status,kind",
    [(401, "authentication_error"), (403, "permission_error"), (400, "invalid_request_error"), (404, "not_found_error")],
)
def test_request_and_credential_errors_fail_without_retries(status, kind):
    handler = Recorder(lambda: _error(status, kind, "no good"))
    with pytest.raises(ModelError) as info:
        _model(handler, max_retries=2).complete(REQUEST)
    assert handler.calls == 1
    assert not isinstance(info.value, ModelUnavailable)
    assert str(status) in str(info.value) and kind in str(info.value) and "no good" in str(info.value)


def test_connection_error_is_unavailable_after_retries():
    handler = Recorder(sdk_http.ConnectError("connection refused"))
    with pytest.raises(ModelUnavailable, match="could not reach"):
        _model(handler, max_retries=1).complete(REQUEST)  # one SDK backoff (~0.5 s) between the attempts
    assert handler.calls == 2


def test_timeout_is_unavailable():
    handler = Recorder(sdk_http.ReadTimeout("read timed out"))
    with pytest.raises(ModelUnavailable, match="timed out"):
        _model(handler, max_retries=0).complete(REQUEST)
    assert handler.calls == 1


def test_classify_is_the_single_mapping():
    request = sdk_http.Request("POST", "http://anthropic.test/v1/messages")

    def status_error(cls, status):
        response = sdk_http.Response(status, request=request, json={"type": "error", "error": {"type": "x", "message": "m"}})
        return cls("m", response=response, body={"type": "error", "error": {"type": "x", "message": "m"}})

    assert isinstance(_classify(anthropic.APIConnectionError(request=request), model=MODEL), ModelUnavailable)
    assert isinstance(_classify(anthropic.APITimeoutError(request=request), model=MODEL), ModelUnavailable)
    assert isinstance(_classify(status_error(anthropic.RateLimitError, 429), model=MODEL), ModelUnavailable)
    assert isinstance(_classify(status_error(anthropic.InternalServerError, 529), model=MODEL), ModelUnavailable)
    assert isinstance(_classify(status_error(anthropic.InternalServerError, 503), model=MODEL), ModelUnavailable)
    for cls, status in [
        (anthropic.AuthenticationError, 401),
        (anthropic.PermissionDeniedError, 403),
        (anthropic.BadRequestError, 400),
        (anthropic.NotFoundError, 404),
        (anthropic.UnprocessableEntityError, 422),
    ]:
        mapped = _classify(status_error(cls, status), model=MODEL)
        assert type(mapped) is ModelError, cls


def test_no_key_and_no_client_is_unavailable(monkeypatch):
    with pytest.raises(ModelUnavailable, match="ANTHROPIC_API_KEY"):
        AnthropicModel()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "   ")
    with pytest.raises(ModelUnavailable):
        AnthropicModel()


def test_a_client_is_built_from_the_environment(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    model = AnthropicModel(model="claude-opus-4-5", max_retries=3, timeout=120)
    assert model.name == "anthropic:claude-opus-4-5"
    assert model.max_retries == 3
    assert KEY not in repr(model) and KEY not in str(vars(model).keys())


def test_the_key_never_shows_in_repr_messages_or_logs(caplog):
    caplog.set_level(logging.DEBUG)
    for name in ("anthropic", "httpx", "httpx2", "httpcore"):
        caplog.set_level(logging.DEBUG, logger=name)
    model = _model(Recorder(_ok))
    model.complete(REQUEST)
    messages = [repr(model), str(model)]
    for handler, max_retries in [
        (Recorder(lambda: _error(401, "authentication_error", "invalid x-api-key")), 0),
        (Recorder(lambda: _error(529, "overloaded_error", "Overloaded")), 1),
        (Recorder(sdk_http.ConnectError("refused")), 0),
    ]:
        with pytest.raises((ModelError, ModelUnavailable)) as info:
            _model(handler, max_retries).complete(REQUEST)
        messages.append(str(info.value))
        messages.append(repr(info.value))
    assert caplog.records, "the SDK logged nothing at DEBUG: the log check would prove nothing"
    assert all(KEY not in m for m in messages)
    assert KEY not in caplog.text


def test_a_key_echoed_by_the_server_is_redacted():
    handler = Recorder(lambda: _error(400, "invalid_request_error", f"bad header value {KEY}"))
    with pytest.raises(ModelError) as info:
        _model(handler).complete(REQUEST)
    assert KEY not in str(info.value) and "[redacted]" in str(info.value)


def test_forbid_switch_blocks_before_the_transport():
    handler = Recorder(_ok)
    model = _model(handler)
    forbid_model_requests()
    try:
        with pytest.raises(ModelUnavailable, match="forbidden"):
            model.complete(REQUEST)
    finally:
        forbid_model_requests(False)
    assert handler.calls == 0


@pytest.mark.skipif(sdk_http is httpx, reason="this SDK is built on httpx")
def test_the_sdk_refuses_an_httpx_client():
    with pytest.raises(TypeError, match="httpx2"):
        wrong = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200)))
        anthropic.Anthropic(api_key=KEY, http_client=wrong)  # pyright: ignore[reportArgumentType]  (the wrong client, on purpose)
