"""The CUDA backend's judge side without a GPU: NVRTC compiles (CuPy's binding, no driver needed), its refusals
carry the compiler's log, the compiled code is cached by everything that decides it, kernel arguments are typed,
and a machine without CuPy or NVRTC is told what to install."""

from __future__ import annotations

import importlib
import sys

import numpy
import pytest
import torch

from ferret.backends import cuda
from ferret.errors import BackendUnavailable, CudaCompileError

SCALE = r"""
extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


def test_nvrtc_compiles_for_hopper_without_a_gpu():
    cubin = cuda.compile_cubin(SCALE, ["-std=c++17"], "sm_90")
    assert cubin[:4] == b"\x7fELF" and b"scale" in cubin


def test_a_refused_source_raises_with_the_compilers_log_naming_the_line():
    with pytest.raises(CudaCompileError) as info:
        cuda.compile_cubin(SCALE.replace("a * x[i];", "a * x[i]"), ["-std=c++17"], "sm_90", name="launcher.cu")
    assert 'launcher.cu(5): error: expected a ";"' in info.value.log
    assert "-arch=sm_90" in info.value.flags and "NVRTC refused" in str(info.value)


def test_contract_flags_become_nvrtc_options_that_nvrtc_takes():
    flags = cuda.flags_from_contract({"std": "c++17", "use_fast_math": True, "maxrregcount": 128, "fmad": "false", "G": False})
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
    # From the job (`Backend.configure`), not the environment, where a candidate would read that it is judged.
    monkeypatch.delenv(cuda.FLAGS_ENV, raising=False)
    monkeypatch.delenv(cuda.CACHE_ENV, raising=False)
    monkeypatch.setattr(cuda, "SETTINGS", {})
    cuda.BACKEND.configure({cuda.FLAGS_ENV: '["-std=c++17", "-maxrregcount=64"]', cuda.CACHE_ENV: str(tmp_path)})
    monkeypatch.setattr(cuda, "cached_cubin", lambda *args: seen.append(args) or b"")
    source = cuda.Source(SCALE)
    source.cubin()
    assert seen == [(source.compiled_code, ["-std=c++17", "-maxrregcount=64"], cuda.DEFAULT_ARCH, tmp_path)]
    assert source.compiled_code == f'#line {source.line} "test_cuda.py"\n{SCALE}'  # messages name this file


# One warpgroup MMA fence: an instruction of Hopper's arch-specific target only.
WGMMA_FENCE = r"""
extern "C" __global__ void fenced(float* y) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    y[threadIdx.x] = 1.0f;
}
"""


def test_hopper_candidates_compile_for_its_arch_specific_target_where_warpgroup_mma_is():
    """A GPU of compute capability 9.0 gets sm_90a (the plain sm_90 target refuses wgmma, which a Hopper kernel
    needs for its tensor cores); other GPUs their plain target. Compiling on the CPU targets the H200 the same way."""
    assert cuda.device_arch(9, 0) == "sm_90a" == cuda.DEFAULT_ARCH
    assert cuda.device_arch(8, 0) == "sm_80" and cuda.device_arch(10, 0) == "sm_100"
    assert cuda.compile_cubin(WGMMA_FENCE, ["-std=c++17"], cuda.DEFAULT_ARCH)[:4] == b"\x7fELF"
    with pytest.raises(CudaCompileError, match="wgmma"):
        cuda.compile_cubin(WGMMA_FENCE, ["-std=c++17"], "sm_90")


class _FakeStream:
    """torch's stream as the backend reads it: its handle, and the CUDA stream protocol CuPy's view reads."""

    def __init__(self, handle):
        self.cuda_stream = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.cuda_stream)


def test_a_launch_past_48_kib_of_dynamic_shared_memory_raises_the_kernels_limit_once(monkeypatch):
    """CUDA refuses a launch asking for more dynamic shared memory than the kernel's limit (48 KiB unless raised);
    the backend raises it to what the launch asks, once per kernel and size, and never for a small launch."""
    import cupy

    driver = importlib.import_module("cupy.cuda").driver  # compiled, untyped

    raised, launched, streams = [], [], []

    class Function:
        ptr = 1234

        def __call__(self, grid, block, args, shared_mem, stream):
            launched.append(shared_mem)
            streams.append(stream)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: _FakeStream(0x55))
    monkeypatch.setattr(driver, "funcSetAttribute", lambda *args: raised.append(args))
    source = cuda.Source(SCALE)
    monkeypatch.setattr(source, "_function", lambda kernel: Function())
    for shared in (1024, 200 * 1024, 200 * 1024, 100 * 1024, 220 * 1024):
        source.launch("scale", (1,), (32,), [], shared_mem=shared)
    attribute = driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert raised == [(1234, attribute, 200 * 1024), (1234, attribute, 220 * 1024)]
    assert launched == [1024, 200 * 1024, 200 * 1024, 100 * 1024, 220 * 1024]
    # each launch on torch's current stream, as CuPy's view of it (no deprecated ExternalStream)
    assert all(isinstance(stream, cupy.cuda.Stream) and stream.ptr == 0x55 for stream in streams)


def test_a_programmatic_launchs_parameters_are_each_arguments_bytes_in_its_own_type():
    """cuLaunchKernelEx reads each argument through its address in `kernelParams`, as many bytes as the kernel's
    parameter has: a pointer's 8, an int32's 4. Read back here through the addresses, each in its own type."""
    import ctypes

    values = cuda.kernel_args([cuda.NULL, cuda.i32(-7), cuda.i64(1 << 40), cuda.f32(0.25)])
    addresses, buffers = cuda.parameter_block(values)
    assert addresses.dtype == numpy.uint64 and len(addresses) == 4
    read = [
        ctypes.c_uint64.from_address(int(addresses[0])).value,
        ctypes.c_int32.from_address(int(addresses[1])).value,
        ctypes.c_int64.from_address(int(addresses[2])).value,
        ctypes.c_float.from_address(int(addresses[3])).value,
    ]
    assert read == [0, -7, 1 << 40, 0.25]
    assert [buffer.itemsize for buffer in buffers] == [8, 4, 8, 4]


def test_a_programmatic_launch_config_allows_programmatic_stream_serialization():
    pytest.importorskip("cuda.bindings")
    driver = cuda.driver_binding()

    config = cuda.programmatic_launch_config((2, 3), (256,), 230_000, 0x1234)
    assert (config.gridDimX, config.gridDimY, config.gridDimZ) == (2, 3, 1)
    assert (config.blockDimX, config.blockDimY, config.blockDimZ) == (256, 1, 1)
    assert config.sharedMemBytes == 230_000 and int(config.hStream) == 0x1234 and config.numAttrs == 1
    (attribute,) = config.attrs
    assert attribute.id == driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert attribute.value.programmaticStreamSerializationAllowed == 1


def _fake_gpu_launch(monkeypatch, source, ptr: int = 4321) -> None:
    class Function:
        def __init__(self):
            self.ptr = ptr

        def __call__(self, *args, **kwargs):
            raise AssertionError("a programmatic launch went through CuPy's launch")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: _FakeStream(0x77))
    monkeypatch.setattr(source, "_function", lambda kernel: Function())


def test_a_programmatic_launch_goes_through_the_drivers_launch_with_its_config_on_torchs_stream(monkeypatch):
    """Source.launch(programmatic=True) calls cuLaunchKernelEx on the kernel's handle, on torch's current stream, with
    the grid, block, shared memory and the arguments (read during the call: the buffers may go after it)."""
    import ctypes

    pytest.importorskip("cuda.bindings")
    driver = cuda.driver_binding()

    calls = []

    def launch_kernel_ex(config, function, params, extra):
        addresses = (ctypes.c_uint64 * 2).from_address(params)
        calls.append(
            {
                "grid": (config.gridDimX, config.gridDimY, config.gridDimZ),
                "block": config.blockDimX,
                "shared": config.sharedMemBytes,
                "stream": int(config.hStream),
                "function": int(function),
                "programmatic": config.attrs[0].value.programmaticStreamSerializationAllowed,
                "args": (ctypes.c_int32.from_address(addresses[0]).value, ctypes.c_float.from_address(addresses[1]).value),
            }
        )
        return (driver.CUresult.CUDA_SUCCESS,)

    monkeypatch.setattr(driver, "cuLaunchKernelEx", launch_kernel_ex)
    source = cuda.Source(SCALE)
    _fake_gpu_launch(monkeypatch, source)
    source.launch("scale", (5, 2), (128,), [cuda.i32(9), cuda.f32(1.5)], programmatic=True)
    assert calls == [
        {"grid": (5, 2, 1), "block": 128, "shared": 0, "stream": 0x77, "function": 4321, "programmatic": 1, "args": (9, 1.5)}
    ]


def test_a_refused_programmatic_launch_raises_with_the_drivers_name_for_the_error(monkeypatch):
    pytest.importorskip("cuda.bindings")
    driver = cuda.driver_binding()

    monkeypatch.setattr(driver, "cuLaunchKernelEx", lambda *args: (driver.CUresult.CUDA_ERROR_INVALID_VALUE,))
    monkeypatch.setattr(driver, "cuGetErrorName", lambda result: (driver.CUresult.CUDA_SUCCESS, b"CUDA_ERROR_INVALID_VALUE"))
    source = cuda.Source(SCALE)
    _fake_gpu_launch(monkeypatch, source)
    with pytest.raises(RuntimeError, match="cuLaunchKernelEx: CUDA_ERROR_INVALID_VALUE"):
        source.launch("scale", (0,), (128,), [], programmatic=True)


def test_a_programmatic_launch_without_cuda_bindings_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)
    with pytest.raises(BackendUnavailable, match=r"cuLaunchKernelEx.*pip install 'ferret\[cuda\]' \(cuda-bindings\)"):
        cuda.programmatic_launch_config((1,), (32,), 0, 0)


def test_on_the_gpu_the_driver_binding_is_loaded_before_the_sandbox(monkeypatch):
    """cuda-bindings opens the driver library at its first call: load_before_sandbox makes one (the sandbox would
    refuse the library loads later), and without cuda-bindings it does nothing (only programmatic launches need it)."""
    import cupy

    pytest.importorskip("cuda.bindings")
    driver = cuda.driver_binding()

    called = []
    monkeypatch.setattr(driver, "cuDriverGetVersion", lambda: called.append(True) or (0, 13000))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: _FakeStream(0))
    monkeypatch.setattr(cupy.cuda.function, "Module", lambda: None)
    cuda.load_before_sandbox(on_gpu=False)
    assert called == []
    cuda.load_before_sandbox(on_gpu=True)
    assert called == [True]
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)
    cuda.load_before_sandbox(on_gpu=True)
    assert called == [True]


def test_kernel_arguments_are_typed():
    assert [type(a) for a in cuda.kernel_args([cuda.i32(3), cuda.i64(4), cuda.f32(0.5)])] == [
        numpy.int32,
        numpy.int64,
        numpy.float32,
    ]
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
    launcher.write_text(
        'from ferret.backends import cuda\n\nKERNELS = cuda.Source(r"""\n'
        'extern "C" __global__ void k(float* y) {\n    y[0] = not_declared;\n}\n""")\n'
    )
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


# Two cheat classes CUDA makes possible, closed by what the judge compiles with (SECURITY.md): a kernel
# launching kernels of its own from the device (work outside the judge's launch count and stream), and a kernel
# reading host memory mapped for it (answers kept outside the GPU's memory, between calls).
DEVICE_SIDE_LAUNCH = r"""
extern "C" __global__ void child(float* x) { x[threadIdx.x] += 1.0f; }
extern "C" __global__ void parent(float* x) { if (threadIdx.x == 0) child<<<1, 32>>>(x); }
"""


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


# --- the judge's side: the CUDA backend of the registry -----------------------------------------------------------


def test_the_cuda_backend_is_registered_and_claims_what_imports_this_module():
    import ast

    from ferret.backends import backend

    assert backend("cuda") is cuda.BACKEND and cuda.BACKEND.module == "ferret.backends.cuda"
    assert cuda.BACKEND.claims(ast.parse("from ferret.backends import cuda\n"))
    assert cuda.BACKEND.claims(ast.parse("from ferret.backends.cuda import Source\n"))
    assert not cuda.BACKEND.claims(ast.parse("import triton\nfrom ferret.backends import registry\n"))


def test_the_cuda_backend_is_judged_on_a_gpu_with_nvrtc_only(monkeypatch):
    assert cuda.BACKEND.unavailable("cuda", "gpu") is None  # NVRTC loads here (the dev install has it)
    why = cuda.BACKEND.unavailable("cpu", "cpu")
    assert why is not None and why.startswith("it runs on a GPU, and the cpu profile has none")
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs", None)
    monkeypatch.delitem(sys.modules, "cupy_backends.cuda.libs.nvrtc", raising=False)
    why = cuda.BACKEND.unavailable("cuda", "gpu")
    assert why is not None and why.startswith("this machine cannot compile it: CUDA candidates need CuPy and NVRTC")


def test_the_cuda_backend_gives_a_candidates_process_its_cache_and_the_contracts_flags(tmp_path):
    import json

    env = cuda.BACKEND.settings(tmp_path, {"use_fast_math": True, "std": "c++17"})
    assert env[cuda.CACHE_ENV] == str(tmp_path / ".cuda")
    assert json.loads(env[cuda.FLAGS_ENV]) == ["--std=c++17", "--use_fast_math"]
    assert json.loads(cuda.BACKEND.settings(tmp_path, {})[cuda.FLAGS_ENV]) == list(cuda.DEFAULT_FLAGS)


def test_the_cuda_backend_launches_through_source_launch_named_by_its_first_argument():
    (point,) = cuda.BACKEND.launch_points()
    assert (point.owner, point.attribute, point.label) == (cuda.Source, "launch", "cuda.Source.launch")
    assert point.kernel_name(None, ("scale", (1,), (32,)), {}) == "scale"
    assert point.kernel_name(None, (), {"kernel": "rms"}) == "rms"


def test_a_cuda_candidate_may_import_this_module_and_nothing_else_of_ferrets():
    assert cuda.BACKEND.imports == ("ferret.backends", "ferret.backends.cuda")


def test_the_cuda_backends_scan_preset_runs_every_rule_its_own_among_them():
    from ferret.integrity.presets import PRESETS
    from ferret.integrity.registry import RULES

    rules = set(PRESETS[cuda.BACKEND.scan_preset])
    assert rules == set(RULES) and "cuda_backend_attribute" in rules
