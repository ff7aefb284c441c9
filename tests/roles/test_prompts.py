"""The role prompts in agents/: each renders with StrictUndefined from its context, shows what the role
may see and nothing it may not (the optimizer never gets golden values, gate files or gate paths), and
each tool schema matches the model its answer is parsed into."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pytest
from safetensors.torch import load_file

from ferret.contract.model import Case
from ferret.gate.models import Detection, VerdictSummary
from ferret.integrity.scan import _WORDS
from ferret.roles import prompts
from ferret.roles.base import (
    OptimizerContext,
    Proposal,
    ReviewContext,
    ReviewFinding,
    ReviewVerdict,
    RoundFeedback,
)
from ferret.roles.offline import TemplateSearchOptimizer

REPO = Path(__file__).resolve().parents[2]
AGENTS = REPO / "agents"
CONTRACT = REPO / "contracts" / "rmsnorm.yaml"
BASELINE = REPO / "tasks" / "rmsnorm" / "baseline.py"
TEMPLATES = REPO / "tasks" / "rmsnorm" / "templates"
ROLES = ("optimizer", "reviewer", "test_writer")
TOOLS = {"optimizer": "submit_candidate", "reviewer": "submit_review", "test_writer": "submit_cases"}
ABI = "run(inputs: dict[str, Tensor], outputs: dict[str, Tensor], params: dict, trace: dict | None = None) -> None"


def render(role: str, context: dict) -> tuple[str, str]:
    """(system, user) exactly as the roles render them."""
    return prompts.render(AGENTS, role, context)


def optimizer_context(history: list[RoundFeedback], **extra) -> OptimizerContext:
    return OptimizerContext(
        op="rmsnorm",
        contract_yaml=CONTRACT.read_text(),
        baseline_source=BASELINE.read_text(),
        abi=ABI,
        history=history,
        tried_approaches=sorted({h.approach for h in history}),
        round=len(history) + 1,
        **extra,
    )


def review_context() -> ReviewContext:
    source = TemplateSearchOptimizer(TEMPLATES).render(
        {"rows_per_program": 4, "num_warps": 8, "block_policy": "looped", "block_n": 2048, "eviction": True}
    )
    return ReviewContext(
        op="rmsnorm",
        candidate_path="runs/r1/round-02/candidate-1.py",
        candidate_source=source,
        gate_summary=VerdictSummary.model_validate(
            {
                "pass": False,
                "first_failing_stage": "y",
                "gate": "0f" * 32,
                "candidate_sha256": "ab" * 32,
                "parts": {"correctness": "fail", "integrity": "pass", "stress": "skipped"},
                "detections": [{"cheat": "lower_precision", "catalogue": [4], "evidence": "candidate-1.py:70: downcast"}],
                "cases": {
                    "typical@float32": {
                        "pass": False,
                        "stages": {
                            "inv_rms": "not exposed",
                            "y": {
                                "pass": False,
                                "rel_l2": 0.25,
                                "max_abs_rel_peak": 0.5,
                                "cosine": 0.97,
                                "worst": {"row": 3, "col": 9},
                            },
                        },
                    },
                    "odd_width@bfloat16": {"pass": False, "failure": "exception", "message": "ValueError: boom", "stages": {}},
                },
                "timing": {"measured": False, "reason": "no GPU: speed is not measured"},
            }
        ),
        static_findings=[
            Detection(
                cheat="lower_precision",
                catalogue=[4],
                source="static",
                file="candidate-1.py",
                line=70,
                evidence="candidate-1.py:70: lower precision (docs/cheats.md 4): downcast .to(torch.float16)",
            )
        ],
        next_plan="Next: 16 warps for the 7168-wide rows to hide the second pass's latency.",
    )


def writer_context() -> dict:
    from tasks.rmsnorm import reference

    return {"op": "rmsnorm", "contract_yaml": CONTRACT.read_text(), "reference_doc": reference.reference.__doc__}


# ---------------------------------------------------------------------------------------------- files
@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_a_description_a_template_and_a_tool(role):
    description = (AGENTS / role / "role.md").read_text()
    assert 200 < len(description) < 3000 and TOOLS[role] in description
    schema = json.loads((AGENTS / role / "tool.json").read_text())
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert set(schema["required"]) <= set(schema["properties"])
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(schema)
    assert (AGENTS / "README.md").read_text().count(f"`{role}`") >= 1


def test_tool_schemas_match_the_models_they_are_parsed_into():
    optimizer = json.loads((AGENTS / "optimizer" / "tool.json").read_text())
    assert set(optimizer["properties"]) == set(Proposal.model_fields)
    reviewer = json.loads((AGENTS / "reviewer" / "tool.json").read_text())
    assert set(reviewer["properties"]) == set(ReviewVerdict.model_fields) - {"reviewer"}
    assert set(reviewer["properties"]["findings"]["items"]["properties"]) == set(ReviewFinding.model_fields)
    assert reviewer["properties"]["integrity"]["enum"] == ["pass", "fail"] == reviewer["properties"]["plan"]["enum"]

    jsonschema = pytest.importorskip("jsonschema")
    answer = {
        "integrity": "fail",
        "plan": "pass",
        "recommendation": "drop the downcast",
        "findings": [{"file": "candidate-1.py", "line": 70, "message": "downcast"}],
    }
    jsonschema.validate(answer, reviewer)
    ReviewVerdict.model_validate({**answer, "reviewer": "llm:test"})
    proposal = {"source": "def run(inputs, outputs, params, trace=None):\n    pass\n", "approach": "x", "notes": ""}
    jsonschema.validate(proposal, optimizer)
    Proposal.model_validate(proposal)

    cases = json.loads((AGENTS / "test_writer" / "tool.json").read_text())
    entry = {
        "profile": "cpu",
        "name": "pow2_plus_one",
        "kind": "edge",
        "dims": {"M": 3, "N": 1025},
        "seed": 21,
        "description": "one column past a block",
        "edits": [{"input": "x", "set": "rows_of_inf", "rows": [1]}],
    }
    jsonschema.validate({"cases": [entry], "stage_checks": [], "notes": ""}, cases)
    Case.model_validate({k: v for k, v in entry.items() if k != "profile"})  # the contract's own case format
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"cases": [{**entry, "expected": [1.0]}], "stage_checks": [], "notes": ""}, cases)


# ---------------------------------------------------------------------------------------------- render
@pytest.mark.parametrize("role", ROLES)
def test_each_prompt_renders_from_a_sample_context(role):
    context = {
        "optimizer": lambda: optimizer_context([]).model_dump(),
        "reviewer": lambda: review_context().model_dump(),
        "test_writer": writer_context,
    }[role]()
    system, user = render(role, context)
    assert system.strip() and TOOLS[role] in user
    assert "Undefined" not in user and "{{" not in user and "{%" not in user
    # Ferret's own text is tidy: no runs of blank lines outside the embedded files.
    text = user
    for key in ("contract_yaml", "baseline_source", "candidate_source", "reference_doc"):
        if key in context:
            text = text.replace(context[key].strip(), "<embedded>")
    assert "\n\n\n" not in text


def test_a_missing_variable_is_an_error():
    context = optimizer_context([]).model_dump()
    del context["history"]
    with pytest.raises(jinja2.UndefinedError):
        render("optimizer", context)


def test_first_round_optimizer_prompt():
    _, user = render("optimizer", optimizer_context([]).model_dump())
    assert CONTRACT.read_text().strip() in user and BASELINE.read_text().strip() in user and ABI in user
    assert "first round" in user and "None yet." in user and "Pivot required" not in user
    # The whole cheat catalogue is named, in the scan's own words.
    for slug, words in _WORDS.items():
        if slug != "syntax_error":
            assert words in user, words
    assert "You can write only this one file" in user and "expected values and its files are not available" in user
    assert "submit_candidate" in user


def test_pivot_and_tried_approaches_are_shown():
    history = [
        RoundFeedback(round=1, approach="rows=1,warps=4,single-pass", passed=True, timing={"speedup": 1.1}),
        RoundFeedback(round=2, approach="rows=2,warps=4,single-pass", passed=True, timing={"speedup": 1.05}),
    ]
    _, user = render("optimizer", optimizer_context(history, must_pivot=True).model_dump())
    assert "## Pivot required" in user
    assert "- `rows=1,warps=4,single-pass`" in user and "- `rows=2,warps=4,single-pass`" in user
    assert "speedup = 1.1" in user and "speedup = 1.05" in user


# ------------------------------------------------------------------- the optimizer sees no gate data
@pytest.fixture(scope="module")
def failed_round(tmp_path_factory):
    """A wrong candidate (the mean divides by N + 1) judged by a real CPU gate: (verdict, gate folder)."""
    from ferret.gate.build import build_gate
    from ferret.gate.judge import check

    gates = tmp_path_factory.mktemp("prompt-gates")
    build_gate(CONTRACT, gates_dir=gates, profile="cpu")
    source = TemplateSearchOptimizer(TEMPLATES).render(
        {"rows_per_program": 8, "num_warps": 4, "block_policy": "next_pow2", "block_n": None, "eviction": False}
    )
    assert source.count(") / N") == 1 and source.count("sum_sq / N") == 1
    wrong = source.replace(") / N", ") / (N + 1)").replace("sum_sq / N", "sum_sq / (N + 1)")
    path = tmp_path_factory.mktemp("prompt-candidate") / "candidate-1.py"
    path.write_text(wrong)
    verdict, gate = check(CONTRACT, path, gates_dir=gates, profile="cpu")
    assert not verdict.passed and verdict.first_failing_stage == "inv_rms"
    return verdict, gate


def feedback_from(verdict, round: int, approach: str) -> RoundFeedback:
    """What the dispatcher tells the optimizer of a verdict: its own `_feedback` over the gate's summary."""
    from ferret.dispatch.dispatcher import _feedback
    from ferret.dispatch.runlog import CandidateRecord
    from ferret.gate.judge import summary

    review = ReviewVerdict(
        integrity="pass",
        plan="fail",
        recommendation="the mean must divide by N",
        reviewer="llm:test",
        findings=[ReviewFinding(file="candidate-1.py", line=58, message="divides by N + 1")],
    )
    return _feedback(
        CandidateRecord(
            round=round,
            index=1,
            approach=approach,
            file="candidate-1.py",
            sha256="0" * 64,
            gate=summary(verdict),
            gate_passed=verdict.passed,
            review=review,
        )
    )


def test_optimizer_prompt_has_the_feedback_but_no_gate_data(failed_round):
    verdict, gate = failed_round
    history = [
        feedback_from(verdict, 1, "rows=8,warps=4,single-pass"),
        RoundFeedback(round=2, approach="rows=4,warps=4,single-pass", passed=True, timing={"speedup": 1.62, "target_met": True}),
    ]
    context = optimizer_context(history)
    _, user = render("optimizer", context.model_dump())

    assert context.contract_yaml.strip() in user
    stage_lines = [f for f in history[0].failures if "stage inv_rms: rel_l2" in f]
    assert stage_lines, history[0].failures  # stage, metric, value and tolerance reached the feedback
    for line in history[0].failures:
        assert line in user
    assert "first failing stage: inv_rms" in user and "speedup = 1.62" in user and "divides by N + 1" in user

    # No gate path, file or identity.
    for needle in ("gates/", str(gate), gate.name, ".safetensors", "manifest.json", "report.json"):
        assert needle not in user, needle
    # The word 'golden' appears only where the user's contract has it (golden_dtype), never in Ferret's text.
    assert "golden" not in user.replace(context.contract_yaml.strip(), "")
    # No golden value: none of the gate's stored stage values appears.
    manifest = json.loads((gate / "manifest.json").read_text())
    record = next(v for v in manifest["variants"] if v["id"] == "typical@float32")
    values = [float(v) for v in load_file(str(gate / record["golden_file"]))["inv_rms"].flatten()]
    assert values
    for value in values:
        assert repr(value) not in user and f"{value:.6g}" not in user, value


def test_reviewer_prompt_numbers_lines_and_shows_the_gate_summary():
    context = review_context()
    _, user = render("reviewer", context.model_dump(by_alias=True))
    lines = context.candidate_source.splitlines()
    for number in (1, len(lines) // 2, len(lines)):
        assert f"{number:4d}  {lines[number - 1]}".rstrip() in user
    assert "Integrity" in user and "Plan" in user and f"{context.candidate_path}:LINE" in user
    assert "- verdict: fail" in user and "first failing stage: y" in user
    assert "correctness fail, integrity pass, stress skipped" in user
    assert "lower_precision (docs/cheats.md 4): candidate-1.py:70: downcast" in user
    assert "inv_rms: not exposed" in user and "rel_l2 0.25" in user and "worst at" in user
    assert "exception: ValueError: boom" in user
    assert "not measured (no GPU: speed is not measured)" in user
    assert context.static_findings[0].evidence in user and context.next_plan in user
    assert "submit_review" in user

    bare = {
        "pass": True,
        "first_failing_stage": None,
        "gate": "0f" * 32,
        "candidate_sha256": "ab" * 32,
        "parts": {},
        "timing": {"measured": False},
    }
    empty = ReviewContext(
        op="rmsnorm", candidate_path="c.py", candidate_source="x = 1\n", gate_summary=VerdictSummary.model_validate(bare)
    )
    _, user = render("reviewer", empty.model_dump(by_alias=True))
    assert "No detections." in user and "no cases reported" in user and "static integrity scan is clean" in user


def test_test_writer_prompt_shows_the_contract_and_semantics_but_never_a_candidate():
    context = writer_context()
    system, user = render("test_writer", context)
    assert context["contract_yaml"].strip() in user
    assert "an all-zero row: inv_rms = 1/sqrt(eps)" in user
    assert "submit_cases" in user and "never see a candidate" in user.lower()
    assert "Golden values come only from running the canonical reference" in system
    assert "def run(" not in user


def test_optimizer_prompt_says_where_each_case_stands_against_the_floor_and_which_kernel_costs_most():
    from ferret.gate.models import CaseTiming
    from ferret.roles.base import CaseSpeed

    timed = CaseTiming(
        case="tp8_b32_l8192",
        candidate_ms=0.1835,
        baseline_ms=1.2,
        baseline_compiled_ms=1.1,
        speedup=6.54,
        speedup_vs_compiled=5.99,
        floor_ms=0.0324,
        fraction_of_floor=0.1766,
        achieved_tb_per_s=0.848,
        achieved_tflop_per_s=1.42,
        kernels={"_combine_unabsorb_kernel": 84.9, "_split_kv_attention_kernel": 77.7},
    )
    speed = CaseSpeed.of(timed)
    assert (speed.candidate_us, speed.floor_us) == (pytest.approx(183.5), pytest.approx(32.4))
    history = [RoundFeedback(round=1, approach="split-kv", passed=True, timing={"speedup": 6.54}, speed=[speed])]
    _, user = render("optimizer", optimizer_context(history).model_dump())
    assert (
        "tp8_b32_l8192: 183.5 us, 6.54x the baseline, 5.99x torch.compile; 18% of the roofline floor (32.4 us; "
        "0.85 TB/s, 1.4 TFLOP/s)"
    ) in user
    assert "`_combine_unabsorb_kernel` 84.9, `_split_kv_attention_kernel` 77.7" in user


def test_a_contract_allowing_cuda_gets_the_cuda_launcher_form_and_its_flags():
    _, triton_only = render("optimizer", optimizer_context([]).model_dump())
    assert "CUDA C++ candidates" not in triton_only and "ferret.backends" not in triton_only
    context = optimizer_context([], languages=["triton", "cuda"], cuda_flags=["--std=c++17", "--use_fast_math"])
    _, user = render("optimizer", context.model_dump())
    assert "Triton kernels, or CUDA C++ kernels" in user and "## CUDA C++ candidates" in user
    assert "from ferret.backends import cuda" in user and "KERNELS.launch(" in user
    assert "contract's flags: `--std=c++17 --use_fast_math`" in user and "compile_error" in user


def test_a_compile_error_reaches_the_optimizer_with_the_compilers_log():
    log = 'candidate.cu(12): error: expected a ";"\n' + "x" * 900
    history = [
        RoundFeedback(
            round=1,
            approach="cuda-row-per-block",
            passed=False,
            failures=[f"typical@bfloat16: compile_error: NVRTC refused the CUDA source:\n{log}"],
        )
    ]
    _, user = render("optimizer", optimizer_context(history, languages=["triton", "cuda"]).model_dump())
    assert 'candidate.cu(12): error: expected a ";"' in user and "x" * 900 in user
