"""The model interface every LLM role talks to, apart from any provider.

A role builds a `ModelRequest` (system prompt, messages, tools) and gets a `ModelResponse` (text and
tool calls). Providers (Anthropic, the Claude Code CLI, OpenAI-compatible servers) and the test models
shipped here implement `Model`. Real requests can be forbidden process-wide (`forbid_model_requests`),
which the test suite does.
"""

from __future__ import annotations

import os
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field


class ToolSpec(BaseModel):
    name: str
    description: str
    input_schema: dict[str, Any]


class Message(BaseModel):
    role: Literal["user", "assistant"]
    content: str


class ModelRequest(BaseModel):
    system: str
    messages: list[Message]
    tools: list[ToolSpec] = []
    max_tokens: int = 8192
    temperature: float | None = None


class ToolCall(BaseModel):
    name: str
    input: dict[str, Any]


class ModelResponse(BaseModel):
    text: str = ""
    tool_calls: list[ToolCall] = []
    model: str
    usage: dict[str, int] = Field(default_factory=dict)
    stop_reason: str | None = None


class ModelUnavailable(RuntimeError):
    """No way to reach this model here (no key, no CLI, server down): the caller falls back and says so."""


class ModelError(RuntimeError):
    """The provider answered with an error that retrying will not fix."""


@runtime_checkable
class Model(Protocol):
    name: str

    def complete(self, request: ModelRequest) -> ModelResponse: ...


_FORBID_ENV = "FERRET_FORBID_MODEL_REQUESTS"


def forbid_model_requests(forbid: bool = True) -> None:
    """Make every provider refuse to send a request (tests set this; test models are unaffected)."""
    if forbid:
        os.environ[_FORBID_ENV] = "1"
    else:
        os.environ.pop(_FORBID_ENV, None)


def model_requests_forbidden() -> bool:
    return os.environ.get(_FORBID_ENV) == "1"
