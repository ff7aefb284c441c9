"""Outputs and inputs checked at the storage level: after every call each one must be the tensor the judge
handed out, with the same storage, data_ptr, shape, strides, storage offset and dtype. Re-pointing or
re-labelling one in place (`set_`, `as_strided_`, `resize_`, `.data =`, a computed attribute name, a dict
entry swapped) is rejected as `output_relabelled`, naming what changed; views, slices and contiguity checks of
an honest kernel pass."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import RMSNORM_CONTRACT  # noqa: E402
from judge_pool import CANDIDATES, describe, judge_all, named  # noqa: E402

from ferret.sandbox.buffers import CallBuffers, Layout  # noqa: E402

# candidate -> words the evidence must hold (which property changed, or which entry)
CHEATS = {
    "u2_set_to_library_answer.py": "storage",
    "u2_as_strided_reorder.py": "strides",
    "u2_resize_flat.py": "shape",
    "u2_data_assign.py": "data_ptr",
    "u2_computed_name_set.py": "data_ptr",
    "u2_input_swapped.py": "input x",
}
HONEST = ["u2_honest_flat_views.py"]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    paths = [CANDIDATES / name for name in [*CHEATS, *HONEST]]
    return judge_all(RMSNORM_CONTRACT, paths, tmp_path_factory.mktemp("gates"))


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_relabelling_is_rejected_and_names_what_changed(name, verdicts):
    verdict, _ = verdicts[name]
    assert not verdict.passed, describe(verdict)
    found = named(verdict, "output_relabelled", "runtime")
    assert found, describe(verdict)
    assert any(CHEATS[name] in d.evidence for d in found), describe(verdict)
    assert all(d.catalogue == [28] for d in found)


@pytest.mark.parametrize("name", HONEST)
def test_views_and_slices_pass(name, verdicts):
    verdict, _ = verdicts[name]
    assert verdict.passed and not verdict.detections, describe(verdict)


@pytest.mark.quick
@pytest.mark.parametrize(
    "relabel",
    [
        lambda t: t.set_(torch.zeros_like(t)),
        lambda t: t.as_strided_((t.shape[1], t.shape[0]), (1, t.shape[1])),
        lambda t: t.resize_(t.numel()),
        lambda t: setattr(t, "data", t.clone()),
        lambda t: getattr(t, "se" + "t_")(t.clone()),
        lambda t: t.untyped_storage().resize_(t.untyped_storage().nbytes() + 4096),
    ],
    ids=["set_", "as_strided_", "resize_", "data", "computed_name", "storage_resize"],
)
def test_every_way_to_relabel_changes_the_record(relabel):
    buffers = CallBuffers("cpu")
    outputs = {"y": buffers.output("y", [4, 6], "float32", "nan")}
    assert buffers.relabelled({}, outputs) == []
    relabel(outputs["y"])
    assert buffers.relabelled({}, outputs), Layout.of(outputs["y"])


@pytest.mark.quick
def test_views_writes_and_copies_keep_the_record():
    buffers = CallBuffers("cpu")
    inputs = {"x": buffers.copy_of("x", torch.randn(4, 6))}
    outputs = {"y": buffers.output("y", [4, 6], "bfloat16", "random")}
    outputs["y"].view(-1)[:5].fill_(1)
    outputs["y"].copy_(inputs["x"])
    outputs["y"][1:].mul_(2)
    assert outputs["y"].is_contiguous() and outputs["y"].data_ptr() % 64 == 0  # the CPU allocator's alignment
    assert buffers.relabelled(inputs, outputs) == []
