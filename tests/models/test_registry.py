"""model_from_spec and available_model."""

import json
import os
import stat
import sys
import tempfile

import pytest

from ferret.models import (
    Message,
    ModelRequest,
    ModelUnavailable,
    ScriptedModel,
    available_model,
    forbid_model_requests,
    model_from_spec,
)
from ferret.models.anthropic_model import DEFAULT_MODEL, AnthropicModel
from ferret.models.claude_cli import ClaudeCliModel
from ferret.models.openai_compat import OpenAICompatModel


@pytest.fixture
def claude_on_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "claude"
    script.write_text(f"#!{sys.executable}\nprint('{{}}')\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the CLI model's private workspace goes here


@pytest.fixture
def no_claude(tmp_path, monkeypatch):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_anthropic_specs(monkeypatch):
    with pytest.raises(ModelUnavailable):
        model_from_spec("anthropic:claude-sonnet-4-5")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-registry")
    model = model_from_spec("anthropic:claude-opus-4-5")
    assert isinstance(model, AnthropicModel) and model.model == "claude-opus-4-5"
    default = model_from_spec("anthropic")
    assert isinstance(default, AnthropicModel) and default.model == DEFAULT_MODEL


def test_claude_cli_specs(claude_on_path):
    model = model_from_spec("claude-cli")
    assert isinstance(model, ClaudeCliModel) and model.model is None and model.workspace.is_dir()
    opus = model_from_spec("claude-cli:opus")
    assert isinstance(opus, ClaudeCliModel) and opus.model == "opus"


def test_claude_cli_missing(no_claude):
    with pytest.raises(ModelUnavailable):
        model_from_spec("claude-cli")


@pytest.mark.parametrize(
    "spec,base_url,model",
    [
        ("openai:http://localhost:8000/v1:qwen2.5-coder", "http://localhost:8000/v1", "qwen2.5-coder"),
        ("openai:http://127.0.0.1:11434/v1:qwen2.5-coder:7b", "http://127.0.0.1:11434/v1", "qwen2.5-coder:7b"),
        ("openai:https://api.example.com/v1:gpt-4.1", "https://api.example.com/v1", "gpt-4.1"),
        ("openai:http://gpu-box:8000:deepseek-coder", "http://gpu-box:8000", "deepseek-coder"),
    ],
)
def test_openai_specs(spec, base_url, model):
    built = model_from_spec(spec)
    assert isinstance(built, OpenAICompatModel)
    assert (built.base_url, built.model) == (base_url, model)


@pytest.mark.parametrize("spec", ["openai:qwen", "openai:http://localhost:8000/v1", "openai:", "gemini:pro", "", "scripted:"])
def test_malformed_specs(spec):
    with pytest.raises(ValueError):
        model_from_spec(spec)


def test_scripted_spec(tmp_path):
    path = tmp_path / "responses.json"
    path.write_text(
        json.dumps(
            [
                "plain text",
                {
                    "text": "calling",
                    "tool_calls": [{"name": "submit_candidate", "input": {"source": "x = 1"}}],
                    "stop_reason": "tool_use",
                },
            ]
        )
    )
    model = model_from_spec(f"scripted:{path}")
    assert isinstance(model, ScriptedModel)
    request = ModelRequest(system="s", messages=[Message(role="user", content="u")])
    assert model.complete(request).text == "plain text"
    second = model.complete(request)
    assert second.tool_calls[0].input == {"source": "x = 1"} and second.model == "scripted:responses.json"
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="list"):
        model_from_spec(f"scripted:{tmp_path / 'bad.json'}")
    with pytest.raises(ValueError, match="cannot read"):
        model_from_spec(f"scripted:{tmp_path / 'missing.json'}")


def test_available_model_takes_the_first_usable(monkeypatch, no_claude, tmp_path):
    scripted = tmp_path / "r.json"
    scripted.write_text('["hi"]')
    assert available_model(["anthropic:claude-sonnet-4-5", "claude-cli"]) is None
    chosen = available_model(["anthropic", "claude-cli", f"scripted:{scripted}"])
    assert isinstance(chosen, ScriptedModel)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-registry")
    chosen = available_model(["claude-cli", "anthropic:claude-opus-4-5", f"scripted:{scripted}"])
    assert isinstance(chosen, AnthropicModel) and chosen.model == "claude-opus-4-5"
    assert isinstance(available_model(["openai:http://localhost:8000/v1:m"]), OpenAICompatModel)
    with pytest.raises(ValueError):
        available_model(["antrhopic"])


def test_available_model_finds_the_cli(claude_on_path):
    assert isinstance(available_model(["anthropic", "claude-cli"]), ClaudeCliModel)


def test_available_model_skips_real_providers_while_forbidden(monkeypatch, claude_on_path, tmp_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-registry")
    scripted = tmp_path / "r.json"
    scripted.write_text('["hi"]')
    forbid_model_requests()
    try:
        assert available_model(["anthropic", "claude-cli", "openai:http://localhost:8000/v1:m"]) is None
        assert isinstance(available_model(["anthropic", f"scripted:{scripted}"]), ScriptedModel)
    finally:
        forbid_model_requests(False)
