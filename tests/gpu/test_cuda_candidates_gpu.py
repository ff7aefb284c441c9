"""On the GPU: CUDA C++ candidates (issue 15) through the same gate as Triton's. The honest CUDA rmsnorm, softmax and
MLA pass every part and are timed without a flag; a source NVRTC refuses is a `compile_error` verdict carrying the
compiler's log; the four MLA simplifications written in CUDA fail at their expected stages. Not yet run on a GPU
when written (2026-12-01): the session's device time was spent."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import write_contract  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CUDA_RMSNORM = REPO / "tasks" / "rmsnorm" / "candidates" / "cuda_rmsnorm.py"
GATES = Path(os.environ.get("FERRET_GATES_DIR", REPO / "gates"))

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def contract(tmp_path_factory) -> Path:
    """contracts/rmsnorm.yaml, allowing CUDA candidates beside Triton's."""
    return write_contract(tmp_path_factory.mktemp("cuda-contract"),
                          lambda d: d["backend"].update(allowed_languages=["cuda"]), link_tasks=True)


def _allowing_cuda(op: str, folder: Path) -> Path:
    """contracts/<op>.yaml, with its tolerance file, in a project at `folder` (tasks linked), allowing CUDA."""
    text = (REPO / "contracts" / f"{op}.yaml").read_text()
    allowing = text.replace("backend:\n  language: triton\n", "backend:\n  language: triton\n  allowed_languages: [cuda]\n")
    assert allowing != text, f"contracts/{op}.yaml: its backend block changed shape"
    (folder / "contracts").mkdir(parents=True)
    path = folder / "contracts" / f"{op}.yaml"
    path.write_text(allowing)
    tolerances = f"{op}.tolerances.yaml"
    (folder / "contracts" / tolerances).write_text((REPO / "contracts" / tolerances).read_text())
    (folder / "tasks").symlink_to(REPO / "tasks", target_is_directory=True)
    return path


@pytest.mark.parametrize("op,candidate", [("softmax", "softmax/candidates/cuda_softmax.py"),
                                          ("mla_attention", "mla_attention/candidates/cuda_mla.py")])
def test_the_honest_cuda_softmax_and_mla_pass_every_part(op, candidate, tmp_path):
    from ferret.gate.judge import check

    verdict, _ = check(_allowing_cuda(op, tmp_path), REPO / "tasks" / candidate, GATES, profile="gpu")
    failing = {r.id: (r.failure.message if r.failure else r.first_failing_stage) for r in verdict.variants if not r.passed}
    assert verdict.passed, f"{op}: {failing}; parts {verdict.parts}"
    assert verdict.timing.measured and not verdict.timing.detections, verdict.timing


@pytest.mark.parametrize("simplification", ["theta", "scale", "no_kv_norm", "head_sum"])
def test_the_mla_simplifications_in_cuda_fail_at_their_stage(simplification, tmp_path):
    from ferret.gate.judge import check
    from tasks.mla_attention.simplifications import SIMPLIFICATIONS, write_cuda_variant

    variant = write_cuda_variant(simplification, tmp_path / f"cuda_mla_{simplification}.py")
    verdict, _ = check(_allowing_cuda("mla_attention", tmp_path / "project"), variant, GATES, profile="gpu",
                       measure_speed=False, run_stress=False)
    assert not verdict.passed
    assert verdict.first_failing_stage == SIMPLIFICATIONS[simplification].expected_first_stage


def test_the_honest_cuda_rmsnorm_passes_every_part_and_is_timed_without_a_flag(contract):
    from ferret.gate.judge import check

    verdict, _ = check(contract, CUDA_RMSNORM, GATES, profile="gpu")
    assert verdict.passed, verdict.parts
    assert all(part.status == "pass" for part in verdict.parts.values()), verdict.parts
    assert verdict.timing.measured and not verdict.timing.detections, verdict.timing
    assert all(case.candidate_ms and not case.flags for case in verdict.timing.cases), verdict.timing.cases


def test_a_source_nvrtc_refuses_is_a_compile_error_verdict(contract, tmp_path):
    from ferret.gate.judge import check

    broken = tmp_path / "cuda_rmsnorm_broken.py"
    broken.write_text(CUDA_RMSNORM.read_text().replace("sum += v * v;", "sum += v * v"))
    verdict, _ = check(contract, broken, GATES, profile="gpu")
    assert not verdict.passed
    failures = [v.failure for v in verdict.variants if v.failure is not None]
    assert failures and all(f.kind == "compile_error" for f in failures), failures
    assert 'error: expected a ";"' in failures[0].message
