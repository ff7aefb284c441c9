"""The timing process's serving-true timing (ferret/bench/graph.py) where the CPU can hold it: why a capture failed,
read from a recorded exception and the line it came from; which sets are replayed; the eager clock; the wire's keys.
Capture and replay themselves need a GPU: tests/gpu/test_graph_timing_gpu.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from ferret import wire
from ferret.bench import graph

# What CUDA says when a call does what a capture cannot hold (recorded from torch on an H100).
NOT_PERMITTED = (
    "CUDA error: operation not permitted when stream is capturing\nCUDA kernel errors might be asynchronously reported"
)
INVALIDATED = "CUDA error: operation failed due to a previous error during capture"

LAUNCHER = """
def run_item(inputs):
    lengths = inputs["cache_lens"]
    longest = lengths.max().item()
    return longest


def run_copy(inputs):
    host = inputs["cache_lens"].cpu()
    return host


def run_sync(inputs):
    import torch
    torch.cuda.synchronize()


def run_own_error(inputs):
    raise ValueError("x must be contiguous in its last dimension")
"""


class _Capturing:
    """A tensor-like whose host reads fail as they do under a CUDA-graph capture."""

    def max(self):
        return self

    def item(self):
        raise RuntimeError(NOT_PERMITTED)

    def cpu(self):
        raise RuntimeError(NOT_PERMITTED)


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    path = tmp_path_factory.mktemp("candidate") / "launcher.py"
    path.write_text(LAUNCHER)
    spec = importlib.util.spec_from_file_location("graph_launcher_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module, str(path)
    sys.modules.pop("graph_launcher_under_test", None)


def _failed_capture(call, inputs) -> BaseException:
    """The exception a failed capture raises: the call's own, then the capture's end with the first as its context."""
    try:
        try:
            call(inputs)
        except BaseException:
            raise RuntimeError(INVALIDATED)  # noqa: B904 - as `torch.cuda.graph.__exit__` raises it: implicitly chained
    except BaseException as err:  # noqa: BLE001
        return err
    raise AssertionError("the call did not fail")


def test_the_reason_is_the_calls_own_error_and_its_line_in_the_candidate(launcher):
    module, path = launcher
    err = _failed_capture(module.run_item, {"cache_lens": _Capturing()})
    reason, site = graph.capture_failure(err, {path})
    assert reason.startswith("RuntimeError: CUDA error: operation not permitted when stream is capturing")
    assert "\n" not in reason
    assert site == "launcher.py:4: longest = lengths.max().item()"
    assert graph.capture_cause(reason, site) == "host_read"


@pytest.mark.parametrize(
    ("entry", "cause"),
    [("run_item", "host_read"), ("run_copy", "cpu_gpu_copy"), ("run_sync", "host_sync"), ("run_own_error", "exception")],
)
def test_each_way_a_capture_fails_is_named(launcher, monkeypatch, entry, cause):
    module, path = launcher

    def refused() -> None:
        raise RuntimeError(NOT_PERMITTED)

    monkeypatch.setattr(torch.cuda, "synchronize", refused)
    err = _failed_capture(getattr(module, entry), {"cache_lens": _Capturing()})
    reason, site = graph.capture_failure(err, {path})
    assert graph.capture_cause(reason, site) == cause, (reason, site)


def test_a_capture_broken_otherwise_and_an_unrelated_error_are_told_apart():
    assert graph.capture_cause(f"RuntimeError: {INVALIDATED}", "k.py:3: launch()") == "capture_invalidated"
    assert graph.capture_cause("RuntimeError: cudaErrorStreamCaptureInvalidated", None) == "capture_invalidated"
    # a line that reads the host, but an error that is no capture's: the call's own failure
    assert graph.capture_cause("IndexError: list index out of range", "k.py:3: n = int(sizes[4])") == "exception"
    # a word that only ends like a host read is none
    assert graph.capture_cause(f"RuntimeError: {NOT_PERMITTED}", "k.py:3: print(grid)") == "host_sync"
    assert graph.capture_cause(f"RuntimeError: {NOT_PERMITTED}", "k.py:3: n = int(lens.max())") == "host_read"
    assert graph.capture_cause(f"RuntimeError: {NOT_PERMITTED}", "k.py:3: x.to('cpu')") == "cpu_gpu_copy"


def test_a_failure_outside_the_candidates_files_names_the_innermost_frame_outside_torch():
    def helper():
        raise RuntimeError(NOT_PERMITTED)

    try:
        helper()
    except RuntimeError as err:
        reason, site = graph.capture_failure(err, own_files=set())
    assert site is not None and site.startswith("test_graph_capture_cpu.py:") and "raise RuntimeError" in site
    assert reason.startswith("RuntimeError:")


def test_every_fresh_set_is_replayed_first_then_pool_sets_the_captured_one_last():
    pool = [{"x": torch.full((2,), float(i))} for i in range(5)]
    fresh = [{"x": torch.full((2,), -1.0)}]
    plan = graph.replay_plan(pool, fresh)
    assert [(source, index) for source, index, _ in plan] == [("fresh", 0), ("pool", 1), ("pool", 0)]
    assert plan[0][2] is fresh[0] and plan[1][2] is pool[1]
    # without a GPU's fresh draws: still two pool sets that differ
    assert [(s, i) for s, i, _ in graph.replay_plan(pool[:2], [])] == [("pool", 1), ("pool", 0)]


def test_eager_wall_time_is_per_call_with_the_host_work_and_a_synchronize_before_the_clock_stops():
    calls, syncs = [], []
    import time

    def call() -> None:
        calls.append(1)
        time.sleep(0.002)

    ms = graph.eager_wall_ms(call, lambda: syncs.append(len(calls)), estimate_ms=1.0)
    assert len(calls) == 20  # ~20 ms of calls at the estimate, at least 10
    assert syncs == [0, 20]  # before the first call and after the last
    assert 2.0 <= ms < 10.0


def test_graph_keys_round_trip_and_no_other_key_reads_as_one():
    key = wire.graph_key(wire.FRESH_SET, 3, "o_heads")
    assert key == "graph.fresh3.o_heads"
    assert wire.parse_graph_key(key) == ("fresh", 3, "o_heads")
    assert wire.parse_graph_key(wire.graph_key(wire.POOL_SET, 0, "y")) == ("pool", 0, "y")
    for other in (wire.slot_key(0, 1, "y"), wire.pool_key(1, "x"), wire.sample_key(0, 1, "y"), "graph.other0.y"):
        assert wire.parse_graph_key(other) is None
    assert wire.parse_pool_key(key) is None and wire.parse_slot_key(key) is None


def test_serving_times_cross_the_wire_as_the_judge_reads_them():
    from pydantic import TypeAdapter

    result = wire.TimingCaseResult(
        case="c",
        samples={"candidate": [0.01]},
        host_ms={},
        pool_sets=2,
        persisting_l2="",
        flags=[],
        serving={"candidate": wire.ServingTimes(eager_ms=0.05, not_capturable="RuntimeError: x", capture_site="k.py:1: y")},
    )
    import json
    from dataclasses import asdict

    text = json.dumps(asdict(wire.TimingResults(device="d", cases=[result])))
    back = TypeAdapter(wire.TimingResults).validate_json(text)
    assert back.cases[0].serving["candidate"] == result.serving["candidate"]
    # a timing process of before the serving step: nothing of it, read as nothing measured
    old = json.loads(text)
    del old["cases"][0]["serving"]
    assert TypeAdapter(wire.TimingResults).validate_python(old).cases[0].serving == {}


def test_the_judges_fresh_sets_are_read_from_their_file_and_a_foreign_key_is_refused(tmp_path: Path):
    from safetensors.torch import save_file

    from ferret.bench.process import load_replay_sets

    sets = [{"x": torch.full((2, 3), float(k)), "lens": torch.tensor([k, k + 1])} for k in range(2)]
    path = tmp_path / "replay.safetensors"
    save_file({wire.pool_key(k, n): t for k, one in enumerate(sets) for n, t in one.items()}, str(path))
    case = wire.TimingCaseJob("c", "", 2, {"y": ([2, 3], "float32")}, str(path), 2)
    loaded = load_replay_sets(case, "cpu")
    assert [sorted(one) for one in loaded] == [["lens", "x"], ["lens", "x"]]
    assert all(torch.equal(loaded[k][n], sets[k][n]) for k in range(2) for n in sets[k])
    assert load_replay_sets(wire.TimingCaseJob("c", "", 2, {}), "cpu") == []  # the CPU rehearsal: none
    save_file({"graph.fresh0.x": torch.zeros(1), **{wire.pool_key(0, "x"): torch.zeros(1)}}, str(path))
    with pytest.raises(ValueError, match="not a replay set key"):
        load_replay_sets(case, "cpu")
    save_file({wire.pool_key(5, "x"): torch.zeros(1)}, str(path))  # a set past the count the judge gave
    with pytest.raises(ValueError, match="not a replay set key"):
        load_replay_sets(case, "cpu")


def test_a_serving_function_the_candidate_replaces_is_named(monkeypatch):
    """The candidate shares the timing process: a replay time or answer must not come from its own function."""
    snapshot = graph.harness_snapshot()
    assert {"ferret.bench.graph.replay_ms", "ferret.bench.graph.capture", "statistics.median"} <= set(snapshot)
    assert graph.harness_changed(snapshot) == []
    monkeypatch.setattr(graph, "replay_ms", lambda *args: 0.001)
    monkeypatch.setattr(graph.statistics, "median", lambda values: 0.001)
    assert graph.harness_changed(snapshot) == ["ferret.bench.graph.replay_ms", "statistics.median"]


def _serving_state(tmp_path: Path, fn):
    """A candidate's case state as `prepare_case` leaves it, on the CPU: two input sets, its rounds, its answers file."""
    from safetensors.torch import save_file

    from ferret.bench import process

    pool = [{"x": torch.full((2, 3), float(k))} for k in range(2)]
    made: list = []

    def fresh_outputs() -> dict:
        made.append({"y": torch.full((2, 3), float("nan"))})
        return made[-1]

    slot = process.Slots([fn], pool, fresh_outputs, {})
    answers = tmp_path / "answers-0.safetensors"
    save_file({wire.slot_key(0, 0, "y"): torch.zeros(2, 3)}, str(answers))
    result = wire.TimingCaseResult("c", {"candidate": [0.01]}, {}, 2, "", [], answers_file=str(answers))
    case = wire.TimingCaseJob("c", "", 2, {"y": ([2, 3], "float32")})
    state = process._CaseState(case, 0, {"candidate": slot}, fresh_outputs, [], [], {}, result)
    job = wire.TimingJob(
        wire.CANDIDATE_TIMER, str(tmp_path / "cand.py"), "run", False, "cpu", {}, ["x"], 1, [case], str(tmp_path / "timing.json")
    )
    clock = process.Clock(on_gpu=False)
    clock.flush_buffer = torch.zeros(8, dtype=torch.int8)  # the GPU clock's; replay_ms is stood in for here
    return process, job, state, clock


def test_a_capture_that_raises_is_reported_with_its_cause_and_the_eager_time_stands(tmp_path, monkeypatch):
    def run(inputs, outputs, params):
        outputs["y"].copy_(inputs["x"])

    process, job, state, clock = _serving_state(tmp_path, run)

    def refused(call, inputs, outputs):
        call(inputs, outputs)
        raise RuntimeError(NOT_PERMITTED)

    monkeypatch.setattr(graph, "capture", refused)
    monkeypatch.setattr(process, "GRAPH_HARNESS", graph.harness_snapshot())  # the stand-in is the harness here
    process.measure_serving(job, state, clock)
    serving = state.result.serving["candidate"]
    assert serving.eager_ms is not None and serving.eager_ms > 0 and serving.replay_ms is None
    assert serving.not_capturable is not None and serving.not_capturable.startswith(
        "RuntimeError: CUDA error: operation not permitted"
    )
    assert serving.replayed_on == []
    assert state.result.flags == []  # capture failures are the judge's to weigh, not a cheat


def test_replayed_answers_join_the_candidates_answers_file_and_a_patched_step_is_named(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    def run(inputs, outputs, params):
        outputs["y"].copy_(inputs["x"])

    process, job, state, clock = _serving_state(tmp_path, run)
    monkeypatch.setattr(graph, "capture", lambda call, inputs, outputs: graph.Captured(None, inputs, outputs))  # type: ignore[arg-type]
    monkeypatch.setattr(
        graph, "replay_answers", lambda captured, plan: {wire.graph_key(s, i, "y"): inputs["x"] for s, i, inputs in plan}
    )
    monkeypatch.setattr(graph, "replay_ms", lambda *args: 0.004)
    process.measure_serving(job, state, clock)
    serving = state.result.serving["candidate"]
    assert serving.replay_ms == 0.004 and serving.not_capturable is None
    assert serving.replayed_on == ["pool0", "pool1"]
    saved = load_file(str(state.result.answers_file))
    assert set(saved) == {wire.slot_key(0, 0, "y"), "graph.pool1.y", "graph.pool0.y"}
    # the functions were replaced after the process loaded: what a candidate doing so would be named for
    assert state.result.flags and state.result.flags[0].startswith("harness_patching: serving-timing functions replaced")
