"""Two kinds of stage the FP8 contract needs: one judged exactly but at rounding ties (`Stage.exact_within`), and one
reported and never judged (`Stage.informative`, its candidate value another stage's: `of`)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import CONTRACTS  # noqa: E402

from ferret import wire  # noqa: E402
from ferret.contract.load import load_contract  # noqa: E402
from ferret.contract.model import Contract, Stage, Tolerance  # noqa: E402
from ferret.gate.decide import _compare_stages  # noqa: E402
from ferret.gate.metrics import allowance_of, compare_stage, compare_to_golden  # noqa: E402

EXACT = Stage(name="codes", computes="codes", shape=["N"], exact_within="codes_allowance")
LOOSE = Tolerance(rel_l2=0.5, max_abs_rel_peak=0.5)


def _codes() -> tuple[torch.Tensor, torch.Tensor]:
    reference = torch.linspace(1.0, 16.0, 64, dtype=torch.float64)
    allowance = torch.zeros_like(reference)
    allowance[5] = 0.125  # one entry at a rounding tie: one unit allowed there
    return reference, allowance


def test_an_entry_within_its_allowance_passes_and_one_past_it_fails_whatever_the_bounds():
    reference, allowance = _codes()
    at_tie = reference.clone()
    at_tie[5] += 0.125
    assert compare_stage(at_tie, reference, EXACT, LOOSE, allowance=allowance).passed
    off = reference.clone()
    off[6] += 0.125  # the same error where no tie allows it: far inside the loose bounds, still a failure
    metrics = compare_stage(off, reference, EXACT, LOOSE, allowance=allowance)
    assert not metrics.passed and metrics.beyond_allowance == 1
    assert metrics.reasons == ["1 entries off by more than allowed (exact but at rounding ties)"]


def test_a_golden_set_without_the_allowance_judges_the_stage_exactly():
    reference, _ = _codes()
    allowance = allowance_of({"codes": reference}, EXACT)
    assert allowance is not None and not allowance.any()
    off = reference.clone()
    off[5] += 0.125
    assert not compare_stage(off, reference, EXACT, LOOSE, allowance=allowance).passed


def test_an_informative_stage_reports_its_metrics_and_fails_nothing():
    stage = Stage(name="far", computes="f", shape=["N"], informative=True)
    reference = torch.ones(32, dtype=torch.float64)
    metrics = compare_stage(reference * 1.5, reference, stage, Tolerance(rel_l2=0.01))
    assert metrics.passed and metrics.informative
    assert metrics.rel_l2 == pytest.approx(0.5) and metrics.reasons and metrics.reasons[0].startswith("rel_l2")


def test_of_is_only_for_an_informative_stage():
    with pytest.raises(ValueError, match="informative"):
        Stage(name="x", computes="x", shape=["N"], of="y")


def _fp8_data() -> dict:
    data = yaml.safe_load((CONTRACTS / "mla_attention_fp8.yaml").read_text())
    data["tolerances"] = yaml.safe_load((CONTRACTS / "mla_attention_fp8.tolerances.yaml").read_text())
    data["project"] = str(CONTRACTS.parent)
    return data


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s[-2].update(informative=True), "stages.o_heads.informative"),
        (lambda s: s[-1].update(of="nowhere"), "stages.o_heads_unquantized.of"),
        (lambda s: s[3].update(exact_within="c_kv"), "stages.kv_latent.exact_within"),
    ],
    ids=["informative_output", "of_unknown", "allowance_named_as_stage"],
)
def test_misdeclared_stages_are_contract_errors(edit, message):
    data = copy.deepcopy(_fp8_data())
    edit(data["stages"])
    with pytest.raises(ValueError, match=message):
        Contract.model_validate(data)


def test_the_judge_compares_an_informative_stage_with_the_stage_it_names():
    """o_heads_unquantized is the candidate's o_heads against the unquantized step's golden value: far off, passed."""
    contract = load_contract(CONTRACTS / "mla_attention_fp8.yaml")
    shapes = {"o_heads": (1, 1, 128)}
    o_heads = torch.randn(shapes["o_heads"], dtype=torch.float64)
    golden = {s.name: torch.zeros(1) for s in contract.stages}
    golden.update(o_heads=o_heads, o_heads_unquantized=o_heads * 2)
    got = {wire.fast_key(0, "o_heads"): o_heads.to(torch.bfloat16)}
    stages = [s for s in contract.stages if s.name in ("o_heads", "o_heads_unquantized")]
    narrowed = contract.model_copy(update={"stages": stages})
    metrics = {m.stage: m for m in _compare_stages(narrowed, got, golden, ["o_heads"], [], "bfloat16", None, "cpu")}
    assert metrics["o_heads"].passed and not metrics["o_heads"].informative
    far = metrics["o_heads_unquantized"]
    assert far.passed and far.informative and far.exposed and far.rel_l2 == pytest.approx(0.5, rel=0.01)


def _kv_latent_only():
    """The FP8 contract narrowed to its exact stage, and a golden set of it: codes, with one tie allowed a unit."""
    contract = load_contract(CONTRACTS / "mla_attention_fp8.yaml")
    narrowed = contract.model_copy(update={"stages": [contract.stage("kv_latent")]})
    codes = torch.tensor([[[0.5, -0.5, 2.0, -448.0] * 128]], dtype=torch.float32)  # [B=1, L=1, 512]
    allowance = torch.zeros_like(codes)
    allowance[..., 2] = 0.25
    return narrowed, {"kv_latent": codes, "kv_latent_allowance": allowance}


def test_every_check_of_a_stage_reads_its_allowance_from_the_golden_set():
    """`compare_to_golden`, the one comparison the judge, the answer checks and the audit share: a small code's
    sign flipped is far inside the stage's tolerance and still fails; a tie's unit passes."""
    contract, golden = _kv_latent_only()
    stage = contract.stage("kv_latent")
    tol = contract.tolerance("bfloat16", "kv_latent")
    flipped = golden["kv_latent"].clone()
    flipped[..., 1] = 0.5
    assert compare_stage(flipped, golden["kv_latent"], stage, tol).passed  # the tolerance alone lets it through
    assert compare_to_golden(flipped, golden, stage, tol).beyond_allowance == 1
    at_tie = golden["kv_latent"].clone()
    at_tie[..., 2] = 2.25
    assert compare_to_golden(at_tie, golden, stage, tol).passed


def test_the_audit_classes_an_exact_stage_by_its_allowance(monkeypatch):
    """A mutant whose only error is on an exact stage, inside its tolerance, is over the tolerance for the audit:
    harmful and scored, never `band` (the gate rejects it, so the audit must count it)."""
    from ferret.audit import worker

    contract, golden = _kv_latent_only()
    flipped = golden["kv_latent"].clone()
    flipped[..., 1] = 0.5
    monkeypatch.setattr(worker, "_stages", lambda *args: {"kv_latent": flipped})
    entry = {"case": "fresh", "dtype": "bfloat16", "dims": {"B": 1, "L": 1}, "strata": []}
    error = worker._case_error(contract, None, {}, golden, entry, "cpu")
    assert not error.within_tolerance
    assert error.stages[0].reasons == ["1 entries off by more than allowed (exact but at rounding ties)"]


def test_the_answer_checks_keep_the_companions_of_the_outputs_they_judge():
    """`reference_outputs` keeps an output stage's allowance and error scale beside it, so a timed or replayed answer
    is judged as the gate's own comparison judges it (a set without the allowance would judge every tie exactly)."""
    from ferret.contract.task import Task
    from ferret.gate.answers import reference_outputs

    contract, golden = _kv_latent_only()
    task = Task(CONTRACTS / "mla_attention_fp8.yaml", contract, CONTRACTS.parent)
    every_stage = {**golden, "c_kv": torch.zeros(1)}  # what a reference returns: more than the outputs asked for
    task.__dict__["reference"] = lambda inputs, params: every_stage
    kept = reference_outputs(task, {}, {"kv_latent"}, "cpu")
    assert set(kept) == {"kv_latent", "kv_latent_allowance"}
