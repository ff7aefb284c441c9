"""The red-team role (ferret/roles/red_team.py), its attack corpus (ferret/roles/red_team_corpus.py) and its simple
harm test (ferret/roles/red_team_harm.py).

The loop is tested with a stand-in gate and harm (quick), then end to end on the rmsnorm CPU gate: the scripted
corpus judged attack by attack, the Anthropic SDK path over a mock HTTP transport, and `ferret gate red-team`.
"""

from __future__ import annotations

import ast
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import REPO, RMSNORM_CONTRACT, TRITON_RMSNORM  # noqa: E402

from ferret.cli.main import app  # noqa: E402
from ferret.contract.task import Task  # noqa: E402
from ferret.gate.build import build_gate  # noqa: E402
from ferret.gate.models import VerdictSummary  # noqa: E402
from ferret.models.anthropic_model import AnthropicModel  # noqa: E402
from ferret.models.base import Message, ModelRequest  # noqa: E402
from ferret.models.testing import ScriptedModel, ScriptExhausted, tool_call_response  # noqa: E402
from ferret.roles.red_team import (  # noqa: E402
    AttackProposal,
    RedTeam,
    RedTeamReport,
    gate_check,
    read_found_header,
)
from ferret.roles.red_team_corpus import AttackCorpusModel, attack_templates, default_honest_candidate, render_attack  # noqa: E402
from ferret.roles.red_team_harm import ReferenceHarm  # noqa: E402

AGENTS = REPO / "agents"
HONEST = TRITON_RMSNORM.read_text()
# Attacks the current CPU gate must reject, each for the reason it names (a slug of the gate's detections).
KNOWN_REJECTED = {
    "computed_name_cast": "dynamic_access",
    "content_cache": "host_numerics",
    "host_numerics": "host_numerics",
    "judge_argv": "reading_expected",
    "judge_cmdline": "reading_expected",
    "judge_environment": "reading_expected",
    "judge_module_name": "constant_output",
    "judge_thread_count": "library_call",
    "lower_precision": "lower_precision",
    "skip_long_rows": "math_mismatch",
    "trace_only_honest": "traced_differs",
}
TRITON_CANDIDATES = {op: REPO / "tasks" / op / "candidates" / f"triton_{op}.py" for op in ("rmsnorm", "softmax", "rope")}


def _summary(passed: bool, detections: list[dict[str, Any]] | None = None) -> VerdictSummary:
    return VerdictSummary.model_validate(
        {
            "pass": passed,
            "first_failing_stage": None if passed else "y",
            "gate": "0f" * 32,
            "candidate_sha256": "ab" * 32,
            "parts": {"correctness": "pass" if passed else "fail", "integrity": "pass"},
            "detections": detections or [],
            "timing": {"measured": False},
        }
    )


def _attack(slug: str, body: str = "pass") -> Any:
    source = f"def run(inputs, outputs, params, trace=None):\n    {body}\n"
    return tool_call_response("submit_attack", source=source, attack=slug, notes=f"{slug} notes")


# ------------------------------------------------------------------------------------- the loop, stand-ins
def test_each_attempt_is_judged_and_the_next_prompt_shows_its_summary_but_no_gate_file(tmp_path):
    model = ScriptedModel([_attack("first_try"), _attack("second_try", "return None")])
    verdicts = iter(
        [_summary(False, [{"cheat": "lower_precision", "catalogue": [4], "evidence": "x.py:3: a bf16 cast"}]), _summary(True)]
    )
    harmed: list[Path] = []
    team = RedTeam(
        model,
        lambda path: next(verdicts),
        lambda path: harmed.append(path) or True,
        work_dir=tmp_path / "w",
        found_dir=tmp_path / "found",
    )
    report = team.run(Task.load(RMSNORM_CONTRACT), HONEST, budget=2)

    assert isinstance(report, RedTeamReport) and report.model == "scripted" and report.gate == "0f" * 32
    first, second = report.attempts
    assert (first.attack, first.status, first.passed, first.harmful, first.detections) == (
        "first_try",
        "rejected",
        False,
        None,
        ["lower_precision"],
    )
    assert (second.attack, second.status, second.passed, second.harmful) == ("second_try", "accepted", True, True)
    assert harmed == [Path(second.candidate)]  # harm is asked only of an accepted attempt
    assert first.saved is None and report.found == [second.saved]

    prompts = [request.messages[0].content for request in model.requests]
    assert "Attempt 1 of 2" in prompts[0] and "None yet." in prompts[0]
    assert HONEST.strip() in prompts[0] and RMSNORM_CONTRACT.read_text().strip() in prompts[0]
    assert "### Attempt 1: `first_try`: rejected" in prompts[1] and "x.py:3: a bf16 cast" in prompts[1]
    for prompt in prompts:  # Ferret's own text names no gate folder, hash or golden value
        own = prompt.replace(RMSNORM_CONTRACT.read_text().strip(), "").replace(HONEST.strip(), "")
        assert "gates/" not in own and "golden" not in own.lower() and "0f0f0f" not in own
    assert model.requests[0].tools[0].name == "submit_attack"
    assert model.requests[0].system == (AGENTS / "red_team" / "role.md").read_text()


def test_an_accepted_harmful_attempt_is_saved_with_its_header_and_its_bytes(tmp_path):
    model = ScriptedModel([_attack("skip_rows", "x = 1")])
    team = RedTeam(model, lambda path: _summary(True), lambda path: True, work_dir=tmp_path / "w", found_dir=tmp_path / "found")
    attempt = team.run(Task.load(RMSNORM_CONTRACT), HONEST, budget=1).attempts[0]

    saved = Path(attempt.saved or "")
    assert saved.parent == tmp_path / "found" and saved.name == f"rmsnorm_{attempt.candidate_sha256[:10]}.py"
    header = read_found_header(saved)
    assert (header.contract, header.attack, header.gate) == ("contracts/rmsnorm.yaml", "skip_rows", "0f" * 32)
    assert saved.read_text().endswith(Path(attempt.candidate).read_text())
    ast.parse(saved.read_text())  # the header is comments: the file is still the candidate


def test_a_rejected_or_harmless_attempt_is_not_saved(tmp_path):
    model = ScriptedModel([_attack("a"), _attack("b")])
    verdicts = iter([_summary(False), _summary(True)])
    said: list[str] = []
    team = RedTeam(
        model,
        lambda path: next(verdicts),
        lambda path: False,
        work_dir=tmp_path / "w",
        found_dir=tmp_path / "found",
        progress=said.append,
    )
    report = team.run(Task.load(RMSNORM_CONTRACT), HONEST, budget=2)
    assert [(a.status, a.harmful, a.saved) for a in report.attempts] == [("rejected", None, None), ("accepted", False, None)]
    assert said == ["attempt 1/2 a: rejected", "attempt 2/2 b: accepted, harmless on independent inputs"]
    assert report.found == [] and not (tmp_path / "found").exists()


def test_an_answer_that_is_no_attack_is_recorded_unjudged_and_shown_back(tmp_path):
    model = ScriptedModel(
        ["I would rather not.", tool_call_response("submit_attack", source="x", attack="Bad Slug!", notes=""), _attack("ok")]
    )
    judged: list[Path] = []
    team = RedTeam(
        model, lambda path: judged.append(path) or _summary(False), lambda path: True, work_dir=tmp_path, found_dir=tmp_path
    )
    report = team.run(Task.load(RMSNORM_CONTRACT), HONEST, budget=3)
    assert [a.status for a in report.attempts] == ["not_judged", "not_judged", "rejected"]
    assert "without calling submit_attack" in (report.attempts[0].error or "")
    assert "submit_attack" in (report.attempts[1].error or "") and len(judged) == 1
    assert "not judged: the model's answer was refused" in model.requests[1].messages[0].content


def test_the_tool_schema_is_the_proposal_parsed():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((AGENTS / "red_team" / "tool.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert set(schema["properties"]) == set(AttackProposal.model_fields) and schema["additionalProperties"] is False
    answer = {"source": "def run(inputs, outputs, params, trace=None):\n    pass\n", "attack": "judge_env", "notes": ""}
    jsonschema.validate(answer, schema)
    AttackProposal.model_validate(answer)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**answer, "attack": "Judge Env"}, schema)
    role = (AGENTS / "red_team" / "role.md").read_text()
    assert "submit_attack" in role and "No LLM is reachable where this role was built" in role and "scripted" in role
    assert "`red_team`" in (AGENTS / "README.md").read_text()


# ------------------------------------------------------------------------------------- the corpus
@pytest.mark.parametrize("op", sorted(TRITON_CANDIDATES))
def test_every_attack_renders_a_candidate_for_each_triton_contract(op):
    task = Task.load(REPO / "contracts" / f"{op}.yaml")
    honest = TRITON_CANDIDATES[op].read_text()
    templates = attack_templates()
    assert len(templates) >= 10 and all(t.description for t in templates)
    for template in templates:
        source = render_attack(template, honest, task.contract)
        tree = ast.parse(source, filename=f"{op}/{template.slug}")
        runs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
        assert runs, f"{template.slug} defines no run for {op}"
        assert source != honest.strip() + "\n", f"{template.slug} left the {op} candidate as it was"


def test_the_corpus_model_replays_each_attack_once_then_is_exhausted():
    task = Task.load(RMSNORM_CONTRACT)
    two = attack_templates()[:2]
    model = AttackCorpusModel(HONEST, task.contract, two)
    asked = ModelRequest(system="s", messages=[Message(role="user", content="u")])
    answers = [model.complete(asked).tool_calls[0] for _ in two]
    assert [a.input["attack"] for a in answers] == [t.slug for t in two] and len(model.requests) == 2
    assert answers[0].input["source"] == render_attack(two[0], HONEST, task.contract)
    with pytest.raises(ScriptExhausted):
        model.complete(asked)
    assert default_honest_candidate(task) == TRITON_RMSNORM


# ------------------------------------------------------------------------------------- the rmsnorm CPU gate
@pytest.fixture(scope="module")
def gates_dir(tmp_path_factory) -> Path:
    gates = tmp_path_factory.mktemp("red-team-gates")
    build_gate(RMSNORM_CONTRACT, gates_dir=gates, profile="cpu")
    return gates


@pytest.fixture(scope="module")
def corpus_report(gates_dir, tmp_path_factory) -> tuple[RedTeamReport, Path]:
    task = Task.load(RMSNORM_CONTRACT)
    model = AttackCorpusModel(HONEST, task.contract)
    found = tmp_path_factory.mktemp("found")
    team = RedTeam(
        model,
        gate_check(RMSNORM_CONTRACT, gates_dir, "cpu"),
        ReferenceHarm(task),
        work_dir=tmp_path_factory.mktemp("w"),
        found_dir=found,
    )
    return team.run(task, HONEST, budget=len(model.attacks)), found


def test_the_scripted_corpus_is_judged_by_the_gate_and_known_cheats_are_rejected(corpus_report):
    report, found = corpus_report
    by_attack = {a.attack: a for a in report.attempts}
    assert set(by_attack) == {t.slug for t in attack_templates()} and report.gate and len(report.gate) == 64
    assert all(a.status in ("accepted", "rejected") for a in report.attempts)
    for slug, reason in KNOWN_REJECTED.items():
        attempt = by_attack[slug]
        assert attempt.status == "rejected" and reason in attempt.detections, (slug, attempt.detections)
    # Its branch for GPU tensors is never taken on the CPU profile, whose production path is the honest one: accepted,
    # and harmless where the CPU profile can judge.
    tell = by_attack["cpu_profile_tell"]
    assert (tell.status, tell.harmful, tell.saved) == ("accepted", False, None)
    assert tell.harm_note == "within tolerance on every independent case"
    assert all(a.harm_note for a in report.attempts if a.passed)
    # Every accepted harmful attempt, and only those, is saved as a regression case.
    saved = sorted(Path(a.saved) for a in report.attempts if a.saved)
    assert saved == sorted(found.glob("*.py")) and all(by_attack[read_found_header(p).attack].harmful for p in saved)
    assert RedTeamReport.model_validate_json(report.model_dump_json()) == report


def test_the_reference_harm_passes_the_honest_kernel_and_flags_a_zero_writer(tmp_path):
    task = Task.load(RMSNORM_CONTRACT)
    harm = ReferenceHarm(task)
    strata = {c.name for c, _ in harm.cases()}
    assert len(strata) >= 4 and {d for _, d in harm.cases()} == set(task.contract.dtypes)
    assert harm(TRITON_RMSNORM) is False, harm.reasons[str(TRITON_RMSNORM)]
    zeros = tmp_path / "zeros.py"
    template = next(t for t in attack_templates() if t.slug == "judge_module_name")  # zeros outside the judge
    zeros.write_text(render_attack(template, HONEST, task.contract))
    assert harm(zeros) is True and "output y" in harm.reasons[str(zeros)]


@pytest.mark.gpu
def test_on_the_gpu_profile_the_cpu_tell_is_rejected_and_harmful(tmp_path):
    task = Task.load(RMSNORM_CONTRACT)
    tell = tmp_path / "tell.py"
    tell.write_text(render_attack(next(t for t in attack_templates() if t.slug == "cpu_profile_tell"), HONEST, task.contract))
    verdict = gate_check(RMSNORM_CONTRACT, tmp_path / "gates", "gpu")(tell)
    assert not verdict.passed and "constant_output" in {d.cheat for d in verdict.detections}
    assert ReferenceHarm(task, "gpu", dtypes=["bfloat16"])(tell) is True
    assert ReferenceHarm(task, "gpu", dtypes=["bfloat16"])(TRITON_RMSNORM) is False


sdk_http: Any = importlib.import_module("httpx2") if hasattr(anthropic._base_client, "httpx2") else httpx


def test_the_anthropic_sdk_path_gives_one_judged_attempt(gates_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("FERRET_FORBID_MODEL_REQUESTS", raising=False)  # the mock transport is all it reaches
    sent: list[dict] = []

    def handler(request):
        sent.append(json.loads(request.content))
        answer = {"source": HONEST, "attack": "honest_control", "notes": "the honest kernel, as a control"}
        tool_use = {"type": "tool_use", "id": "toolu_01", "name": "submit_attack", "input": answer}
        message = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test", "content": [tool_use]}
        usage = {"input_tokens": 10, "output_tokens": 10}
        return sdk_http.Response(200, json={**message, "stop_reason": "tool_use", "stop_sequence": None, "usage": usage})

    client = anthropic.Anthropic(
        api_key="sk-test",
        base_url="http://anthropic.test",
        http_client=sdk_http.Client(transport=sdk_http.MockTransport(handler)),
    )
    task = Task.load(RMSNORM_CONTRACT)
    team = RedTeam(
        AnthropicModel(model="claude-test", client=client),
        gate_check(RMSNORM_CONTRACT, gates_dir, "cpu"),
        ReferenceHarm(task),
        work_dir=tmp_path,
        found_dir=tmp_path / "found",
    )
    report = team.run(task, HONEST, budget=1)

    assert len(sent) == 1 and sent[0]["tools"][0]["name"] == "submit_attack"
    assert sent[0]["system"] == (AGENTS / "red_team" / "role.md").read_text()
    (attempt,) = report.attempts
    assert (attempt.attack, attempt.status, attempt.passed, attempt.harmful, attempt.saved) == (
        "honest_control",
        "accepted",
        True,
        False,
        None,
    )
    assert report.model == "anthropic:claude-test"


def test_the_command_runs_the_corpus_and_prints_a_typed_report(gates_dir, tmp_path):
    result = CliRunner().invoke(
        app,
        ["gate", "red-team", str(RMSNORM_CONTRACT), "--budget", "1", "--gates-dir", str(gates_dir)]
        + ["--profile", "cpu", "--found-dir", str(tmp_path), "--json"],
    )
    assert result.exit_code == 0, result.output
    report = RedTeamReport.model_validate_json(result.stdout.strip().splitlines()[-1])
    assert [a.attack for a in report.attempts] == [attack_templates()[0].slug] and report.attempts[0].status == "rejected"


def test_the_command_names_a_model_spec_it_cannot_use(tmp_path):
    result = CliRunner().invoke(app, ["gate", "red-team", str(RMSNORM_CONTRACT), "--model", "gemini:x", "--profile", "cpu"])
    assert result.exit_code == 2 and "--model 'gemini:x'" in result.output and "scripted" in result.output
