"""LLM backends behind one interface (`Model`): the Anthropic API, the Claude Code CLI, OpenAI-compatible
servers, and test models that never leave the process.

Provider modules are imported lazily: `from ferret.models import AnthropicModel` loads the SDK only then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferret.models.base import (
    Message,
    Model,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelUnavailable,
    ToolCall,
    ToolSpec,
    forbid_model_requests,
    model_requests_forbidden,
)
from ferret.models.registry import available_model, model_from_spec
from ferret.models.testing import FunctionModel, ScriptedModel, ScriptExhausted, tool_call_response

if TYPE_CHECKING:
    from ferret.models.anthropic_model import AnthropicModel
    from ferret.models.claude_cli import ClaudeCliModel
    from ferret.models.openai_compat import OpenAICompatModel

_LAZY = {
    "AnthropicModel": "ferret.models.anthropic_model",
    "ClaudeCliModel": "ferret.models.claude_cli",
    "OpenAICompatModel": "ferret.models.openai_compat",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ferret.models' has no attribute {name!r}")


__all__ = [
    "AnthropicModel",
    "ClaudeCliModel",
    "FunctionModel",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelUnavailable",
    "OpenAICompatModel",
    "ScriptExhausted",
    "ScriptedModel",
    "ToolCall",
    "ToolSpec",
    "available_model",
    "forbid_model_requests",
    "model_from_spec",
    "model_requests_forbidden",
    "tool_call_response",
]
