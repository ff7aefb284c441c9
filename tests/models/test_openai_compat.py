"""OpenAICompatModel over httpx.MockTransport (and one real local connection that is refused)."""

import json
import socket
import time

import httpx
import pytest

from ferret.models import Message, ModelError, ModelRequest, ModelUnavailable, ToolSpec, forbid_model_requests
from ferret.models.openai_compat import CONNECT_RETRIES, OpenAICompatModel

BASE = "http://localhost:8000/v1"
SCHEMA = {"type": "object", "properties": {"source": {"type": "string"}}, "required": ["source"]}
REQUEST = ModelRequest(
    system="You write Triton kernels.",
    messages=[Message(role="user", content="Make softmax fast.")],
    tools=[ToolSpec(name="submit_candidate", description="The optimizer's answer.", input_schema=SCHEMA)],
    max_tokens=1024,
    temperature=0.0,
)
COMPLETION = {
    "id": "chatcmpl-abc123",
    "object": "chat.completion",
    "created": 1764400000,
    "model": "qwen2.5-coder-32b-instruct",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Submitting an online-softmax kernel.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "submit_candidate", "arguments": '{"source": "import triton\\n"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 812, "completion_tokens": 96, "total_tokens": 908},
}


class Recorder:
    def __init__(self, *responses):
        self.responses = list(responses)
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        item = self.responses[min(len(self.requests), len(self.responses)) - 1]
        if isinstance(item, Exception):
            raise item
        return item


def _model(handler, **kwargs):
    return OpenAICompatModel(BASE, "qwen2.5-coder", client=httpx.Client(transport=httpx.MockTransport(handler)), **kwargs)


def test_request_and_response_mapping():
    handler = Recorder(httpx.Response(200, json=COMPLETION))
    response = _model(handler).complete(REQUEST)
    (request,) = handler.requests
    assert request.method == "POST" and str(request.url) == f"{BASE}/chat/completions"
    assert "authorization" not in request.headers  # a local server: no key in the environment, none sent
    body = json.loads(request.content)
    assert body["model"] == "qwen2.5-coder"
    assert body["messages"] == [
        {"role": "system", "content": "You write Triton kernels."},
        {"role": "user", "content": "Make softmax fast."},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "submit_candidate", "description": "The optimizer's answer.", "parameters": SCHEMA},
        }
    ]
    assert body["max_tokens"] == 1024 and body["temperature"] == 0.0

    assert response.text == "Submitting an online-softmax kernel."
    assert [(c.name, c.input) for c in response.tool_calls] == [("submit_candidate", {"source": "import triton\n"})]
    assert response.usage == {"input_tokens": 812, "output_tokens": 96}
    assert response.stop_reason == "tool_calls" and response.model == "qwen2.5-coder-32b-instruct"


def test_key_from_the_named_env_var_is_sent_but_never_shown(monkeypatch):
    monkeypatch.setenv("MY_LLM_KEY", "sk-local-SECRET-42")
    handler = Recorder(
        httpx.Response(200, json=COMPLETION), httpx.Response(401, json={"error": {"message": "bad key sk-local-SECRET-42"}})
    )
    model = _model(handler, api_key_env="MY_LLM_KEY")
    model.complete(REQUEST)
    assert handler.requests[0].headers["authorization"] == "Bearer sk-local-SECRET-42"
    with pytest.raises(ModelError) as info:
        model.complete(REQUEST)
    assert "SECRET" not in str(info.value) and "SECRET" not in repr(model)


def test_plain_text_answer_and_no_tools_in_the_body():
    answer = {"model": "m", "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    handler = Recorder(httpx.Response(200, json=answer))
    response = _model(handler).complete(ModelRequest(system="", messages=[Message(role="user", content="hi")]))
    body = json.loads(handler.requests[0].content)
    assert "tools" not in body and "temperature" not in body and body["messages"] == [{"role": "user", "content": "hi"}]
    assert (response.text, response.tool_calls, response.stop_reason, response.usage) == ("hi", [], "stop", {})


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_are_model_errors(status):
    handler = Recorder(
        httpx.Response(status, json={"error": {"message": "model 'x' not found", "type": "invalid_request_error"}})
    )
    with pytest.raises(ModelError) as info:
        _model(handler).complete(REQUEST)
    assert not isinstance(info.value, ModelUnavailable)
    assert f"HTTP {status}" in str(info.value) and "not found" in str(info.value)
    assert len(handler.requests) == 1


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_server_errors_and_rate_limits_are_unavailable(status):
    handler = Recorder(httpx.Response(status, text="upstream busy"))
    with pytest.raises(ModelUnavailable, match=f"HTTP {status}"):
        _model(handler).complete(REQUEST)


@pytest.mark.parametrize("error", [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("eof")])
def test_transport_errors_are_unavailable(error):
    with pytest.raises(ModelUnavailable):
        _model(Recorder(error)).complete(REQUEST)


def test_a_refused_local_connection_is_unavailable():
    """The model's own client, real transport (with connect retries), against a closed local port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    model = OpenAICompatModel(f"http://127.0.0.1:{port}/v1", "m", timeout=5)
    assert CONNECT_RETRIES >= 1
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="could not reach"):
        model.complete(REQUEST)
    # httpcore waits 0.5 s, 1 s, ... between connect retries: the wait shows the retries happened.
    assert time.monotonic() - started >= 0.4


def test_malformed_answers_are_model_errors():
    bad_args = json.loads(json.dumps(COMPLETION))
    bad_args["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "{not json"
    for response in [
        httpx.Response(200, text="<html>proxy</html>"),
        httpx.Response(200, json={"choices": []}),
        httpx.Response(200, json=bad_args),
    ]:
        with pytest.raises(ModelError):
            _model(Recorder(response)).complete(REQUEST)


def test_forbid_switch_blocks_before_the_transport():
    handler = Recorder(httpx.Response(200, json=COMPLETION))
    forbid_model_requests()
    try:
        with pytest.raises(ModelUnavailable, match="forbidden"):
            _model(handler).complete(REQUEST)
    finally:
        forbid_model_requests(False)
    assert handler.requests == []


def test_the_clients_timeouts_reach_the_request_unchanged():
    """The connect timeout stays short (a dead server is named quickly) while reading may take long: the
    request must not replace the client's timeouts with one number for all."""
    handler = Recorder(httpx.Response(200, json=COMPLETION))
    client = httpx.Client(transport=httpx.MockTransport(handler), timeout=httpx.Timeout(600, connect=30))
    OpenAICompatModel(BASE, "qwen2.5-coder", client=client).complete(REQUEST)
    (request,) = handler.requests
    assert request.extensions["timeout"] == {"connect": 30, "read": 600, "write": 600, "pool": 600}
    default = OpenAICompatModel(BASE, "qwen2.5-coder", timeout=120)
    assert (default._client.timeout.connect, default._client.timeout.read) == (30, 120)
