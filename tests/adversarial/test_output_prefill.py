"""Outputs pre-filled with content that varies call to call: NaN on a variant's first call (an output left
unwritten is named by its NaN), then random values, zeros and a stale answer of other inputs in a fresh order.
A kernel that writes only where NaN, skips rows that already hold numbers, or accumulates into its output is
rejected on some call and named `unwritten_output`; a kernel that uses its output as scratch within the call
passes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import RMSNORM_CONTRACT  # noqa: E402
from judge_pool import CANDIDATES, describe, judge_all, named  # noqa: E402

from ferret.sandbox import buffers  # noqa: E402

CHEATS = ["u1f_write_where_nan.py", "u1f_return_if_filled.py", "u1f_accumulate.py"]
HONEST = ["u1f_honest_output_as_scratch.py"]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    paths = [CANDIDATES / name for name in [*CHEATS, *HONEST]]
    return judge_all(RMSNORM_CONTRACT, paths, tmp_path_factory.mktemp("gates"))


@pytest.mark.parametrize("name", CHEATS)
def test_reading_the_output_is_rejected_as_unwritten(name, verdicts):
    verdict, _ = verdicts[name]
    assert not verdict.passed, describe(verdict)
    assert named(verdict, "unwritten_output"), describe(verdict)


@pytest.mark.parametrize("name", ["u1f_write_where_nan.py", "u1f_return_if_filled.py"])
def test_the_evidence_names_the_call_and_its_prefill(name, verdicts):
    verdict, _ = verdicts[name]
    evidence = " ".join(d.evidence for d in named(verdict, "unwritten_output", "runtime"))
    assert "pre-filled with" in evidence and "entries" in evidence, describe(verdict)


@pytest.mark.parametrize("name", HONEST)
def test_an_output_used_as_scratch_within_the_call_passes(name, verdicts):
    verdict, _ = verdicts[name]
    assert verdict.passed and not verdict.detections, describe(verdict)


@pytest.mark.quick
def test_every_fill_is_met_and_nan_stays_first():
    for calls in (3, 4, 7):
        order = buffers.prefills_for(calls)
        assert len(order) == calls and set(order[:3]) == {buffers.RANDOM, buffers.ZEROS, buffers.STALE}
        assert buffers.NAN not in order
    orders = {tuple(buffers.prefills_for(3)) for _ in range(60)}
    assert len(orders) > 1, "the order is drawn afresh"


@pytest.mark.quick
@pytest.mark.parametrize("how", buffers.PREFILLS)
def test_each_fill_is_what_it_says_and_counted_when_left(how):
    call = buffers.CallBuffers("cpu")
    answer = torch.randn(4, 8).to(torch.bfloat16)
    y = call.output("y", [4, 8], "bfloat16", how, buffers.stale_answer(answer))
    if how == buffers.NAN:
        assert y.isnan().all()
    elif how == buffers.ZEROS:
        assert (y == 0).all()
    elif how == buffers.STALE:
        assert torch.equal(y, answer.reshape(-1).roll(1).reshape(4, 8))
    else:
        assert y.isfinite().all() and y.std() > 0
    assert call.left_as_filled({"y": y}) == {"y": 32}
    y.copy_(answer)
    assert call.left_as_filled({"y": y})["y"] < 32 or how == buffers.STALE


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("how", buffers.PREFILLS)
def test_each_fill_on_the_gpu_stays_on_the_gpu(how):
    call = buffers.CallBuffers("cuda")
    answer = torch.randn(64, 7168, device="cuda").to(torch.bfloat16)
    y = call.output("y", [64, 7168], "bfloat16", how, buffers.stale_answer(answer))
    assert y.device.type == "cuda" and y.data_ptr() % 512 == 0
    assert call.left_as_filled({"y": y}) == {"y": y.numel()}
    assert call.writes_outside() == [] and call.relabelled({}, {"y": y}) == []
