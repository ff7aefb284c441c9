"""The parts of the timing guards that need no GPU: the input pool, the roofline floor, loading the
baseline by file. (The guards at work are in tests/gpu/test_gpu_timing_guards.py.)"""

from pathlib import Path

import pytest
import torch

from ferret.bench.guards import DATASHEET_PEAKS, FLOOR_MARGIN, floor_ms, input_pool, peaks_for
from ferret.bench.process import digest, load_function
from ferret.contract.roofline import TensorSpec, generic_count

REPO = Path(__file__).resolve().parents[2]


def test_pool_is_larger_than_the_target_and_every_set_is_fresh():
    inputs = {"x": torch.randn(64, 256), "weight": torch.randn(256), "n": torch.arange(4)}
    one = sum(t.numel() * t.element_size() for t in inputs.values())
    pool = input_pool(inputs, ["x", "weight"], target_bytes=10 * one, generator=torch.Generator().manual_seed(0))
    assert len(pool) == 10
    assert torch.equal(pool[0]["x"], inputs["x"])  # the gate's own inputs come first
    for later in pool[1:]:
        assert not torch.equal(later["x"], inputs["x"]) and not torch.equal(later["weight"], inputs["weight"])
        assert later["x"].data_ptr() != inputs["x"].data_ptr()
        assert torch.equal(later["n"], inputs["n"])  # integer inputs (lengths, positions) keep their meaning
        rel = (later["x"] - inputs["x"]).norm() / inputs["x"].norm()
        assert 0 < rel < 0.05  # still the case's distribution
    assert len({id(p["x"]) for p in pool}) == len(pool)


def test_pool_has_at_least_two_sets_and_at_most_the_cap():
    big = {"x": torch.zeros(1024, 1024)}
    assert len(input_pool(big, ["x"], target_bytes=1)) == 2
    assert len(input_pool({"x": torch.zeros(1)}, ["x"], target_bytes=1 << 30, max_sets=64)) == 64


def test_floor_counts_read_only_inputs_and_outputs_at_datasheet_bandwidth():
    tensors = {
        "x": TensorSpec((4096, 7168), "bfloat16", "in"),
        "cache": TensorSpec((1 << 20,), "bfloat16", "inout"),
        "y": TensorSpec((4096, 7168), "bfloat16", "out"),
    }
    count = generic_count(tensors)  # the in-place cache is not counted
    moved = count.bytes
    assert (moved, count.flops, count.source) == (2 * 4096 * 7168 * 2, 0, "generic")
    peaks = peaks_for("NVIDIA H200")
    assert peaks is DATASHEET_PEAKS["H200"] and peaks_for("Some CPU") is None
    assert peaks is not None
    floor = floor_ms(moved, 0.0, peaks)
    assert abs(floor - 1e3 * moved / 4.8e12) < 1e-12
    # The rmsnorm kernel measured on the H200 (32.1 us for this shape) is above the rejection line.
    assert 0.0321 > FLOOR_MARGIN * floor


def test_baseline_is_loaded_by_file_without_an_import_path():
    run = load_function(str(REPO / "tasks/rmsnorm/baseline.py"), "run", "ferret_baseline_test")
    x = torch.randn(3, 8)
    outputs = {"y": torch.empty(3, 8)}
    run({"x": x, "weight": torch.ones(8)}, outputs, {"eps": 1e-6})
    assert torch.allclose(outputs["y"], x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def test_output_fingerprint_changes_with_any_byte_and_ignores_dict_order():
    a = {"y": torch.arange(8, dtype=torch.float32), "z": torch.ones(3, dtype=torch.bfloat16)}
    b = {"z": a["z"].clone(), "y": a["y"].clone()}
    assert digest(a) == digest(b)
    b["y"][5] = torch.nextafter(b["y"][5], torch.tensor(100.0))
    assert digest(a) != digest(b)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks how far the timing process gets without a GPU")
def test_timing_process_imports_everything_it_needs_on_the_candidate_import_path(tmp_path):
    """The timing process runs on the candidate's fixed import path (no project folder, no judge-side
    packages). Here, without a GPU, it must get as far as asking for the device: every import, the
    baseline loaded by file and the candidate loaded, for the GPU tests' own contract kept under tests/."""
    from ferret.contract.task import Task
    from ferret.gate.context import GateContext
    from ferret.gate.judge import locate_gate
    from ferret.gate.lock import verify_gate
    from ferret.gate.models import GateManifest
    from ferret.gate.timing import TimingOptions, time_candidate

    contract_path = REPO / "tests/gpu/contracts/rmsnorm_small.yaml"
    task = Task.load(contract_path)
    gate = locate_gate(contract_path, task.contract, tmp_path / "gates", "gpu", lambda message: None)
    manifest = GateManifest.model_validate(verify_gate(gate))
    candidate = REPO / "tasks/rmsnorm/candidates/triton_rmsnorm.py"
    result = time_candidate(GateContext(task, manifest, gate), candidate, TimingOptions(lambda message: None))
    assert not result.measured
    assert "Error" in result.reason and "get_device_name" in result.reason, result.reason
    assert "ImportError" not in result.reason and "ModuleNotFoundError" not in result.reason, result.reason


def test_the_timing_folder_is_removed_whatever_happened(tmp_path, monkeypatch):
    import tempfile

    from ferret.gate import timing
    from ferret.gate.context import GateContext

    made = []
    real_mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args, **kwargs):
        made.append(real_mkdtemp(*args, **kwargs))
        return made[-1]

    def failing(context, workdir, device, checked=None):
        (workdir / "answers-0.safetensors").write_bytes(b"x" * 100)
        raise RuntimeError("the timing process broke")

    monkeypatch.setattr(timing.tempfile, "mkdtemp", recording_mkdtemp)
    monkeypatch.setattr(timing, "_prepare_cases", failing)
    with pytest.raises(RuntimeError, match="broke"):
        # no task or manifest: the stand-in for _prepare_cases reads neither
        timing.time_candidate(
            GateContext(None, None, tmp_path),  # pyright: ignore[reportArgumentType]
            tmp_path / "c.py",
            timing.TimingOptions(lambda m: None),
        )
    assert len(made) == 1 and not Path(made[0]).exists()


def test_every_later_case_is_warmed_up_before_the_first_step(tmp_path, monkeypatch):
    """A timing process warms up (compiles) every case after the first before it waits for the judge's first step:
    it runs beside the candidate's correctness run then, and compiling at a case's turn would hold both timing
    processes up between cases, against the warm check's time budget. The real step loop, its steps answered at once."""
    import sys

    from safetensors.torch import save_file

    from ferret import wire
    from ferret.bench import process
    from ferret.sandbox.watch import HarnessGuard, LaunchRecorder

    cases = []
    for name, rows in (("first", 2), ("second", 3), ("third", 5)):
        pool_file = tmp_path / f"{name}.safetensors"
        save_file({wire.pool_key(i, "x"): torch.randn(rows, 4) for i in range(2)}, str(pool_file))
        cases.append(wire.TimingCaseJob(name, str(pool_file), 2, {"y": ([rows, 4], "float32")}))
    job = wire.TimingJob(
        role=wire.REFERENCE_TIMER,
        source="",
        entry="run",
        compile=False,
        device="cpu",
        params={},
        read_only=["x"],
        repeats=1,
        cases=cases,
        result=str(tmp_path / "result.json"),
    )
    events: list[tuple[str, object]] = []
    monkeypatch.setattr(process.Steps, "ready", lambda self, step: events.append(("ready", step)))
    monkeypatch.setattr(process.Steps, "finished", lambda self, step: None)

    def run(inputs, outputs, params):
        events.append(("call", inputs["x"].shape[0]))
        outputs["y"].copy_(inputs["x"])

    harness = HarnessGuard(sys.modules[process.__name__], LaunchRecorder())
    results = process.run_steps(
        job, {"baseline": run}, process.Clock(on_gpu=False), harness, warmed=lambda: events.append(("warmed", None))
    )
    first_step = events.index(("ready", "0 0"))
    # case 0's own warm-up, then each later case once, all before the first step; then the warm-up turn given back
    # (ferret/bench/warmup_turn.py): the next reference timer compiles after every case of this one is compiled
    assert events[:first_step] == [("call", 2), ("call", 3), ("call", 5), ("warmed", None)]
    assert [r.case for r in results] == ["first", "second", "third"] and "warm_ahead" in results[0].seconds
