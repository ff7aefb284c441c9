"""The one way roles are made (ferret/roles/resolve.py): each spec to its class, None to an LLM when one is
reachable and to the role that needs no model otherwise (saying why), a bad spec to a UsageError naming it
and the choices; the Dispatcher's defaults and the command line both go through it."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
from ferret_testkit import write_contract
from typer.testing import CliRunner

from ferret.errors import UsageError
from ferret.models import base as models_base
from ferret.models.anthropic_model import AnthropicModel
from ferret.models.claude_cli import ClaudeCliModel
from ferret.models.openai_compat import OpenAICompatModel
from ferret.models.registry import SPEC_FORMS
from ferret.models.testing import ScriptedModel
from ferret.roles import base
from ferret.roles import resolve as resolve_module
from ferret.roles.llm_optimizer import LLMOptimizer
from ferret.roles.offline import TemplateSearchOptimizer
from ferret.roles.resolve import AGENTS_DIR, resolve_role
from ferret.roles.review import LLMReviewer, StaticReviewer
from ferret.roles.test_writer import LLMCaseAdviser, NoExtraCases

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "contracts" / "rmsnorm.yaml"
NO_LLM_REVIEWER = "no LLM reviewer was reachable (no ANTHROPIC_API_KEY, no `claude` on PATH): static scan only"

KINDS = ("optimizer", "reviewer", "test_writer")
OFFLINE = {
    "optimizer": ("template-search", TemplateSearchOptimizer, "template-search"),
    "reviewer": ("static", StaticReviewer, "static-scan"),
    "test_writer": ("contract-cases", NoExtraCases, "contract-cases"),
}
LLM_ROLE = {"optimizer": LLMOptimizer, "reviewer": LLMReviewer, "test_writer": LLMCaseAdviser}
PROTOCOL = {"optimizer": base.Optimizer, "reviewer": base.Reviewer, "test_writer": base.TestWriter}


@pytest.fixture
def no_llm(tmp_path, monkeypatch):
    """No key, no `claude` on PATH, and model requests allowed: only the environment decides."""
    monkeypatch.delenv(models_base._FORBID_ENV, raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.fixture
def no_requests(monkeypatch):
    """Any HTTP request fails the test: resolving a role must never talk to a provider."""

    def refuse(self, request, **kwargs):
        raise AssertionError(f"a request was sent: {request.method} {request.url}")

    monkeypatch.setattr(httpx.Client, "send", refuse)


@pytest.fixture
def claude_on_path(no_llm, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "claude"
    script.write_text(f"#!{sys.executable}\nprint('{{}}')\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the CLI model's private workspace goes here


@pytest.mark.parametrize("kind", KINDS)
def test_each_registered_name_resolves_to_its_class_with_no_note(kind, no_llm):
    spec, cls, name = OFFLINE[kind]
    role, note = resolve_role(kind, spec, contract_path=CONTRACT)
    assert type(role) is cls and role.name == name and note == ""
    assert isinstance(role, PROTOCOL[kind])


def test_the_offline_optimizer_searches_the_contract_s_own_templates(no_llm):
    role, _ = resolve_role("optimizer", "template-search", contract_path=CONTRACT)
    assert isinstance(role, TemplateSearchOptimizer)
    assert role.template_dir == REPO / "tasks" / "rmsnorm" / "templates" and role.space.op == "rmsnorm"


@pytest.mark.parametrize("kind", KINDS)
def test_each_model_spec_resolves_to_the_llm_role_of_its_kind(kind, claude_on_path, tmp_path, monkeypatch, no_requests):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-resolve")
    scripted = tmp_path / "answers.json"
    scripted.write_text('["hi"]')
    agents = tmp_path / "agents"
    expected = {
        f"scripted:{scripted}": (ScriptedModel, "scripted:answers.json"),
        "anthropic:claude-opus-4-5": (AnthropicModel, "anthropic:claude-opus-4-5"),
        "claude-cli": (ClaudeCliModel, None),
        "openai:http://localhost:8000/v1:qwen2.5-coder": (OpenAICompatModel, None),
    }
    for spec, (model_class, model_name) in expected.items():
        role, note = resolve_role(kind, spec, contract_path=CONTRACT, agents_dir=agents)
        assert type(role) is LLM_ROLE[kind] and isinstance(role, PROTOCOL[kind]), spec
        assert isinstance(role.model, model_class) and role.agents_dir == agents and note == "", spec
        assert role.name == f"llm:{role.model.name}"
        if model_name is not None:
            assert role.model.name == model_name


@pytest.mark.parametrize("kind", KINDS)
def test_no_spec_and_no_llm_is_the_offline_role_and_the_note_says_why(kind, no_llm):
    _, cls, name = OFFLINE[kind]
    role, note = resolve_role(kind, None, contract_path=CONTRACT)
    assert type(role) is cls and role.name == name
    label = "test-writer" if kind == "test_writer" else kind
    assert note.startswith(f"no LLM {label} was reachable (no ANTHROPIC_API_KEY, no `claude` on PATH): ")


def test_the_reviewer_s_fallback_note_is_word_for_word_what_users_read(no_llm):
    role, note = resolve_role("reviewer", None, contract_path=CONTRACT)
    assert isinstance(role, StaticReviewer) and note == NO_LLM_REVIEWER


@pytest.mark.parametrize("kind", KINDS)
def test_no_spec_with_an_api_key_is_the_llm_role_and_sends_nothing(kind, no_llm, monkeypatch, no_requests, tmp_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-resolve")
    role, note = resolve_role(kind, None, contract_path=CONTRACT, agents_dir=tmp_path)
    assert type(role) is LLM_ROLE[kind] and isinstance(role.model, AnthropicModel) and note == ""
    assert role.agents_dir == tmp_path


@pytest.mark.parametrize("kind", KINDS)
def test_no_spec_with_claude_on_path_is_the_llm_role(kind, claude_on_path):
    role, note = resolve_role(kind, None, contract_path=CONTRACT)
    assert type(role) is LLM_ROLE[kind] and isinstance(role.model, ClaudeCliModel) and note == ""
    assert role.agents_dir == AGENTS_DIR == REPO / "agents"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("spec", ["gemini:x", "static-ish", "", "template-search-2"])
def test_a_spec_that_names_nothing_is_a_usage_error_with_the_choices(kind, spec, no_llm):
    with pytest.raises(UsageError) as caught:
        resolve_role(kind, spec, contract_path=CONTRACT, option="--some-role")
    message = str(caught.value)
    assert message.startswith(f"--some-role {spec!r}")
    assert OFFLINE[kind][0] in message and SPEC_FORMS in message


def test_a_name_of_another_kind_is_refused():
    with pytest.raises(UsageError, match=r"^--optimizer 'static' is not an optimizer: the choices are template-search"):
        resolve_role("optimizer", "static", contract_path=CONTRACT, option="--optimizer")
    with pytest.raises(UsageError, match=r"^reviewer spec 'contract-cases' is not a reviewer: the choices are static"):
        resolve_role("reviewer", "contract-cases", contract_path=CONTRACT)


@pytest.mark.parametrize(
    "spec, says",
    [
        ("openai:qwen", "expected openai:BASE_URL:MODEL"),
        ("scripted:missing.json", "cannot read"),
        ("anthropic:claude-opus-4-5", "ANTHROPIC_API_KEY is not set"),
        ("claude-cli", "claude"),
    ],
)
def test_a_model_spec_that_cannot_be_used_is_a_usage_error_saying_why(spec, says, no_llm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as caught:
        resolve_role("test_writer", spec, contract_path=CONTRACT, option="--test-writer")
    assert str(caught.value).startswith(f"--test-writer {spec!r}: ") and says in str(caught.value)


def test_an_unknown_kind_is_a_programming_error_not_a_usage_error():
    with pytest.raises(ValueError, match="unknown role kind 'critic'") as caught:
        resolve_role("critic", None, contract_path=CONTRACT)
    assert not isinstance(caught.value, UsageError)


def _no_templates_contract(tmp_path: Path) -> Path:
    return write_contract(tmp_path, lambda d: d.update(op="no_templates_op"), link_tasks=True)


def test_no_llm_and_no_templates_is_today_s_usage_error(no_llm, tmp_path):
    contract = _no_templates_contract(tmp_path)
    templates = tmp_path / "tasks" / "no_templates_op" / "templates"
    with pytest.raises(UsageError) as caught:
        resolve_role("optimizer", None, contract_path=contract)
    assert str(caught.value) == (
        f"no LLM is reachable (no ANTHROPIC_API_KEY, no `claude` on PATH) and {templates} has no kernel templates for "
        "the offline optimizer: name a model (--optimizer anthropic:MODEL, claude-cli or openai:URL:MODEL), "
        "or write templates there"
    )


def test_template_search_named_without_templates_is_a_usage_error_naming_the_folder(tmp_path):
    contract = _no_templates_contract(tmp_path)
    with pytest.raises(UsageError) as caught:
        resolve_role("optimizer", "template-search", contract_path=contract, option="--optimizer")
    message = str(caught.value)
    assert message.startswith("--optimizer 'template-search': ")
    assert str(tmp_path / "tasks" / "no_templates_op" / "templates") in message and "no kernel templates" in message


def test_templates_that_cannot_be_used_are_a_usage_error_naming_the_folder(no_llm, tmp_path):
    contract = write_contract(tmp_path, lambda d: d.update(op="broken_op"))
    templates = tmp_path / "tasks" / "broken_op" / "templates"
    templates.mkdir(parents=True)
    (templates / "space.yaml").write_text("op: broken_op\ntemplate: kernel.py.j2\n")
    with pytest.raises(UsageError, match="^--optimizer 'template-search': the offline optimizer cannot use the templates in"):
        resolve_role("optimizer", "template-search", contract_path=contract, option="--optimizer")
    with pytest.raises(UsageError, match=r"^no LLM is reachable .* cannot use the templates in .*invariants"):
        resolve_role("optimizer", None, contract_path=contract)


# --- everything goes through the resolver ----------------------------------------------------------


class _Recorder:
    """Stands in for resolve_role: records each call, answers with the offline role and a marked note."""

    def __init__(self):
        self.calls: list[tuple[str, str | None, dict]] = []
        self.roles = {"optimizer": StaticReviewer(), "reviewer": StaticReviewer(), "test_writer": NoExtraCases()}

    def __call__(self, kind, spec, **options):
        self.calls.append((kind, spec, options))
        return self.roles[kind], f"note for {kind}"


def test_the_dispatcher_s_defaults_go_through_the_resolver(monkeypatch, tmp_path):
    from ferret.dispatch.dispatcher import Dispatcher

    recorder = _Recorder()
    monkeypatch.setattr(resolve_module, "resolve_role", recorder)
    agents = tmp_path / "agents"
    dispatcher = Dispatcher(CONTRACT, profile="cpu", gates_dir=tmp_path / "gates", runs_dir=tmp_path / "runs", agents_dir=agents)
    assert [(kind, spec) for kind, spec, _ in recorder.calls] == [("optimizer", None), ("reviewer", None), ("test_writer", None)]
    assert all(options == {"contract_path": CONTRACT, "agents_dir": agents} for _, _, options in recorder.calls)
    assert dispatcher.optimizer is recorder.roles["optimizer"] and dispatcher.reviewer is recorder.roles["reviewer"]
    assert dispatcher.test_writer is recorder.roles["test_writer"] and dispatcher.reviewer_note == "note for reviewer"


def test_roles_given_to_the_dispatcher_are_not_resolved(monkeypatch, tmp_path):
    from ferret.dispatch.dispatcher import Dispatcher

    recorder = _Recorder()
    monkeypatch.setattr(resolve_module, "resolve_role", recorder)
    reviewer = StaticReviewer()
    dispatcher = Dispatcher(CONTRACT, profile="cpu", reviewer=reviewer, gates_dir=tmp_path / "g", runs_dir=tmp_path / "r")
    assert [kind for kind, _, _ in recorder.calls] == ["optimizer", "test_writer"]
    assert dispatcher.reviewer is reviewer and dispatcher.reviewer_note == ""


def _dispatch(tmp_path, *options):
    from ferret.cli.main import app

    args = [
        "dispatch",
        str(CONTRACT),
        "--gates-dir",
        str(tmp_path / "gates"),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--profile",
        "cpu",
        *options,
    ]
    return CliRunner().invoke(app, args)


def test_the_command_line_s_roles_go_through_the_resolver(monkeypatch, tmp_path):
    import dataclasses

    import ferret.dispatch.dispatcher

    recorder = _Recorder()
    monkeypatch.setattr(resolve_module, "resolve_role", recorder)
    given = {}

    class StopDispatcher:
        def __init__(self, contract, options):  # the command line builds its DispatchOptions once
            given.update({field.name: getattr(options, field.name) for field in dataclasses.fields(options)})
            raise UsageError("stopped before the run")

    monkeypatch.setattr(ferret.dispatch.dispatcher, "Dispatcher", StopDispatcher)
    result = _dispatch(tmp_path, "--optimizer", "opt-spec", "--reviewer", "rev-spec", "--test-writer", "tw-spec")
    assert result.exit_code == 2 and "stopped before the run" in result.stderr
    assert [(kind, spec, options["option"]) for kind, spec, options in recorder.calls] == [
        ("optimizer", "opt-spec", "--optimizer"),
        ("reviewer", "rev-spec", "--reviewer"),
        ("test_writer", "tw-spec", "--test-writer"),
    ]
    assert all(options["contract_path"] == CONTRACT for _, _, options in recorder.calls)
    assert [given[k] for k in KINDS] == [recorder.roles[k] for k in KINDS]

    recorder.calls.clear()
    given.clear()
    _dispatch(tmp_path)  # no role named: the Dispatcher resolves them, the command line does not
    assert recorder.calls == [] and [given[k] for k in KINDS] == [None, None, None]


def test_a_bad_spec_on_the_command_line_is_one_usage_line_naming_the_option(no_llm, tmp_path):
    result = _dispatch(tmp_path, "--reviewer", "static-ish")
    assert result.exit_code == 2 and "Traceback" not in result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        f"ferret: --reviewer 'static-ish' is not a reviewer: the choices are static (no model) or a model spec: {SPEC_FORMS}"
    ]
    assert not (tmp_path / "runs").exists()
