"""The CUDA backend's judge side without a GPU: NVRTC compiles (CuPy's binding, no driver needed), its refusals
carry the compiler's log, the compiled code is cached by everything that decides it, kernel arguments are typed,
and a machine without CuPy or NVRTC is told what to install."""

from __future__ import annotations

import sys

import numpy
import pytest
import torch

from ferret.backends import cuda
from ferret.errors import BackendUnavailable, CudaCompileError

SCALE = r'''
extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
'''


def test_nvrtc_compiles_for_hopper_without_a_gpu():
    cubin = cuda.compile_cubin(SCALE, ["-std=c++17"], "sm_90")
    assert cubin[:4] == b"\x7fELF" and b"scale" in cubin


def test_a_refused_source_raises_with_the_compilers_log_naming_the_line():
    with pytest.raises(CudaCompileError) as info:
        cuda.compile_cubin(SCALE.replace("a * x[i];", "a * x[i]"), ["-std=c++17"], "sm_90", name="launcher.cu")
    assert 'launcher.cu(5): error: expected a ";"' in info.value.log
    assert "-arch=sm_90" in info.value.flags and "NVRTC refused" in str(info.value)


def test_contract_flags_become_nvrtc_options_that_nvrtc_takes():
    flags = cuda.flags_from_contract({"std": "c++17", "use_fast_math": True, "maxrregcount": 128, "fmad": "false",
                                      "G": False})
    assert flags == ["--fmad=false", "--maxrregcount=128", "--std=c++17", "--use_fast_math"]
    assert cuda.compile_cubin(SCALE, flags, "sm_90")[:4] == b"\x7fELF"
    assert cuda.flags_from_contract({}) == list(cuda.DEFAULT_FLAGS)


def test_compiled_code_is_cached_by_source_flags_and_arch(tmp_path, monkeypatch):
    first = cuda.cached_cubin(SCALE, ["-std=c++17"], "sm_90", tmp_path)
    assert len(list(tmp_path.glob("*.cubin"))) == 1

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled again although the cache holds it")

    real_compile = cuda.compile_cubin
    monkeypatch.setattr(cuda, "compile_cubin", no_compiling)
    assert cuda.cached_cubin(SCALE, ["-std=c++17"], "sm_90", tmp_path) == first
    monkeypatch.setattr(cuda, "compile_cubin", real_compile)
    cuda.cached_cubin(SCALE, ["-std=c++17", "-use_fast_math"], "sm_90", tmp_path)
    cuda.cached_cubin(SCALE, ["-std=c++17"], "sm_80", tmp_path)
    assert len(list(tmp_path.glob("*.cubin"))) == 3, "other flags or another architecture: other machine code"


def test_the_source_compiles_with_the_flags_and_cache_the_judge_set(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setenv(cuda.FLAGS_ENV, '["-std=c++17", "-maxrregcount=64"]')
    monkeypatch.setenv(cuda.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(cuda, "cached_cubin", lambda *args: seen.append(args) or b"")
    source = cuda.Source(SCALE)
    source.cubin()
    assert seen == [(source.compiled_code, ["-std=c++17", "-maxrregcount=64"], cuda.DEFAULT_ARCH, tmp_path)]
    assert source.compiled_code == f'#line {source.line} "test_cuda.py"\n{SCALE}'  # messages name this file


# One warpgroup MMA fence: an instruction of Hopper's arch-specific target only.
WGMMA_FENCE = r'''
extern "C" __global__ void fenced(float* y) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    y[threadIdx.x] = 1.0f;
}
'''


def test_hopper_candidates_compile_for_its_arch_specific_target_where_warpgroup_mma_is():
    """A GPU of compute capability 9.0 gets sm_90a (the plain sm_90 target refuses wgmma, which a Hopper kernel
    needs for its tensor cores); other GPUs their plain target. Compiling on the CPU targets the H200 the same way."""
    assert cuda.device_arch(9, 0) == "sm_90a" == cuda.DEFAULT_ARCH
    assert cuda.device_arch(8, 0) == "sm_80" and cuda.device_arch(10, 0) == "sm_100"
    assert cuda.compile_cubin(WGMMA_FENCE, ["-std=c++17"], cuda.DEFAULT_ARCH)[:4] == b"\x7fELF"
    with pytest.raises(CudaCompileError, match="wgmma"):
        cuda.compile_cubin(WGMMA_FENCE, ["-std=c++17"], "sm_90")


class _FakeStream:
    def __init__(self, handle):
        self.cuda_stream = handle


def test_a_launch_past_48_kib_of_dynamic_shared_memory_raises_the_kernels_limit_once(monkeypatch):
    """CUDA refuses a launch asking for more dynamic shared memory than the kernel's limit (48 KiB unless raised);
    the backend raises it to what the launch asks, once per kernel and size, and never for a small launch."""
    import cupy
    from cupy.cuda import driver

    raised, launched = [], []

    class Function:
        ptr = 1234

        def __call__(self, grid, block, args, shared_mem, stream):
            launched.append(shared_mem)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: _FakeStream(0))
    monkeypatch.setattr(cupy.cuda, "ExternalStream", _FakeStream)
    monkeypatch.setattr(driver, "funcSetAttribute", lambda *args: raised.append(args))
    source = cuda.Source(SCALE)
    monkeypatch.setattr(source, "_function", lambda kernel: Function())
    for shared in (1024, 200 * 1024, 200 * 1024, 100 * 1024, 220 * 1024):
        source.launch("scale", (1,), (32,), [], shared_mem=shared)
    attribute = driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert raised == [(1234, attribute, 200 * 1024), (1234, attribute, 220 * 1024)]
    assert launched == [1024, 200 * 1024, 200 * 1024, 100 * 1024, 220 * 1024]


def test_kernel_arguments_are_typed():
    assert [type(a) for a in cuda.kernel_args([cuda.i32(3), cuda.i64(4), cuda.f32(0.5)])] == [
        numpy.int32, numpy.int64, numpy.float32]
    with pytest.raises(TypeError, match=r"kernel argument 1: int; pass a tensor, or a number as cuda.i32"):
        cuda.kernel_args([cuda.i32(1), 7])
    with pytest.raises(TypeError, match="kernel argument 0: a tensor on cpu, not on the GPU"):
        cuda.kernel_args([torch.zeros(2)])


def test_without_a_gpu_a_launch_says_so():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(BackendUnavailable, match="runs on a GPU"):
        cuda.Source(SCALE).launch("scale", (1,), (32,), [])


def test_a_machine_without_cupy_is_told_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs", None)
    monkeypatch.delitem(sys.modules, "cupy_backends.cuda.libs.nvrtc", raising=False)
    with pytest.raises(BackendUnavailable, match=r"pip install 'ferret\[cuda\]' \(cupy-cuda13x and nvidia-cuda-nvrtc"):
        cuda.compile_cubin(SCALE, [], "sm_90")


def test_cuda_launches_are_counted_by_kernel_and_can_be_made_no_ops(monkeypatch):
    """The runner's launch count (a candidate that launches nothing is a decoy) and its no-op run (outputs show
    what the kernels contributed) hold for CUDA candidates as for Triton's."""
    from ferret.sandbox.watch import LaunchRecorder

    _restore_launchers_after(monkeypatch)
    ran = []
    monkeypatch.setattr(cuda.Source, "launch", lambda self, kernel, *args, **kwargs: ran.append(kernel))
    recorder = LaunchRecorder()
    source = cuda.Source(SCALE)
    source.launch("scale", (1,), (32,), [])
    recorder.noop = True
    source.launch("scale", (1,), (32,), [])
    assert recorder.counts == {"scale": 2} and ran == ["scale"]
    assert recorder.intact() == []
    monkeypatch.setattr(cuda.Source, "launch", lambda *args, **kwargs: None)  # replaced by a candidate, say
    assert recorder.intact() == ["cuda.Source.launch"]


def test_a_launch_that_raised_is_not_counted(monkeypatch):
    """A launch that raised (and was caught) launched nothing: were it counted, it could stand in for a library's
    kernel that ran without a counted launch (`guards.foreign_kernels`)."""
    from ferret.sandbox.watch import LaunchRecorder

    _restore_launchers_after(monkeypatch)

    def failing(self, kernel, *args, **kwargs):
        raise RuntimeError("CUDA_ERROR_INVALID_VALUE: a grid of zero blocks")

    monkeypatch.setattr(cuda.Source, "launch", failing)
    recorder = LaunchRecorder()
    with pytest.raises(RuntimeError):
        cuda.Source(SCALE).launch("scale", (0,), (32,), [])
    assert recorder.counts == {}


def test_the_backend_answers_whether_tensors_are_aligned_for_vector_loads():
    base = torch.zeros(64, dtype=torch.float32)
    assert cuda.aligned(base, base[4:], to=16) and not cuda.aligned(base, base[1:], to=16)


def _restore_launchers_after(monkeypatch) -> None:
    """A LaunchRecorder wraps Triton's launch entry points for the life of the process (the runner's is one process
    per candidate); in a test process they are put back at teardown, or a no-op recorder would silence every later
    test's kernels."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    monkeypatch.setattr(JITFunction, "run", JITFunction.run)
    monkeypatch.setattr(InterpretedFunction, "run", InterpretedFunction.run)


def test_a_launchers_compile_error_names_its_file_and_line(tmp_path, monkeypatch):
    """The compiler's log points at the line of the launcher a user edits, not at a line of an anonymous string."""
    monkeypatch.delenv(cuda.CACHE_ENV, raising=False)
    launcher = tmp_path / "my_kernel.py"
    launcher.write_text('from ferret.backends import cuda\n\nKERNELS = cuda.Source(r"""\n'
                        'extern "C" __global__ void k(float* y) {\n    y[0] = not_declared;\n}\n""")\n')
    namespace: dict = {}
    exec(compile(launcher.read_text(), str(launcher), "exec"), namespace)
    with pytest.raises(CudaCompileError) as info:
        namespace["KERNELS"].cubin("sm_90")
    assert 'my_kernel.py(5): error: identifier "not_declared" is undefined' in info.value.log  # line 5 of the file


def test_a_refused_source_is_refused_again_at_every_later_launch_without_compiling_again(monkeypatch):
    """Every variant of a candidate NVRTC refuses gets the same `compile_error` (on the H200 the variants after the
    first got CUDA_ERROR_INVALID_HANDLE from a module left empty by the failed compile, 2026-12-01)."""
    compiled = []
    real = cuda.compile_cubin

    def counting(*args, **kwargs):
        compiled.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(cuda, "compile_cubin", counting)
    monkeypatch.delenv(cuda.CACHE_ENV, raising=False)
    refused = cuda.Source(SCALE.replace("a * x[i];", "a * x[i]"))
    errors = []
    for _ in range(3):
        with pytest.raises(CudaCompileError) as info:
            refused._compiled("sm_90")
        errors.append(info.value)
    assert len(compiled) == 1 and errors[0] is errors[1] is errors[2]
    assert 'error: expected a ";"' in errors[0].log
    assert cuda.Source(SCALE)._compiled("sm_90")[:4] == b"\x7fELF"


# Two cheat classes CUDA makes possible, closed by what the judge compiles with (issue 15, SECURITY.md): a kernel
# launching kernels of its own from the device (work outside the judge's launch count and stream), and a kernel
# reading host memory mapped for it (answers kept outside the GPU's memory, between calls).
DEVICE_SIDE_LAUNCH = r'''
extern "C" __global__ void child(float* x) { x[threadIdx.x] += 1.0f; }
extern "C" __global__ void parent(float* x) { if (threadIdx.x == 0) child<<<1, 32>>>(x); }
'''


def test_a_device_side_launch_does_not_compile_under_the_default_flags():
    """Launching from the device needs separate compilation (-rdc) and the device runtime linked in; the judge's
    default flags have neither, so NVRTC refuses the source: a compile_error verdict, before anything runs."""
    with pytest.raises(CudaCompileError) as info:
        cuda.compile_cubin(DEVICE_SIDE_LAUNCH, list(cuda.DEFAULT_FLAGS), "sm_90")
    assert "device-side kernel launch" in info.value.log and "candidate.cu(3)" in info.value.log


@pytest.mark.parametrize("call", ["cudaHostGetDevicePointer(&mapped, (void*)x, 0)", "cudaHostAlloc(&mapped, 64, 2)"])
def test_device_code_cannot_map_host_memory_for_itself(call):
    """Mapping host memory is the host runtime's to do; device code cannot name it (and a launcher that could
    would need CuPy's runtime, whose every use the scan names library_call)."""
    source = f'extern "C" __global__ void k(float* x) {{ void* mapped; {call}; x[0] = 1.0f; }}\n'
    with pytest.raises(CudaCompileError) as info:
        cuda.compile_cubin(source, list(cuda.DEFAULT_FLAGS), "sm_90")
    assert "is undefined" in info.value.log
