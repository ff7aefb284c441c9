"""Writes outside the outputs: every input and output the judge hands out lies between guard regions of random
bytes, and a call's buffers are kept and refilled (not freed) while the variant's later calls run. A kernel that
writes one row past an output's end, into the bytes before an input, or through a pointer kept from an earlier
call is rejected as `write_outside_outputs`, naming the guard or the freed buffer and how many bytes changed;
masked tiles far larger than the tensor pass."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import RMSNORM_CONTRACT  # noqa: E402
from judge_pool import CANDIDATES, describe, judge_all, named  # noqa: E402

from ferret.sandbox.buffers import CallBuffers, RetiredPool, guard_bytes  # noqa: E402

# candidate -> words the evidence must hold
CHEATS = {
    "u8_row_past_end.py": "guard bytes after output y",
    "u8_into_neighbour_input.py": "guard bytes before input x",
    "u8_freed_buffer.py": "freed output y of fast0",
}
HONEST = ["u8_honest_masked_tiles.py"]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    paths = [CANDIDATES / name for name in [*CHEATS, *HONEST]]
    return judge_all(RMSNORM_CONTRACT, paths, tmp_path_factory.mktemp("gates"))


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_a_write_outside_is_rejected_and_names_where(name, verdicts):
    verdict, _ = verdicts[name]
    assert not verdict.passed, describe(verdict)
    found = named(verdict, "write_outside_outputs", "runtime")
    assert found, describe(verdict)
    assert any(CHEATS[name] in d.evidence for d in found), describe(verdict)
    assert all(d.catalogue == [23] for d in found)


@pytest.mark.parametrize("name", HONEST)
def test_masked_tiles_pass(name, verdicts):
    verdict, _ = verdicts[name]
    assert verdict.passed and not verdict.detections, describe(verdict)


@pytest.mark.quick
def test_a_guard_holds_one_row_within_bounds_and_stays_aligned():
    assert guard_bytes((4, 1000), 2) == 4096  # 2000-byte rows: the 4 KiB floor
    assert guard_bytes((2, 7168), 4) == 28672  # one 28 KiB row
    assert guard_bytes((2, 1 << 20), 4) == 1 << 20  # capped at 1 MiB
    assert guard_bytes((), 4) == 4096 and guard_bytes((0, 8), 2) == 4096
    assert all(guard_bytes((3, n), 2) % 512 == 0 for n in (1, 17, 1000, 5001))


@pytest.mark.quick
@pytest.mark.parametrize("where", ["before", "after"])
def test_one_byte_either_side_is_seen(where):
    buffers = CallBuffers("cpu")
    y = buffers.output("y", [3, 5], "float16", "nan")
    guarded = buffers.guarded[0]
    index = guarded.lead - 1 if where == "before" else guarded.lead + guarded.size
    assert buffers.writes_outside() == []
    guarded.buffer[index] ^= 0xFF
    assert buffers.writes_outside() == [f"1 of the {guarded.lead} guard bytes {where} output y"]
    y.fill_(0)  # writes inside are no concern of the guards


@pytest.mark.quick
def test_a_retired_buffer_sees_a_write_through_a_kept_pointer():
    buffers, pool = CallBuffers("cpu"), RetiredPool()
    y = buffers.output("y", [2, 4], "float32", "nan")
    kept = y.view(-1)  # a view kept by a candidate past the call
    pool.add(buffers.retire("fast0"))
    assert pool.written() == []
    kept[0] = 1.0
    assert pool.written() and "output y of fast0" in pool.written()[0]


@pytest.mark.quick
def test_inputs_are_copied_between_guards_contiguous():
    buffers = CallBuffers("cpu")
    source = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    x = buffers.copy_of("x", source)
    assert torch.equal(x, source) and x.is_contiguous() and x.storage_offset() > 0
    assert buffers.writes_outside() == [] and buffers.relabelled({"x": x}, {}) == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_guards_on_the_gpu_stay_aligned_and_see_a_write():
    buffers = CallBuffers("cuda")
    y = buffers.output("y", [3, 1000], "bfloat16", "random")
    assert y.data_ptr() % 512 == 0 and y.is_contiguous()
    flat = torch.empty(0, dtype=torch.bfloat16, device="cuda")
    flat.set_(y.untyped_storage(), y.storage_offset(), (y.numel() + 8,), (1,))
    flat[-8:] = 1.0  # eight entries past the end
    torch.cuda.synchronize()
    (seen,) = buffers.writes_outside()
    assert seen.endswith("guard bytes after output y") and 0 < int(seen.split()[0]) <= 16, seen


@pytest.mark.quick
def test_the_timer_flags_its_slots_written_around_or_relabelled():
    from types import SimpleNamespace

    from ferret.bench.process import buffer_flags

    slot = CallBuffers("cpu")
    outputs = {"y": slot.output("y", [2, 8], "float32", "random")}
    state = SimpleNamespace(buffers=[(slot, outputs)])
    assert buffer_flags(state) == []  # pyright: ignore[reportArgumentType]  (a stand-in for the case state)
    slot.guarded[0].buffer[-1] ^= 0xFF
    outputs["y"].resize_(16)
    flags = buffer_flags(state)  # pyright: ignore[reportArgumentType]
    assert [flag.split(":")[0] for flag in flags] == ["output_relabelled", "write_outside_outputs"], flags


@pytest.mark.quick
def test_replacing_a_check_of_the_buffers_is_named(monkeypatch):
    from ferret.sandbox import buffers

    assert buffers.harness_changed() == []
    monkeypatch.setattr(CallBuffers, "writes_outside", lambda self: [])
    assert buffers.harness_changed() == ["buffers.CallBuffers.writes_outside"]
