"""Test models shipped with Ferret, so you can test your own contracts and roles offline.

Neither model leaves the process, so both answer even while `forbid_model_requests()` is on.

    from ferret.models.testing import ScriptedModel, FunctionModel, tool_call_response

    model = ScriptedModel([
        tool_call_response("submit_candidate", source=open("baseline.py").read(), approach="baseline"),
        "plain text answer",
        lambda request: tool_call_response("submit_review", integrity="pass", plan="pass"),
    ])
    ...                           # run the role under test with `model`
    assert len(model.requests) == 3

    model = FunctionModel(lambda request: "ok" if request.tools == [] else tool_call_response(...))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ferret.models.base import ModelRequest, ModelResponse, ToolCall

ResponseLike = ModelResponse | str
ScriptItem = ModelResponse | str | Callable[[ModelRequest], ResponseLike]


class ScriptExhausted(AssertionError):
    """A ScriptedModel was asked for more responses than it was given: the code under test made an
    extra model call, or the script is short. An AssertionError so that no role mistakes it for a
    provider failure and quietly falls back."""


def tool_call_response(tool: str, text: str = "", model: str = "scripted", **tool_input: Any) -> ModelResponse:
    """A response holding one call of `tool` with `tool_input` as its arguments."""
    return ModelResponse(
        text=text,
        tool_calls=[ToolCall(name=tool, input=dict(tool_input))],
        model=model,
        stop_reason="tool_use",
    )


def _as_response(value: Any, model: str, origin: str) -> ModelResponse:
    if isinstance(value, ModelResponse):
        return value.model_copy(deep=True)
    if isinstance(value, str):
        return ModelResponse(text=value, model=model, stop_reason="end_turn")
    raise TypeError(f"{origin} gave a {type(value).__name__}; expected a ModelResponse or a str")


def _describe(request: ModelRequest) -> str:
    first = request.messages[0].content if request.messages else ""
    first = first if len(first) <= 120 else first[:117] + "..."
    tools = ", ".join(t.name for t in request.tools) or "none"
    return f"tools: {tools}; first message: {first!r}"


class ScriptedModel:
    """Returns the scripted responses in order, one per `complete` call, and records every request.

    Each script item is a `ModelResponse`, a `str` (a plain-text response), or a function of the
    request returning either. Asking for more responses than scripted raises `ScriptExhausted`.
    """

    def __init__(self, responses: list[ScriptItem], name: str = "scripted"):
        self.name = name
        self._script: list[ScriptItem] = list(responses)
        self.requests: list[ModelRequest] = []

    @property
    def remaining(self) -> int:
        """Scripted responses not used yet."""
        return len(self._script) - len(self.requests)

    def complete(self, request: ModelRequest) -> ModelResponse:
        index = len(self.requests)
        if index >= len(self._script):
            raise ScriptExhausted(
                f"ScriptedModel {self.name!r} was asked for response #{index + 1} but holds only "
                f"{len(self._script)}; the extra request had {_describe(request)}"
            )
        self.requests.append(request.model_copy(deep=True))
        item = self._script[index]
        origin = f"ScriptedModel {self.name!r} item #{index + 1}"
        if callable(item) and not isinstance(item, (ModelResponse, str)):
            item = item(request)
        return _as_response(item, self.name, origin)

    def __repr__(self) -> str:
        return f"ScriptedModel(name={self.name!r}, used={len(self.requests)}, scripted={len(self._script)})"


class FunctionModel:
    """The "LLM" is a Python function of the request, returning a `ModelResponse` or a `str`.
    Every request is recorded in `requests`."""

    def __init__(self, fn: Callable[[ModelRequest], ResponseLike], name: str = "function"):
        if not callable(fn):
            raise TypeError("FunctionModel needs a callable taking a ModelRequest")
        self.name = name
        self.fn = fn
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request.model_copy(deep=True))
        return _as_response(self.fn(request), self.name, f"FunctionModel {self.name!r}")

    def __repr__(self) -> str:
        return f"FunctionModel(name={self.name!r}, fn={getattr(self.fn, '__qualname__', self.fn)!r})"
