"""The MLA benchmark (`python -m benchmarks mla`, benchmarks/mla.py): its CPU rehearsal end to end (every output
checked before it is timed, torch.compile and FlashMLA beside the template's point, the floor), and the helpers that
only a GPU would reach: reading the compiled attention kernel's facts out of Triton's caches (layout of Triton 3.x: per
device a tuple whose first dicts map keys to compiled kernels), the point syntax, the table with skipped and failed
rows, and the rounds timed by the gate's clock."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


DRIVER = [sys.executable, "-m", "benchmarks", "mla"]


@pytest.fixture(scope="module")
def bench():
    from benchmarks import mla

    return mla


def _driver(args: list[str], env: dict, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*DRIVER, *args],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=timeout,
        check=False,
    )


def test_the_cpu_rehearsal_checks_then_times_the_point_beside_its_peers(tmp_path):
    """--cpu: the default point at a tiny shape under the interpreter: its o_heads checked against the float64
    reference, then timed beside torch.compile of the baseline; FlashMLA's row is there, skipped with the reason
    where its package does not import; every timed row carries the floor and the fraction of it."""
    done = _driver(
        ["--cpu", "--out", str(tmp_path), "--shapes", "h16_b2_l64", "--point", "", "--rounds", "1"], dict(os.environ), timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {row["impl"]: row for row in map(json.loads, (tmp_path / "mla-template-bench.jsonl").read_text().splitlines())}
    compiled, flash = rows.pop("torch.compile(baseline)"), rows.pop("FlashMLA core (attention only)")
    ((approach, point),) = rows.items()
    assert approach.startswith("heads<=64,tokens=64") and point["file"] == "point_00.py"
    for row in (point, compiled):
        assert row["ok"] is True and row["why"] is None and row["us"] > 0
        assert row["floor_us"] > 0 and row["fraction_of_floor"] == pytest.approx(row["floor_us"] / row["us"])
    assert flash.get("skipped") or flash.get("flash_mla_core_us", 0) > 0, flash
    assert "| h16_b2_l64 | torch.compile(baseline) |" in (tmp_path / "mla-template-bench.md").read_text()


def _kernel(ptx: str, regs: int, spills: int):
    return types.SimpleNamespace(
        asm={"ptx": ptx}, n_regs=regs, n_spills=spills, metadata=types.SimpleNamespace(shared=147456, num_warps=8)
    )


def test_kernel_facts_read_triton_caches(bench):
    hopper, ampere = _kernel("wgmma.mma_async.sync.aligned", 168, 0), _kernel("mma.sync.aligned.m16n8k16", 255, 40)
    jit = types.SimpleNamespace(device_caches={0: ({"a": hopper, "b": ampere}, {"a": hopper}, "target", "backend", None)})
    facts = bench.kernel_facts(types.SimpleNamespace(_split_kv_attention_kernel=jit))
    assert facts["compiled_variants"] == 2 and facts["wgmma"] is True
    assert [(v["wgmma"], v["mma_sync"], v["n_regs"], v["n_spills"]) for v in facts["variants"]] == [
        (True, False, 168, 0),
        (False, True, 255, 40),
    ]
    assert bench.kernel_facts(types.SimpleNamespace(_split_kv_attention_kernel=None)) == {"compiled_variants": 0}


def test_points_parse_and_render(bench, tmp_path):
    assert bench.parse_point("head_block=64,num_warps=8,split_policy=waves") == {
        "head_block": 64,
        "num_warps": 8,
        "split_policy": "waves",
    }
    assert bench.parse_point("") == {}
    rendered = bench.render_points([{}, *bench.GPU_POINTS[1:3]], tmp_path)
    assert len(rendered) == 3 and all(path.is_file() for _, path in rendered)
    assert len({approach for approach, _ in bench.render_points(bench.GPU_POINTS, tmp_path)}) == len(bench.GPU_POINTS)
    with pytest.raises(SystemExit, match="head_block=48"):
        bench.render_points([{"head_block": 48}], tmp_path)


def test_gpu_points_lead_with_the_defaults_then_the_point_for_every_batch(bench):
    """The list stays short enough for one device call; the points first timed are the default (balanced runs, the
    streamed merge and TMA descriptors since the search of 2026-12-02), the default before it (LARGE per request),
    LARGE falling back to the previous default's sizing where its programs would walk few tiles, then the default
    before 2026-12-01 (the two measured best then: LARGE at B=64, the previous default at B=8). Every point after the
    first keeps the structural axes it was measured with."""
    assert len(bench.GPU_POINTS) <= 18 and bench.GPU_POINTS[0] == {}
    assert bench.GPU_POINTS[1] == {**bench.PER_REQUEST, **bench.LARGE}
    assert bench.GPU_POINTS[2] == {**bench.PER_REQUEST, **bench.LARGE, "few_tiles": "default_point"}
    assert bench.GPU_POINTS[3] == {**bench.PER_REQUEST, **bench.PREVIOUS_DEFAULT}
    assert all(point["split_chunk"] in ("per_request", "capacity") for point in bench.GPU_POINTS[1:])


def test_markdown_shows_failures_and_skips(bench):
    base = {"shape": "h128_b64_l4096", "floor_us": 80.0}
    rows = [
        {**base, "impl": "torch.compile(baseline)", "us": 400.0},
        {**base, "impl": "FlashMLA core (attention only)", "flash_mla_core_us": 125.0},
        {
            **base,
            "impl": "heads<=64",
            "us": 200.0,
            "spread": 0.031,
            "wgmma": True,
            "config": {"num_splits": 1},
            "variants": [{"n_regs": 168, "n_spills": 0}],
        },
        {**base, "impl": "heads<=128", "ok": False, "why": "OutOfResources: shared memory"},
    ]
    table = bench.markdown(rows)
    assert "| h128_b64_l4096 | heads<=64 | 200.0 | 3.1% | 2.00 | 0.40 | 80.0 | yes | 168/0 | 1 |" in table
    assert "OutOfResources: shared memory" in table and "| 125.0 | - | 3.20 |" in table
    assert "best heads<=64 at 200.0 us" in bench.best_lines(rows)


@pytest.mark.skipif(shutil.which("ptxas") is None and not os.environ.get("TRITON_PTXAS_PATH"), reason="no ptxas here")
def test_static_sm90_compiles_points_without_a_gpu(tmp_path):
    """--static-sm90 (its own process: the tests run Triton's interpreter): the default point (64 heads, 8 warps,
    the cache through TMA descriptors: the committed candidate since 2026-12-03) builds Hopper's wgmma and bulk
    tensor copies, the default before 2026-12-01 (16 heads, 4 warps) mma.sync with its loads pipelined (cp.async:
    the divisibility hints of a real launch are given)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = _driver(
        [
            "--static-sm90",
            "128",
            "--out",
            str(tmp_path),
            "--point",
            "head_block=16,token_block=32,num_warps=4,programs_per_sm=2,split_policy=programs,split_chunk=per_request,"
            "side_kernels=batch_blocks,kv_loads=pointers",
            "--point",
            "",
        ],
        env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    previous, default = (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    assert previous.get("wgmma") is False and default.get("wgmma") is True, (previous, default)
    assert previous["cp_async"] > 0 and previous["tma_loads"] == 0 and default["tma_loads"] > 0
    assert (previous["BLOCK_H"], default["BLOCK_H"], default["num_warps"]) == (16, 64, 8)
    assert isinstance(default.get("n_regs"), int), default
    assert (tmp_path / "mla-template-sm90-static.md").is_file()


@pytest.mark.skipif(shutil.which("ptxas") is None and not os.environ.get("TRITON_PTXAS_PATH"), reason="no ptxas here")
def test_static_sm90_compiles_the_paged_attention_kernel_of_the_paged_template(tmp_path):
    """--templates names the paged space: its default point's attention kernel (the block table's lookups inside)
    builds Hopper's wgmma too, at the same block sizes."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = _driver(
        [
            "--static-sm90",
            "128",
            "--out",
            str(tmp_path),
            "--templates",
            str(REPO / "tasks" / "mla_attention_paged" / "templates"),
            "--point",
            "",
        ],
        env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    assert row.get("wgmma") is True and (row["BLOCK_H"], row["BLOCK_N"]) == (64, 64), row
    assert "def _paged_attention_kernel" in (tmp_path / "points" / "point_00.py").read_text()  # the paged render


def test_the_timed_bench_refuses_another_templates_folder(tmp_path):
    done = _driver(
        ["--cpu", "--out", str(tmp_path), "--templates", str(REPO / "tasks" / "mla_attention_paged" / "templates")],
        dict(os.environ),
        timeout=120,
    )
    assert done.returncode != 0 and "--templates: only with --static-sm90" in done.stderr


def test_timed_rounds_interleave_and_take_the_median(bench, monkeypatch):
    """Every implementation is timed once per round, in turn, and its row gets the median and the spread."""
    order: list[str] = []
    times = {"a": iter([10.0, 30.0, 20.0]), "b": iter([5.0, 5.0, 6.0])}

    def fake_time(call, clock, host_ms):
        assert clock is None and host_ms is None  # the interpreter's rehearsal: one wall-clock call
        order.append(call)
        return next(times[call])

    monkeypatch.setattr(bench, "time_us", fake_time)
    row_a, row_b = {}, {}
    bench.timed_rounds([(row_a, "us", "a"), (row_b, "flash_mla_core_us", "b")], 3, clock=None)
    assert order == ["a", "b", "a", "b", "a", "b"]
    assert row_a["us"] == 20.0 and row_a["rounds_us"] == [10.0, 30.0, 20.0] and row_a["spread"] == 1.0
    assert row_b["flash_mla_core_us"] == 5.0 and row_b["spread"] == 0.2
    assert "host_launch_us" not in row_a and "late_fractions" not in row_a


class _RecordingClock:
    """Stands for the gate's Clock: a host launch time per call, and a time and a late fraction per round."""

    def __init__(self):
        self.late_fractions: list[float] = []
        self.events: list[tuple] = []

    def host_ms(self, call):
        self.events.append(("host", call))
        return {"a": 0.05, "b": None}[call]  # b waits for the GPU: no spin can run ahead of it

    def bench(self, call, host_ms):
        self.events.append(("bench", call, host_ms))
        self.late_fractions.append({"a": 0.02, "b": 0.0}[call])
        return {"a": 0.040, "b": 0.125}[call]


def test_on_the_gpu_each_round_is_the_gates_clock_behind_its_own_host_launch_time(bench):
    """The whole step is timed by the gate's clock, not do_bench (which timed the host's launches at small batch):
    each implementation's host launch time is measured once, before the rounds, and sizes every one of its rounds;
    the row keeps it and each round's fraction of late calls dropped."""
    clock = _RecordingClock()
    row_a, row_b = {}, {}
    bench.timed_rounds([(row_a, "us", "a"), (row_b, "flash_mla_core_us", "b")], 2, clock)
    assert clock.events == [
        ("host", "a"),
        ("host", "b"),
        ("bench", "a", 0.05),
        ("bench", "b", None),
        ("bench", "a", 0.05),
        ("bench", "b", None),
    ]
    assert row_a["rounds_us"] == [40.0, 40.0] and row_a["us"] == 40.0 and row_a["host_launch_us"] == 50.0
    assert row_a["late_fractions"] == [0.02, 0.02]
    assert row_b["flash_mla_core_us"] == 125.0 and row_b["host_launch_us"] is None and row_b["late_fractions"] == [0.0, 0.0]


def test_kernel_lines_list_each_points_kernels(bench):
    rows = [
        {"shape": "s", "impl": "p", "kernels_us": {"_split_kv_attention_kernel(...)": 101.25, "_merge": 9.0}},
        {"shape": "s", "impl": "q"},
    ]
    text = bench.kernel_lines(rows)
    assert "- s | p: _split_kv_attention_kernel 101.2, _merge 9.0" in text and "| q:" not in text
    assert bench.kernel_lines([{"shape": "s", "impl": "q"}]) == ""


def test_candidate_files_are_timed_beside_the_points_by_their_file_name(bench, tmp_path):
    before = tmp_path / "triton_mla_before.py"
    before.write_text("def run(inputs, outputs, params):\n    pass\n")
    args = bench.parse_args(["--out", str(tmp_path), "--candidate", str(before)])
    assert bench.candidate_points(args.candidate) == [("file triton_mla_before.py", before.resolve())]
    with pytest.raises(SystemExit, match="no such file: .*missing.py"):
        bench.candidate_points([tmp_path / "missing.py"])
