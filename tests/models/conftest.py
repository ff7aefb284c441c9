"""Every test here starts with model requests allowed and no provider credentials in the environment;
each test that needs a key or the forbid switch sets it itself (monkeypatch restores both)."""

import pytest

from ferret.models import base

_PROVIDER_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CONFIG_DIR",
    "ANTHROPIC_LOG",
    "OPENAI_API_KEY",
    "CLAUDE_CONFIG_DIR",
)


@pytest.fixture(autouse=True)
def _clean_model_env(monkeypatch):
    monkeypatch.delenv(base._FORBID_ENV, raising=False)
    for name in _PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
