"""CUDA C++ candidates: their source compiled through NVRTC (CuPy's binding) with the contract's flags, launched
on torch's current stream, on the judge's tensors (raw device pointers, no copies).

A CUDA candidate is one Python file, the launcher, with the ABI every candidate has:

    from ferret.backends import cuda

    KERNELS = cuda.Source(r'''
    extern "C" __global__ void scale(const float* x, float* y, float a, int n) { ... }
    ''')

    def run(inputs, outputs, params, trace=None):
        n = inputs["x"].numel()
        KERNELS.launch("scale", grid=((n + 255) // 256,), block=(256,),
                       args=(inputs["x"], outputs["y"], cuda.f32(params["a"]), cuda.i32(n)))

The launcher never compiles or launches anything itself (CuPy is not among a candidate's imports): the flags are
the contract's (`backend.compile_flags`), the compiled code is cached in the candidate's own folder, keyed by source,
flags, architecture and NVRTC version, and every launch goes on the stream the judge times. Compiling needs no
GPU, so the CPU profile and CI compile a CUDA candidate; running it needs one.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ferret.backends.base import LaunchPoint, imports_module
from ferret.errors import BackendUnavailable, CudaCompileError

MODULE = "ferret.backends.cuda"  # what a candidate imports to be a CUDA candidate

# What a launcher may use (the scan's `cuda_backend_attribute` names anything else it reaches through the module:
# its imports, such as `os`, and the compiling the judge does for it).
LAUNCHER_API = ("Source", "i32", "i64", "f32", "NULL", "aligned")

FLAGS_ENV = "FERRET_CUDA_FLAGS"  # the contract's compile flags (a JSON list), set by the judge for the candidate
CACHE_ENV = "FERRET_CUDA_CACHE"  # the folder for compiled code, set by the judge: the candidate's own
# The two above as the judge set them for this process (`CudaBackend.configure`, from the job, not the environment:
# a variable that names the judge would tell a candidate it is judged); the environment only where it set none.
SETTINGS: dict[str, str] = {}


def _setting(name: str) -> str | None:
    return SETTINGS.get(name) or os.environ.get(name)


DEFAULT_FLAGS = ("-std=c++17",)
# Where no GPU says otherwise (compiling on the CPU): the H200's, with Hopper's arch-specific instructions (warpgroup
# MMA, setmaxnreg), which a plain sm_90 target refuses; such machine code runs on compute capability 9.0 alone.
DEFAULT_ARCH = "sm_90a"
# Dynamic shared memory a launch may ask for before the kernel's own limit must be raised (CUDA's default cap).
DEFAULT_DYNAMIC_SHARED = 48 * 1024
INSTALL_HINT = (
    "CUDA candidates need CuPy and NVRTC: pip install 'ferret[cuda]' (cupy-cuda13x and nvidia-cuda-nvrtc; "
    "on a machine with the CUDA toolkit, cupy-cuda13x alone)"
)
PROGRAMMATIC_HINT = (
    "a programmatic launch goes through the CUDA driver's cuLaunchKernelEx, which CuPy does not expose: "
    "pip install 'ferret[cuda]' (cuda-bindings)"
)


def nvrtc() -> Any:
    """CuPy's NVRTC binding, or BackendUnavailable saying what to install."""
    try:
        from cupy_backends.cuda.libs import nvrtc as binding
    except ImportError as err:
        raise BackendUnavailable(f"{INSTALL_HINT} ({err})") from None
    try:
        binding.getVersion()
    except Exception as err:  # noqa: BLE001 - the library is missing or cannot load: say so, with what to install
        raise BackendUnavailable(f"{INSTALL_HINT}; NVRTC would not load: {err}") from None
    return binding


def available() -> bool:
    """Whether this machine can compile CUDA candidates (CuPy's NVRTC binding loads)."""
    try:
        nvrtc()
    except BackendUnavailable:
        return False
    return True


def load_before_sandbox(on_gpu: bool) -> None:
    """Load what compiling and launching will need, in a candidate's process before its sandbox is installed: CuPy
    and NVRTC open native libraries as they load (CuPy 14's `cuda.pathfinder` opens `libdl.so.2` by name), which
    the sandbox refuses once the candidate's code may run (every CUDA candidate failed so on the H200, 2026-12-01).
    On the GPU, the launch path's objects too (an external stream, an empty module)."""
    nvrtc()
    try:
        import cupy
        import cupy.cuda.function  # noqa: F401 - loaded now, used at the first launch
    except ImportError as err:
        raise BackendUnavailable(f"{INSTALL_HINT} ({err})") from None
    if on_gpu:
        cupy_view_of_torch_stream()
        cupy.cuda.function.Module()
        _load_driver_binding()


def cupy_view_of_torch_stream() -> Any:
    """torch's current stream as a CuPy stream, for a launch on it: through the CUDA stream protocol
    (`Stream.from_external`, which reads torch's `__cuda_stream__`; CuPy 14 deprecates `ExternalStream`). The view
    holds torch's stream object, and CuPy does not own or destroy the stream."""
    import cupy
    import torch

    return cupy.cuda.Stream.from_external(torch.cuda.current_stream())


def _load_driver_binding() -> None:
    """cuda-bindings opens the driver library on its first call (through cuda.pathfinder, as CuPy does): made now,
    while loading is allowed, so that a programmatic launch can reach it later. Without the package, nothing: only a
    programmatic launch needs it, and it says what to install."""
    try:
        driver = driver_binding()
    except BackendUnavailable:
        return
    driver.cuDriverGetVersion()


def driver_binding() -> Any:
    """cuda-bindings' CUDA driver module (Cython, untyped), or BackendUnavailable saying what to install."""
    import importlib

    try:
        return importlib.import_module("cuda.bindings.driver")
    except ImportError as err:
        raise BackendUnavailable(f"{PROGRAMMATIC_HINT} ({err})") from None


def contract_flags() -> list[str]:
    """The flags the judge set for this process (the contract's), else the defaults."""
    raw = _setting(FLAGS_ENV)
    return list(json.loads(raw)) if raw else list(DEFAULT_FLAGS)


def flags_from_contract(compile_flags: dict[str, Any]) -> list[str]:
    """A contract's `backend.compile_flags` as NVRTC options, names as NVRTC spells them: `{"std": "c++17",
    "use_fast_math": true, "fmad": "false", "maxrregcount": 128}` -> `--fmad=false --maxrregcount=128 --std=c++17
    --use_fast_math`; true alone, false left out (write "false" where NVRTC takes it as a value)."""
    options = []
    for name, value in sorted(compile_flags.items()):
        if value is True:
            options.append(f"--{name}")
        elif value is not False and value is not None:
            options.append(f"--{name}={value}")
    return options or list(DEFAULT_FLAGS)


FERRET_HEADERS = Path(__file__).resolve().parent / "include"  # `#include <ferret/dtypes.cuh>`


def device_arch(major: int, minor: int) -> str:
    """The NVRTC target for a GPU of compute capability major.minor: its arch-specific target where there is one
    (sm_90a on Hopper, so that a candidate may use warpgroup MMA), else the plain one."""
    return f"sm_{major}{minor}a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def header_folders() -> list[str]:
    """The judge's own headers (`ferret/dtypes.cuh`), then where `#include <cuda_bf16.h>` and the rest of CUDA's
    headers are found: the copy Triton ships (pinned by the Triton version every verdict records, and readable
    inside the sandbox), else the toolkit's."""
    import importlib.util

    found = []
    triton = importlib.util.find_spec("triton")
    if triton is not None and triton.origin:
        found.append(Path(triton.origin).parent / "backends" / "nvidia" / "include")
    found += [Path(os.environ[k]) / "include" for k in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(k)]
    return [str(FERRET_HEADERS)] + [str(folder) for folder in found if (folder / "cuda_bf16.h").is_file()][:1]


def _headers_digest() -> str:
    """The judge's headers' contents: a change to them is a change to every candidate's machine code."""
    digest = hashlib.sha256()
    for path in sorted(FERRET_HEADERS.rglob("*.cuh")):
        digest.update(path.relative_to(FERRET_HEADERS).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def compile_cubin(source: str, flags: Sequence[str], arch: str = DEFAULT_ARCH, name: str = "candidate.cu") -> bytes:
    """Machine code for `arch` (`sm_90a`), or CudaCompileError with NVRTC's log. No GPU needed."""
    binding = nvrtc()
    options = [*flags, f"-arch={arch}", *(f"--include-path={folder}" for folder in header_folders())]
    program = binding.createProgram(source, name, [], [])
    try:
        try:
            binding.compileProgram(program, options)
        except Exception:  # noqa: BLE001 - NVRTC's own error says only "compilation failed": the log says why
            raise CudaCompileError(binding.getProgramLog(program), options) from None
        return binding.getCUBIN(program)
    finally:
        binding.destroyProgram(program)


def cache_key(source: str, flags: Sequence[str], arch: str) -> str:
    version = ".".join(map(str, nvrtc().getVersion()))
    key = [source, list(flags), arch, version, header_folders(), _headers_digest()]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()


def cached_cubin(source: str, flags: Sequence[str], arch: str, cache: Path | None) -> bytes:
    """`compile_cubin`, kept in `cache` under the key of everything that decides the machine code."""
    if cache is None:
        return compile_cubin(source, flags, arch)
    path = cache / f"{cache_key(source, flags, arch)}.cubin"
    if path.is_file():
        return path.read_bytes()
    cubin = compile_cubin(source, flags, arch)
    cache.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(cubin)
    temporary.replace(path)
    return cubin


class Scalar:
    """A kernel argument by value, its C type explicit (a Python number's width would be a guess)."""

    def __init__(self, value: float, ctype: str):
        self.value, self.ctype = value, ctype


NULL = Scalar(0, "uint64")  # a null pointer argument (an optional output the kernel skips)


def i32(value: int) -> Scalar:
    return Scalar(int(value), "int32")


def i64(value: int) -> Scalar:
    return Scalar(int(value), "int64")


def f32(value: float) -> Scalar:
    return Scalar(float(value), "float32")


def aligned(*tensors: Any, to: int) -> bool:
    """Whether every tensor's data starts on a multiple of `to` bytes: what a kernel's vector loads need. The
    backend answers it, so that a launcher never reads an address itself (the scan names `.data_ptr` in a
    candidate, the key of answers cached across calls)."""
    return all(t.data_ptr() % to == 0 for t in tensors)


def kernel_args(args: Sequence[Any]) -> tuple[Any, ...]:
    """torch tensors as their device pointers, `Scalar`s as numpy values of their type; anything else is a
    TypeError naming the argument (a bare Python number's C width is unknown)."""
    import numpy
    import torch

    converted: list[Any] = []
    for index, arg in enumerate(args):
        if isinstance(arg, torch.Tensor):
            if arg.device.type != "cuda":
                raise TypeError(f"kernel argument {index}: a tensor on {arg.device}, not on the GPU")
            converted.append(numpy.uint64(arg.data_ptr()))
        elif isinstance(arg, Scalar):
            converted.append(numpy.dtype(arg.ctype).type(arg.value))
        else:
            raise TypeError(
                f"kernel argument {index}: {type(arg).__name__}; pass a tensor, or a number as "
                "cuda.i32(...), cuda.i64(...) or cuda.f32(...)"
            )
    return tuple(converted)


def parameter_block(values: Sequence[Any]) -> tuple[Any, list[Any]]:
    """cuLaunchKernelEx's `kernelParams` for `kernel_args`' values: an array of addresses, one per argument, each of
    that argument's bytes in its own type (a pointer's 8, an int32's 4). Returns the array and the buffers it points
    into, which must outlive the launch call."""
    import numpy

    buffers = [numpy.array([value], dtype=numpy.asarray(value).dtype) for value in values]
    return numpy.array([buffer.ctypes.data for buffer in buffers], dtype=numpy.uint64), buffers


def programmatic_launch_config(grid: Sequence[int], block: Sequence[int], shared_mem: int, stream: int) -> Any:
    """A CUlaunchConfig on `stream` (a raw handle) with programmatic stream serialization allowed: the kernel may start
    while the kernel before it on the stream is still running, once that kernel's blocks have all executed
    `griddepcontrol.launch_dependents` (or ended); it must execute `griddepcontrol.wait` before it reads anything that
    kernel writes. Raises BackendUnavailable without cuda-bindings."""
    driver = driver_binding()
    grid3, block3 = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
    attribute = driver.CUlaunchAttribute()
    attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attribute.value.programmaticStreamSerializationAllowed = 1
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = (int(n) for n in grid3)
    config.blockDimX, config.blockDimY, config.blockDimZ = (int(n) for n in block3)
    config.sharedMemBytes = int(shared_mem)
    config.hStream = driver.CUstream(int(stream))
    config.attrs = [attribute]
    config.numAttrs = 1
    return config


def launch_programmatic(function_ptr: int, config: Any, values: Sequence[Any]) -> None:
    """cuLaunchKernelEx of the loaded function at `function_ptr` (CuPy's handle) with `config`; a failed launch raises
    RuntimeError with the driver's name for the error, as CuPy's launches do."""
    driver = driver_binding()
    addresses, buffers = parameter_block(values)
    (result,) = driver.cuLaunchKernelEx(config, driver.CUfunction(int(function_ptr)), addresses.ctypes.data, 0)
    del buffers  # the driver copied the arguments during the call
    if result != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(result)
        raise RuntimeError(f"cuLaunchKernelEx: {name.decode() if isinstance(name, bytes) else name}")


class Source:
    """One CUDA C++ translation unit of a candidate, compiled on first launch in this process. The compiler's
    messages name the launcher's file and line: the code is compiled behind a `#line` directive pointing at the
    line of the `Source(...)` call, where the string literal starts."""

    def __init__(self, code: str):
        import sys

        caller = sys._getframe(1)
        self.code = code
        self.file, self.line = Path(caller.f_code.co_filename).name, caller.f_lineno
        self._module: Any = None
        self._functions: dict[str, Any] = {}
        self._shared_allowed: dict[str, int] = {}  # kernel -> the dynamic shared memory its limit was raised to
        self._compile_error: CudaCompileError | None = None

    @property
    def compiled_code(self) -> str:
        """The code as compiled: behind the `#line` directive that maps its lines to the launcher's."""
        return f'#line {self.line} "{self.file}"\n{self.code}'

    def cubin(self, arch: str = DEFAULT_ARCH) -> bytes:
        cache = _setting(CACHE_ENV)
        return cached_cubin(self.compiled_code, contract_flags(), arch, Path(cache) if cache else None)

    def launch(
        self,
        kernel: str,
        grid: Sequence[int],
        block: Sequence[int],
        args: Sequence[Any],
        shared_mem: int = 0,
        programmatic: bool = False,
    ) -> None:
        """`kernel<<<grid, block, shared_mem, torch's current stream>>>(args)`. More than 48 KiB of dynamic shared
        memory is allowed for the kernel first (CUDA refuses such a launch otherwise; Hopper gives a block up to
        227 KiB). `programmatic`: as a programmatic dependent of the kernel before it on the stream (compute
        capability 9.0 and up; `programmatic_launch_config` says what the kernel must then do)."""
        import cupy
        import torch

        if not torch.cuda.is_available():
            raise BackendUnavailable("a CUDA candidate runs on a GPU; without one its source can only be compiled")
        function = self._function(kernel)
        if shared_mem > self._shared_allowed.get(kernel, DEFAULT_DYNAMIC_SHARED):
            driver: Any = cupy.cuda.driver  # its stubs do not name the driver's functions
            driver.funcSetAttribute(function.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem)
            self._shared_allowed[kernel] = shared_mem
        if programmatic:
            config = programmatic_launch_config(grid, block, shared_mem, torch.cuda.current_stream().cuda_stream)
            launch_programmatic(function.ptr, config, kernel_args(args))
            return
        function(tuple(grid), tuple(block), kernel_args(args), shared_mem=shared_mem, stream=cupy_view_of_torch_stream())

    def _function(self, kernel: str) -> Any:
        if kernel not in self._functions:
            if self._module is None:
                import cupy
                import torch

                major, minor = torch.cuda.get_device_capability()
                cubin = self._compiled(device_arch(major, minor))
                module = cupy.cuda.function.Module()
                module.load(cubin)
                self._module = module  # only a loaded module: an empty one made every later launch INVALID_HANDLE
            self._functions[kernel] = self._module.get_function(kernel)
        return self._functions[kernel]

    def _compiled(self, arch: str) -> bytes:
        """The machine code; NVRTC's refusal, once met, raised again for every later launch in this process (each
        variant's verdict is the same `compile_error`, without compiling again)."""
        if self._compile_error is not None:
            raise self._compile_error
        try:
            return self.cubin(arch)
        except CudaCompileError as err:
            self._compile_error = err
            raise


# --- the judge's side: the CUDA backend (ferret.backends.base.Backend) ---------------------------------------------


def _kernel_name(source: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """`Source.launch(kernel, ...)`: the kernel's name is its first argument."""
    return str(args[0] if args else kwargs.get("kernel", "kernel"))


class CudaBackend:
    """CUDA C++ candidates: those that import this module. Compiled through NVRTC (CuPy), run on a GPU only."""

    name = "cuda"
    title = "CUDA"
    module: str | None = MODULE
    scan_preset = "cuda"
    imports: tuple[str, ...] = ("ferret.backends", MODULE)  # `from ferret.backends import cuda`, `import ferret.backends.cuda`

    def claims(self, tree: ast.Module) -> bool:
        return imports_module(tree, MODULE)

    def unavailable(self, device: str, profile: str) -> str | None:
        if device != "cuda":
            return (
                f"it runs on a GPU, and the {profile} profile has none (its source compiles without one: {MODULE}.compile_cubin)"
            )
        try:
            nvrtc()
        except BackendUnavailable as err:
            return f"this machine cannot compile it: {err}"
        return None

    def load_before_sandbox(self, on_gpu: bool) -> None:
        load_before_sandbox(on_gpu)

    def launch_points(self) -> list[LaunchPoint]:
        return [LaunchPoint(Source, "launch", "cuda.Source.launch", _kernel_name)]

    def settings(self, workdir: Path, compile_flags: Mapping[str, Any]) -> dict[str, str]:
        """The folder compiled code is cached in (the candidate's own) and the contract's flags."""
        return {CACHE_ENV: str(workdir / ".cuda"), FLAGS_ENV: json.dumps(flags_from_contract(dict(compile_flags)))}

    def configure(self, settings: Mapping[str, str]) -> None:
        SETTINGS.update({k: v for k, v in settings.items() if k in (CACHE_ENV, FLAGS_ENV)})


BACKEND = CudaBackend()
