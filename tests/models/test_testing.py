"""The test models shipped in ferret.models.testing."""

import pytest

from ferret.models import (
    FunctionModel,
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ScriptExhausted,
    ToolSpec,
    forbid_model_requests,
    tool_call_response,
)


def _request(text="hello", tools=()):
    return ModelRequest(system="be brief", messages=[Message(role="user", content=text)], tools=list(tools))


def test_scripted_returns_in_order_and_records_requests():
    given = ModelResponse(text="first", model="m", usage={"input_tokens": 3})
    model = ScriptedModel(
        [
            given,
            "second",
            lambda req: f"echo {req.messages[0].content}",
            lambda req: tool_call_response("submit", source="x = 1", approach="a"),
        ]
    )
    assert isinstance(model, Model)
    assert model.complete(_request("a")) == given
    second = model.complete(_request("b"))
    assert (second.text, second.model, second.tool_calls) == ("second", "scripted", [])
    assert model.complete(_request("c")).text == "echo c"
    fourth = model.complete(_request("d"))
    assert fourth.tool_calls[0].name == "submit" and fourth.tool_calls[0].input == {"source": "x = 1", "approach": "a"}
    assert [r.messages[0].content for r in model.requests] == ["a", "b", "c", "d"]
    assert model.remaining == 0


def test_scripted_returns_copies_and_snapshots_requests():
    given = ModelResponse(text="t", model="m")
    model = ScriptedModel([given, given])
    model.complete(_request()).tool_calls.append(tool_call_response("x").tool_calls[0])
    assert model.complete(_request()).tool_calls == []
    request = _request("original")
    ScriptedModel(["ok"]).complete(request)
    model = ScriptedModel(["ok"])
    model.complete(request)
    request.messages[0].content = "changed later"
    assert model.requests[0].messages[0].content == "original"


def test_scripted_exhausted_is_a_clear_assertion_error():
    model = ScriptedModel(["only one"], name="opt")
    model.complete(_request())
    with pytest.raises(ScriptExhausted) as info:
        model.complete(_request("the extra call", tools=[ToolSpec(name="submit", description="d", input_schema={})]))
    message = str(info.value)
    assert "'opt'" in message and "#2" in message and "holds only 1" in message
    assert "the extra call" in message and "submit" in message
    assert isinstance(info.value, AssertionError)
    assert len(model.requests) == 1


def test_scripted_rejects_a_bad_item_type():
    with pytest.raises(TypeError, match="item #1"):
        # items of the wrong type, on purpose
        ScriptedModel([42]).complete(_request())  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError, match="item #1"):
        ScriptedModel([lambda req: 42]).complete(_request())  # pyright: ignore[reportArgumentType]


@pytest.mark.quick
def test_function_model_is_the_llm_as_a_function():
    def llm(request):
        if request.tools:
            return tool_call_response(request.tools[0].name, source="y = 2")
        return request.messages[-1].content.upper()

    model = FunctionModel(llm, name="upper")
    assert isinstance(model, Model)
    assert model.complete(_request("hi")).text == "HI"
    answer = model.complete(_request(tools=[ToolSpec(name="submit_candidate", description="d", input_schema={})]))
    assert answer.tool_calls[0].name == "submit_candidate"
    assert len(model.requests) == 2 and model.name == "upper"
    with pytest.raises(TypeError):
        FunctionModel("not callable")  # pyright: ignore[reportArgumentType]


def test_test_models_ignore_the_forbid_switch(monkeypatch):
    forbid_model_requests()
    try:
        assert ScriptedModel(["fine"]).complete(_request()).text == "fine"
        assert FunctionModel(lambda r: "fine").complete(_request()).text == "fine"
    finally:
        forbid_model_requests(False)
