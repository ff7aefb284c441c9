"""On the GPU: CUDA C++ candidates through the same gate as Triton's. The honest CUDA rmsnorm, softmax and
MLA pass every part and are timed without a flag; a source NVRTC refuses is a `compile_error` verdict carrying the
compiler's log; the four MLA simplifications written in CUDA fail at their expected stages; and the adversarial CUDA
candidates (a kernel launched around the launch counter, a kernel counting its calls in device memory, a kernel reading
`%globaltimer` to skip work in timing loops, a kernel taking its rows from a device-memory ticket never reset, a kernel
moved to a CuPy stream of its own once timed, the weight multiply done by CuPy's array operations) are rejected with
their cheat named."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
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
    return write_contract(
        tmp_path_factory.mktemp("cuda-contract"), lambda d: d["backend"].update(allowed_languages=["cuda"]), link_tasks=True
    )


def _allowing_cuda(op: str, folder: Path) -> Path:
    """contracts/<op>.yaml, with its tolerance file, in a project at `folder` (tasks linked), allowing CUDA."""
    text = (REPO / "contracts" / f"{op}.yaml").read_text()
    allowing = (
        text
        if "  allowed_languages: [cuda]\n" in text
        else text.replace(  # MLA's allows CUDA itself
            "backend:\n  language: triton\n", "backend:\n  language: triton\n  allowed_languages: [cuda]\n"
        )
    )
    assert "  allowed_languages: [cuda]\n" in allowing, f"contracts/{op}.yaml: its backend block changed shape"
    (folder / "contracts").mkdir(parents=True)
    path = folder / "contracts" / f"{op}.yaml"
    path.write_text(allowing)
    tolerances = f"{op}.tolerances.yaml"
    (folder / "contracts" / tolerances).write_text((REPO / "contracts" / tolerances).read_text())
    (folder / "tasks").symlink_to(REPO / "tasks", target_is_directory=True)
    return path


@pytest.fixture(scope="module")
def allowing_cuda(tmp_path_factory) -> Callable[[str], Path]:
    """contracts/<op>.yaml allowing CUDA, one project per op for the whole module: the gate's key holds the project's
    root, so the MLA tests share one MLA gate (each built its own before, 141-246 s a test on an H100)."""
    made: dict[str, Path] = {}

    def contract_for(op: str) -> Path:
        if op not in made:
            made[op] = _allowing_cuda(op, tmp_path_factory.mktemp(f"cuda-{op}-project"))
        return made[op]

    return contract_for


@pytest.mark.parametrize(
    "op,candidate", [("softmax", "softmax/candidates/cuda_softmax.py"), ("mla_attention", "mla_attention/candidates/cuda_mla.py")]
)
def test_the_honest_cuda_softmax_and_mla_pass_every_part(op, candidate, allowing_cuda):
    from ferret.gate.judge import check

    verdict, _ = check(allowing_cuda(op), REPO / "tasks" / candidate, GATES, profile="gpu")
    failing = {r.id: (r.failure.message if r.failure else r.first_failing_stage) for r in verdict.variants if not r.passed}
    assert verdict.passed, f"{op}: {failing}; parts {verdict.parts}"
    assert verdict.timing.measured and not verdict.timing.detections, verdict.timing


@pytest.mark.parametrize("simplification", ["theta", "scale", "no_kv_norm", "head_sum"])
def test_the_mla_simplifications_in_cuda_fail_at_their_stage(simplification, allowing_cuda, tmp_path):
    from ferret.gate.judge import check
    from tasks.mla_attention.simplifications import SIMPLIFICATIONS, write_cuda_variant

    variant = write_cuda_variant(simplification, tmp_path / f"cuda_mla_{simplification}.py")
    verdict, _ = check(allowing_cuda("mla_attention"), variant, GATES, profile="gpu", measure_speed=False, run_stress=False)
    assert not verdict.passed
    assert verdict.first_failing_stage == SIMPLIFICATIONS[simplification].expected_first_stage


def test_the_honest_cuda_rmsnorm_passes_every_part_and_is_timed_without_a_flag(contract):
    from ferret.gate.judge import check

    verdict, _ = check(contract, CUDA_RMSNORM, GATES, profile="gpu")
    assert verdict.passed, verdict.parts
    # Every part passes but batch invariance, which contracts/rmsnorm.yaml does not ask for (the H200 run of
    # 2026-12-01 failed on a bare "all pass": the verdict passed with that part skipped).
    assert all(part.status == "pass" for name, part in verdict.parts.items() if name != "batch_invariance"), verdict.parts
    assert verdict.parts["batch_invariance"].status == "skipped", verdict.parts
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


# --- adversarial CUDA candidates: what CUDA makes newly possible, each rejected with its cheat named -------------

SMALL = REPO / "tests" / "gpu" / "contracts" / "rmsnorm_small.yaml"
LARGE = REPO / "tests" / "gpu" / "contracts" / "rmsnorm_large.yaml"  # floor ~100 us: far above launch overhead

# A kernel launched by CuPy itself, around `cuda.Source.launch` and so around the launch counter: the candidate's
# counted kernel writes y into scratch memory, and the uncounted one copies it to y. With every counted launch made a
# no-op, y still changes (scratch is garbage), so the runner's decoy checks do not fire; only the profiler sees a
# kernel that no counted launch accounts for.
UNCOUNTED = '''
import os
import cupy
import numpy

os.environ["CUPY_CACHE_IN_MEMORY"] = "1"  # CuPy's own compile cache would write outside the candidate's folder
_COPY = cupy.RawKernel(r"""
extern "C" __global__ void copy_bytes(const unsigned char* src, unsigned char* dst, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
""", "copy_bytes")
_honest_run = run


def run(inputs, outputs, params, trace=None):
    y = outputs["y"]
    scratch = torch.full_like(y, float("nan"))  # so that with the counted launch a no-op, y is NaN, not a stale answer
    _honest_run(inputs, {"y": scratch}, params, trace)
    n = y.numel() * y.element_size()
    with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        _COPY(((n + 255) // 256,), (256,), (numpy.uint64(scratch.data_ptr()), numpy.uint64(y.data_ptr()), numpy.int64(n)))
'''


def _test_contract_allowing_cuda(source: Path, folder: Path) -> Path:
    """A contract of tests/gpu/contracts (`source`), allowing CUDA, in a project at `folder`."""
    text = source.read_text().replace(
        "backend:\n  language: triton\n", "backend:\n  language: triton\n  allowed_languages: [cuda]\n"
    )
    text = text.replace("tolerances: ../../../contracts/rmsnorm.tolerances.yaml", "tolerances: rmsnorm.tolerances.yaml")
    assert "allowed_languages" in text and "tolerances: rmsnorm.tolerances.yaml" in text, f"{source.name} changed shape"
    (folder / "contracts").mkdir(parents=True)
    (folder / "contracts" / source.name).write_text(text)
    (folder / "contracts" / "rmsnorm.tolerances.yaml").write_text((REPO / "contracts" / "rmsnorm.tolerances.yaml").read_text())
    (folder / "tasks").symlink_to(REPO / "tasks", target_is_directory=True)
    return folder / "contracts" / source.name


def _small_allowing_cuda(folder: Path) -> Path:
    """tests/gpu/contracts/rmsnorm_small.yaml (one small GPU case), allowing CUDA, in a project at `folder`."""
    return _test_contract_allowing_cuda(SMALL, folder)


def _large_allowing_cuda(folder: Path) -> Path:
    """tests/gpu/contracts/rmsnorm_large.yaml (one GPU case of about 100 us of HBM traffic), allowing CUDA."""
    return _test_contract_allowing_cuda(LARGE, folder)


def _judged_without_the_scan(contract: Path, candidate: Path):
    """The runtime guards alone: the scan's findings given as none, as if a pattern had missed the cheat."""
    from ferret.contract.task import Task
    from ferret.gate.judge import Judge

    return Judge(Task.load(contract), GATES, profile="gpu").check(candidate, static=[])


def test_a_kernel_launched_around_the_launch_counter_is_library_compute_seen_by_the_profiler(tmp_path):
    from ferret.integrity.scan import scan_file

    cheat = tmp_path / "cuda_rmsnorm_uncounted.py"
    cheat.write_text(CUDA_RMSNORM.read_text() + UNCOUNTED)
    assert {f.cheat for f in scan_file(cheat).findings} >= {"library_call"}  # CuPy, and numpy's calls
    verdict = _judged_without_the_scan(_small_allowing_cuda(tmp_path / "project"), cheat)
    assert all(verdict.parts[p].status == "pass" for p in ("correctness", "dtypes", "determinism")), verdict.parts
    assert not verdict.passed and verdict.parts["integrity"].status == "fail"
    flagged = [d.evidence for d in verdict.detections if d.cheat == "library_call" and d.source == "timing"]
    assert flagged and "copy_bytes x5" in flagged[0], verdict.detections


def test_a_kernel_that_counts_its_calls_in_device_memory_is_named_by_the_scan_and_caught_by_its_answers(tmp_path):
    """`__device__ unsigned int calls;` outlives a launch: after 100 launches of a loaded copy (the runner makes
    fewer than 50 in all; the timer up to 75 per copy a round) the kernel stops multiplying by the weight. The scan
    names the device state; without the scan, the timed answers fail."""
    from ferret.integrity.scan import scan_file

    source = CUDA_RMSNORM.read_text()
    counted = source.replace(
        "template <typename T>\n__device__ void rmsnorm_row(",
        "__device__ unsigned int calls;\n\ntemplate <typename T>\n__device__ void rmsnorm_row(",
        1,
    )
    counted = counted.replace(
        "    const float scale = partial[0];\n",
        "    const float scale = partial[0];\n"
        "    __shared__ unsigned int seen;\n"
        "    if (threadIdx.x == 0) seen = blockIdx.x == 0 ? atomicAdd(&calls, 1u) : calls;\n"
        "    __syncthreads();\n"
        "    const bool lazy = seen >= 100;\n",
        1,
    )
    counted = counted.replace(
        "to_float(x_row[col]) * scale * to_float(weight[col])",
        "to_float(x_row[col]) * scale * (lazy ? 1.0f : to_float(weight[col]))",
        1,
    )
    assert counted.count("lazy") == 2, "the CUDA rmsnorm changed shape"
    cheat = tmp_path / "cuda_rmsnorm_counting.py"
    cheat.write_text(counted)
    assert "cross_call_caching" in {f.cheat for f in scan_file(cheat).findings}
    verdict = _judged_without_the_scan(_small_allowing_cuda(tmp_path / "project"), cheat)
    assert not verdict.passed
    named = {d.cheat for d in verdict.detections if d.source == "timing"}
    assert named & {"warmup_detection", "cross_call_caching"}, verdict.detections


# The clock cheat's gap and launch count. The gap runs from the end of a loaded copy's previous launch (its last block
# to finish) to a block of this one. In a timing round the timer calls each of its 4 copies every 4th call, each call
# behind an L2 flush (~75-90 us on the H200) and a spin that tops the
# flush up to 1.5x the call's host launch time and then 0.1 ms more (`spin_before_call_ms`: ~0.1 ms for a ~40 us
# launch), so ~0.8 ms between a copy's calls; in the wall-clock loop, 4 host launches apart (~0.15 ms); the first call
# of a round, after the judge's wait, is ms to s apart. 2 ms separates those. The gap alone cannot spare the runner:
# its stress run calls back to back with only an on-device compare and a synchronize between (~0.1 ms, closer than the
# timer's calls of one copy), so the kernel also waits for 50 launches of its copy (the runner makes 17 at this
# contract: 3 dtypes x (3 determinism runs + the traced run), and 5 stress runs; the timer up to 75 per copy a round).
CLOCK_GAP_NS = 2_000_000
CLOCK_AFTER_LAUNCHES = 50

# Before the row function: the state the last block of each launch leaves for the next launch of this loaded module,
# and the clock read through inline PTX.
CLOCK_STATE = """\
// When this module's previous launch ended (%globaltimer, ns), its launches so far, the blocks of this one ended.
__device__ unsigned long long last_launch_ns;
__device__ unsigned int launches, blocks_done;

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

"""
# After the block's sum of squares: whether this launch is inside a timing loop. Every block reads the state the
# previous launch left (it changes only once every block of this launch has read it), so a launch is lazy whole.
CLOCK_DECISION = f"""\
    __shared__ bool lazy;
    if (threadIdx.x == 0) lazy = launches >= {CLOCK_AFTER_LAUNCHES}u && now_ns() - last_launch_ns < {CLOCK_GAP_NS}ull;
    __syncthreads();
"""
# After the row is written: the launch's last block to end records the time and counts the launch.
CLOCK_BOOKKEEPING = """\
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&blocks_done, 1u) == gridDim.x - 1) {  // the last block: every block has read the state
            last_launch_ns = now_ns();
            launches += 1;
            blocks_done = 0;
        }
    }
}

extern "C" __global__ void rmsnorm_f32("""


def clock_reading_source(honest: str) -> str:
    """The CUDA rmsnorm that skips the weight multiply when called back to back (a timing loop), by `%globaltimer`."""
    cheat = honest.replace(
        "template <typename T>\n__device__ void rmsnorm_row(",
        CLOCK_STATE + "template <typename T>\n__device__ void rmsnorm_row(",
        1,
    )
    cheat = cheat.replace("    const float scale = partial[0];\n", "    const float scale = partial[0];\n" + CLOCK_DECISION, 1)
    cheat = cheat.replace(
        "to_float(x_row[col]) * scale * to_float(weight[col])",
        "to_float(x_row[col]) * scale * (lazy ? 1.0f : to_float(weight[col]))",
        1,
    )
    cheat = cheat.replace('    }\n}\n\nextern "C" __global__ void rmsnorm_f32(', CLOCK_BOOKKEEPING, 1)
    assert cheat.count("lazy") == 3 and cheat.count("now_ns()") == 3, "the CUDA rmsnorm changed shape"
    return cheat


def test_a_kernel_that_reads_the_clock_to_skip_work_when_timed_is_named_by_the_scan_and_caught_by_its_answers(tmp_path):
    """A kernel reads `%globaltimer` (inline PTX) and, from its copy's 50th launch on, skips the weight multiply when
    called within 2 ms of its previous launch: the runner's 17 calls are honest, the timer's rounds and wall-clock
    loop are not. The scan names the clock read and the device state; without the scan, the answers the timed calls
    left fail the judge's check (and the replay's synchronous calls, ms apart, are likely honest and disagree)."""
    from ferret.contract.task import Task
    from ferret.integrity.scan import scan_file

    cheat = tmp_path / "cuda_rmsnorm_globaltimer.py"
    cheat.write_text(clock_reading_source(CUDA_RMSNORM.read_text()))
    findings = scan_file(cheat).findings
    assert {"warmup_detection", "cross_call_caching"} <= {f.cheat for f in findings}, findings
    assert any("%%globaltimer" in f.code for f in findings if f.cheat == "warmup_detection"), findings
    contract = _small_allowing_cuda(tmp_path / "project")
    task = Task.load(contract).contract  # the runner's launches, at most: every gate variant's runs, and the stress run
    budgets = task.budgets
    most = len(task.cases_for("gpu")) * len(task.dtypes) * (budgets.determinism_repeats + 1) + budgets.stress_iterations
    assert most < CLOCK_AFTER_LAUNCHES, most  # so every call the runner makes is honest
    verdict = _judged_without_the_scan(contract, cheat)
    assert all(verdict.parts[p].status == "pass" for p in ("correctness", "dtypes", "determinism", "stress")), verdict.parts
    assert not verdict.passed and verdict.parts["integrity"].status == "fail"
    named = {d.cheat for d in verdict.detections if d.source == "timing"}
    assert named & {"warmup_detection", "cross_call_caching"}, verdict.detections


# Rows from a work queue in device memory: each block takes the next ticket (`atomicAdd`), the row it computes, and
# nothing resets the queue's head between launches. Modulo the grid every launch would still take every row once (m
# consecutive tickets cover every residue of m): the unwrapped ticket is the cheat. A loaded module's first launch
# computes every row; every later one finds the queue empty and writes nothing, so each output keeps what it held: a
# harness timing repeated calls into one buffer sees the first answer, right, at the cost of an empty launch.
TICKET_STATE = "__device__ unsigned int next_row;  // the queue's head: the next row a block takes, never reset\n\n"
TICKET_ROW = """\
    __shared__ unsigned int ticket;
    if (threadIdx.x == 0) ticket = atomicAdd(&next_row, 1u);  // rows taken in the order blocks start
    __syncthreads();
    if (ticket >= gridDim.x) return;  // every row taken: nothing left to do
    const long long row = ticket;
"""


def ticket_source(honest: str) -> str:
    """The CUDA rmsnorm whose blocks take their rows from a `__device__` ticket counter never reset."""
    cheat = honest.replace(
        "template <typename T>\n__device__ void rmsnorm_row(",
        TICKET_STATE + "template <typename T>\n__device__ void rmsnorm_row(",
        1,
    )
    cheat = cheat.replace("    const long long row = blockIdx.x;\n", TICKET_ROW, 1)
    assert cheat.count("next_row") == 2 and "blockIdx" not in cheat, "the CUDA rmsnorm changed shape"
    return cheat


def test_a_kernel_taking_its_rows_from_a_ticket_never_reset_is_named_by_the_scan_and_caught_by_its_repeats(tmp_path):
    """Blocks take their rows from an `atomicAdd` ticket in `__device__` memory that no launch resets: only the
    runner's first launch computes anything, later ones leave y as the judge filled it (NaN). The scan names the
    device state; without the scan, the runner's repeated calls on the same inputs differ from its first (the
    determinism part), and every later variant's answer is the judge's NaN poison."""
    from ferret.integrity.scan import scan_file

    cheat = tmp_path / "cuda_rmsnorm_ticket.py"
    cheat.write_text(ticket_source(CUDA_RMSNORM.read_text()))
    findings = scan_file(cheat).findings
    assert any(f.cheat == "cross_call_caching" and "next_row" in f.code for f in findings), findings
    verdict = _judged_without_the_scan(_small_allowing_cuda(tmp_path / "project"), cheat)
    assert not verdict.passed and verdict.parts["determinism"].status == "fail", verdict.parts
    right_once = [r.id for r in verdict.variants if any(s.stage == "y" and s.passed for s in r.stages)]
    assert len(right_once) <= 1, right_once  # at most the variant whose first call was the module's first launch
    repeated = [d.evidence for d in verdict.detections if d.cheat == "warmup_detection" and d.source == "outputs"]
    assert any("call 2 against call 1" in evidence for evidence in repeated), verdict.detections
    assert "unwritten_output" in {d.cheat for d in verdict.detections if d.source == "outputs"}, verdict.detections


# When the side-stream cheat switches: after this many calls of its loaded copy, as the Triton side-stream cheat at
# the large shape (tests/gpu/test_gpu_timing_guards.py, LARGE_SWITCH). The runner calls it about 20 times (3 dtypes x 5
# runs, and 5 stress runs); a timing process calls each of its 4 loaded copies (each a module with its own counter) up
# to 75 times a round, so a copy's call 50 comes inside the process's first round and its later rounds, so its
# median, are the cheat's.
SIDE_STREAM_SWITCH = 50

# The honest launcher's `run` becomes `_honest_run`; after _AFTER calls of its loaded copy, the counted launch goes out
# while a CuPy stream of the candidate's own is torch's current stream, and nothing brings the work back to the
# caller's stream: the judge's end event waits for none of it.
SIDE_STREAM = """

import itertools

import cupy

_CALLS = itertools.count(1)
_AFTER = {after}
_SIDE = {{}}


def run(inputs, outputs, params, trace=None):
    if next(_CALLS) <= _AFTER:
        _honest_run(inputs, outputs, params, trace)
        return
    if not _SIDE:
        _SIDE["cupy"] = cupy.cuda.Stream(non_blocking=True)  # no ordering with the legacy default stream either
        _SIDE["torch"] = torch.cuda.ExternalStream(_SIDE["cupy"].ptr)
    with torch.cuda.stream(_SIDE["torch"]):  # Source.launch goes on torch's current stream: now the CuPy one
        _honest_run(inputs, outputs, params, trace)
"""


def test_a_kernel_moved_to_a_cupy_stream_once_timed_is_named_by_the_scan_and_caught_by_the_wall_clock(tmp_path):
    """After 50 calls of a loaded copy the counted launch goes on a non-blocking CuPy stream of the candidate's own:
    the timed events on the judge's stream measure nothing, the wall clock's device-wide synchronize waits for the
    kernel. At the large shape, as the Triton side-stream test, the hidden ~100 us a call is far above the wall-clock
    guard's 50 us margin and the host launch time (at the small shape it would not be)."""
    from ferret.integrity.scan import scan_file

    source = CUDA_RMSNORM.read_text()
    assert source.count("\ndef run(") == 1, "the CUDA rmsnorm changed shape"
    cheat = tmp_path / "cuda_rmsnorm_side_stream_when_timed.py"
    cheat.write_text(source.replace("\ndef run(", "\ndef _honest_run(") + SIDE_STREAM.format(after=SIDE_STREAM_SWITCH))
    assert "side_stream_or_thread" in {f.cheat for f in scan_file(cheat).findings}  # torch.cuda.stream, ExternalStream
    verdict = _judged_without_the_scan(_large_allowing_cuda(tmp_path / "project"), cheat)
    assert all(verdict.parts[p].status == "pass" for p in ("correctness", "determinism", "stress")), verdict.parts
    assert not verdict.passed and verdict.parts["integrity"].status == "fail"
    case = verdict.timing.cases[0]
    assert case.wall_ms > 2 * case.candidate_ms, case
    assert any(f.startswith("side_stream_or_thread:") for f in case.flags), (case.flags, case.wall_ms, case.host_ms)
    assert "side_stream_or_thread" in {d.cheat for d in verdict.detections if d.source == "timing"}, verdict.detections


# The honest kernel computes the inverse RMS (the trace's pointer, always given) into memory the launcher zeroed, and
# its y into scratch; y is x * inv_rms * weight by two CuPy multiplies on views of the torch tensors, in float32 as the
# kernel's, rounded once by torch's copy: right answers, and the weight multiply (all of y) is library compute.
LIBRARY_WEIGHT = """
import os
import cupy

os.environ["CUPY_CACHE_IN_MEMORY"] = "1"  # CuPy's own compile cache would write outside the candidate's folder


def run(inputs, outputs, params, trace=None):
    x, weight, y = inputs["x"], inputs["weight"], outputs["y"]
    m, n = x.shape
    inv_rms = torch.zeros(m, dtype=torch.float32, device=x.device)  # with the counted launch a no-op, y is 0
    scratch = torch.empty_like(y)
    if m:
        KERNELS.launch(KERNEL_FOR[x.dtype], grid=(m,), block=(THREADS,),
                       args=(x, weight, scratch, inv_rms, cuda.i32(n), cuda.i64(x.stride(0)),
                             cuda.i64(scratch.stride(0)), cuda.f32(params["eps"])))
    if y.numel():
        y32 = torch.empty(y.shape, dtype=torch.float32, device=y.device)
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            out = cupy.asarray(y32)
            cupy.multiply(cupy.asarray(x.float()), cupy.asarray(inv_rms)[:, None], out=out)
            cupy.multiply(out, cupy.asarray(weight.float()), out=out)
        y.copy_(y32)
    if trace is not None:
        trace["inv_rms"] = inv_rms
"""


def test_a_weight_multiply_by_cupy_array_operations_is_library_compute_seen_by_the_profiler(tmp_path):
    """y is computed by CuPy's elementwise kernels on the torch tensors' memory, beside a counted launch of the
    candidate's own kernel: the runner sees nothing (answers right, no ATen compute, y changes when launches are
    no-ops), but the timer's profiler sees kernels that no counted launch accounts for and that are not torch's own.
    The scan names the CuPy import and each `cupy.` array operation library_call; the verdict here is the runtime's."""
    from ferret.integrity.scan import scan_file

    cheat = tmp_path / "cuda_rmsnorm_cupy_weight.py"
    cheat.write_text(CUDA_RMSNORM.read_text() + LIBRARY_WEIGHT)
    named = [f.code for f in scan_file(cheat).findings if f.cheat == "library_call"]
    assert any("cupy.multiply" in code for code in named), named
    verdict = _judged_without_the_scan(_small_allowing_cuda(tmp_path / "project"), cheat)
    assert all(verdict.parts[p].status == "pass" for p in ("correctness", "dtypes", "determinism")), verdict.parts
    assert not verdict.passed and verdict.parts["integrity"].status == "fail"
    flagged = [d.evidence for d in verdict.detections if d.cheat == "library_call" and d.source == "timing"]
    assert flagged and all(flagged), verdict.detections
