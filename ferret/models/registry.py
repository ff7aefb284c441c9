"""Models named by a spec string (`--optimizer anthropic:claude-sonnet-4-5`, `--reviewer claude-cli`).

anthropic[:<model>]                      the Anthropic API (needs ANTHROPIC_API_KEY)
claude-cli[:<model>]                     the Claude Code CLI on PATH, in a private temporary workspace
openai:<base_url>:<model>                an OpenAI-compatible server, e.g.
                                         openai:http://localhost:8000/v1:qwen2.5-coder
                                         (the model name may itself hold colons: ...:qwen2.5-coder:7b)
scripted:<path to a JSON file>           a ScriptedModel; the file is a list whose items are strings
                                         (text answers) or ModelResponse objects ("model" optional)
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from ferret.models.base import (
    Model,
    ModelResponse,
    ModelUnavailable,
    model_requests_forbidden,
)

KINDS = ("anthropic", "claude-cli", "openai", "scripted")
SPEC_FORMS = "anthropic[:MODEL], claude-cli[:MODEL], openai:BASE_URL:MODEL, scripted:PATH.json"


class UnknownModelSpec(ValueError):
    """A spec of none of the forms (KINDS): a typo, or a name that was meant for something else."""


_HOST = re.compile(r"https?://[^/:\s]+")
_PORT = re.compile(r":\d+(?=[/:]|$)")
_PATH = re.compile(r"/[^:\s]*")


def _split_openai(rest: str) -> tuple[str, str] | None:
    """BASE_URL:MODEL -> (base_url, model). A ':digits' right after the host is its port; the base URL's
    path holds no colon; the model name is all the rest, colons included."""
    host = _HOST.match(rest)
    if not host:
        return None
    end = host.end()
    for part in (_PORT, _PATH):
        found = part.match(rest, end)
        if found:
            end = found.end()
    model = rest[end + 1 :].strip()
    if rest[end : end + 1] != ":" or not model:
        return None
    return rest[:end], model


def _split(spec: str) -> tuple[str, str]:
    kind, _, rest = spec.strip().partition(":")
    return kind.strip().lower(), rest.strip()


def _scripted(path_text: str, spec: str) -> Model:
    from ferret.models.testing import ScriptedModel

    if not path_text:
        raise ValueError(f"model spec {spec!r}: scripted needs a path, as in scripted:responses.json")
    path = Path(path_text).expanduser()
    try:
        items = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"model spec {spec!r}: cannot read {path}: {err.strerror}") from err
    except ValueError as err:
        raise ValueError(f"model spec {spec!r}: {path} is not JSON: {err}") from err
    if not isinstance(items, list):
        raise ValueError(f"model spec {spec!r}: {path} must hold a JSON list of responses")  # noqa: TRY004 - the file's content, not an argument
    name = f"scripted:{path.name}"
    responses = []
    for index, item in enumerate(items, 1):
        if isinstance(item, str):
            responses.append(item)
        elif isinstance(item, dict):
            responses.append(ModelResponse.model_validate({"model": name, **item}))
        else:
            raise ValueError(f"model spec {spec!r}: item {index} of {path} is neither a string nor an object")  # noqa: TRY004
    return ScriptedModel(responses, name=name)


def model_from_spec(spec: str) -> Model:
    """The model a spec names. Raises ValueError for a malformed spec, ModelUnavailable when the
    provider cannot be used here (no API key, no CLI); a spec of none of the forms is an UnknownModelSpec,
    a ValueError."""
    kind, rest = _split(spec)
    if kind == "anthropic":
        from ferret.models.anthropic_model import DEFAULT_MODEL, AnthropicModel

        return AnthropicModel(model=rest or DEFAULT_MODEL)
    if kind == "claude-cli":
        from ferret.models.claude_cli import ClaudeCliModel

        return ClaudeCliModel(model=rest or None)
    if kind == "openai":
        parsed = _split_openai(rest)
        if parsed is None:
            raise ValueError(
                f"model spec {spec!r}: expected openai:BASE_URL:MODEL, as in openai:http://localhost:8000/v1:qwen2.5-coder"
            )
        from ferret.models.openai_compat import OpenAICompatModel

        return OpenAICompatModel(base_url=parsed[0], model=parsed[1])
    if kind == "scripted":
        return _scripted(rest, spec)
    raise UnknownModelSpec(f"unknown model spec {spec!r}; the forms are {SPEC_FORMS}")


def _usable(spec: str) -> bool:
    """Whether `spec` can answer now, without sending anything. Real providers are unusable while model
    requests are forbidden; an OpenAI-compatible server counts as usable when its spec is well formed
    (it is not probed)."""
    kind, _ = _split(spec)
    if kind == "scripted":
        return True
    if model_requests_forbidden():
        return False
    if kind == "anthropic":
        return bool(os.environ.get("ANTHROPIC_API_KEY", "").strip())
    if kind == "claude-cli":
        return shutil.which("claude") is not None
    return kind == "openai"


def available_model(preferred: list[str]) -> Model | None:
    """The first model in `preferred` that is usable now, or None. A provider that turns out unavailable
    is skipped; a malformed or unknown spec raises ValueError (a typo should not pass for "no model")."""
    for spec in preferred:
        kind, _ = _split(spec)
        if kind not in KINDS:
            raise UnknownModelSpec(f"unknown model spec {spec!r}; the forms are {SPEC_FORMS}")
        if not _usable(spec):
            continue
        try:
            return model_from_spec(spec)
        except ModelUnavailable:
            continue
    return None
