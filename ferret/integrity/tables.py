"""The scan's tables: which modules, names, attributes, calls and strings are banned, and what for.

Dotted paths match themselves and everything under them ("torch.nn" matches "torch.nn.functional.softmax");
the longest matching key wins. A table maps a path to (slug, why): the cheat it enables and the reason
given in the finding. The rules in `ferret.integrity.rules` read these tables; keeping them as data in
one place lets a reader see at a glance what a candidate may and may not touch.
"""

from __future__ import annotations

import re

from ferret.backends.registry import backends

# Imports a candidate may have: these, and those of every language's backend (`Backend.imports`: Triton's
# modules; for a CUDA candidate's launcher, the judge's backend it compiles and launches through, nothing else of
# ferret's). Everything not listed here or below is a library call.
ALLOWED_IMPORTS = {
    "__future__",
    "math",
    "cmath",
    "typing",
    "typing_extensions",
    "dataclasses",
    "functools",
    "itertools",
    "collections",
    "enum",
    "numbers",
    "operator",
    "abc",
    "contextlib",
    "copy",
    "re",
    "string",
    "struct",
    "fractions",
    "decimal",
    "bisect",
    "heapq",
    "warnings",
    "types",
    "statistics",
    "random",
    "json",
    "torch",
    "torch.cuda",
    "torch.types",
    "torch.backends",
    *(module for backend in backends() for module in backend.imports),
}

LIB = "library_call"  # the slug most rules report

# Modules banned as imports (and names below them imported with `from`), and for what.
IMPORT_RULES: dict[str, tuple[str, str]] = {}


def _ban(table: dict, slug: str, why: str, *paths: str) -> None:
    """Enter each of `paths` in `table` as banned for `slug`, with `why` as the reason."""
    for p in paths:
        table[p] = (slug, why)


_ban(
    IMPORT_RULES,
    "reference_import",
    "the candidate must compute the op itself, not return what the project's reference, baseline or judge, "
    "or a model library's implementation, computes",
    "tasks",
    "ferret",
    "reference",
    "baseline",
    "transformers",
    "vllm",
    "flash_attn",
    "flashinfer",
    "xformers",
    "apex",
    "liger_kernel",
    "sglang",
)
_ban(
    IMPORT_RULES,
    LIB,
    "it is a library of ready-made compute; the candidate must write the kernel",
    "torch.nn",
    "torch.special",
    "torch.linalg",
    "torch.fft",
    "torch.ops",
    "torch.library",
    "torch._C",
    "torch._ops",
    "torch._refs",
    "torch._prims",
    "torch._decomp",
    "torch._inductor",
    "torch._dynamo",
    "torch.compiler",
    "torch.sparse",
    "torch.func",
    "torch.autograd",
    "torch.testing",
    "torch.distributed",
    "torch.jit",
    "torch.hub",
    "torch.ao",
    "torch.quantization",
    "torch.export",
    "torch.fx",
    "torch.masked",
    "torch.nested",
    "torch.utils",
    "torch._higher_order_ops",
    "torch.signal",
    "triton.ops",
)
_ban(
    IMPORT_RULES,
    "reading_expected",
    "it reaches the file system, the interpreter's frames or objects, or raw memory, where the expected "
    "answer or the judge's state could be read",
    "os",
    "posix",
    "nt",
    "pathlib",
    "io",
    "glob",
    "fnmatch",
    "shutil",
    "pickle",
    "_pickle",
    "dill",
    "cloudpickle",
    "marshal",
    "shelve",
    "gc",
    "inspect",
    "sys",
    "builtins",
    "importlib",
    "pkgutil",
    "runpy",
    "zipimport",
    "ctypes",
    "cffi",
    "mmap",
    "tempfile",
    "safetensors",
    "h5py",
    "traceback",
    "linecache",
    "tokenize",
    "code",
    "codeop",
    "dis",
    "socket",
    "urllib",
    "http",
    "requests",
    "zipfile",
    "tarfile",
    "sqlite3",
    "fileinput",
    "tracemalloc",
    "sysconfig",
)
_ban(
    IMPORT_RULES,
    "side_stream_or_thread",
    "work in another thread, process or stream escapes the timed region the judge measures",
    "threading",
    "_thread",
    "concurrent",
    "multiprocessing",
    "asyncio",
    "subprocess",
    "signal",
    "sched",
    "torch.multiprocessing",
    "torch.cuda.streams",
)
_ban(
    IMPORT_RULES,
    "harness_patching",
    "a candidate has no use for clocks, benchmarking or mocking; they serve to fake or patch the timing",
    "time",
    "timeit",
    "triton.testing",
    "unittest",
    "cProfile",
    "profile",
)
_ban(
    IMPORT_RULES,
    "cross_call_caching",
    "it keys state on object identity or replays recorded work across calls",
    "weakref",
    "torch.cuda.graphs",
)
_ban(
    IMPORT_RULES,
    "shadowing",
    "it changes how the interpreter finds modules, which the judge relies on",
    "site",
    "sitecustomize",
    "usercustomize",
)
_ban(
    IMPORT_RULES,
    "persisting_l2",
    "raw CUDA runtime bindings can set a persisting-L2 window that survives the judge's cache flush",
    "cupy",
    "cupyx",
    "cuda",
    "pycuda",
)
_ban(
    IMPORT_RULES,
    "result_forging",
    "it writes to the output streams or runs code at exit, where a verdict could be forged",
    "logging",
    "atexit",
)
_ban(IMPORT_RULES, "gate_tampering", "recomputing file digests is what re-locking an edited gate takes", "hashlib")
_ban(
    IMPORT_RULES,
    "lazy_result",
    "tensor subclasses and dispatch modes defer or fake the computation",
    "torch.utils._python_dispatch",
    "torch.overrides",
    "torch._subclasses",
)
_ban(
    IMPORT_RULES,
    "allocator_reuse",
    "steering the caching allocator can hand back memory that still holds an earlier answer",
    "torch.cuda.memory",
)
_ban(
    IMPORT_RULES,
    "lower_precision",
    "autocast silently computes in lower precision",
    "torch.amp",
    "torch.cuda.amp",
    "torch.cpu.amp",
)

# References (names, attribute chains, from-imports) that are banned wherever they appear.
MENTION_RULES: dict[str, tuple[str, str]] = {}
_ban(
    MENTION_RULES,
    "side_stream_or_thread",
    "a side stream or event lets work run outside the stream the judge's end event waits for",
    "torch.cuda.Stream",
    "torch.cuda.stream",
    "torch.cuda.set_stream",
    "torch.cuda.Event",
    "torch.cuda.current_stream",
    "torch.cuda.default_stream",
    "torch.cuda.ExternalStream",
    "torch.cuda.StreamContext",
    "torch.cuda.streams",
    "torch.Stream",
    "torch.Event",
    "torch.multiprocessing",
)
_ban(
    MENTION_RULES,
    "side_stream_or_thread",
    "work in another thread or process escapes the timed region the judge measures",
    "threading",
    "_thread",
    "concurrent",
    "multiprocessing",
    "asyncio",
    "subprocess",
)
_ban(
    MENTION_RULES,
    "side_stream_or_thread",
    "a child process escapes the judge's timing and watchdog",
    "os.fork",
    "os.forkpty",
    "os.system",
    "os.popen",
    "os.spawnl",
    "os.spawnv",
    "os.spawnve",
    "os.spawnlp",
    "os.posix_spawn",
    "os.posix_spawnp",
    "os.execv",
    "os.execve",
    "os.execl",
    "os.execvp",
)
# CuPy is banned at the import for its raw runtime bindings (persisting_l2, above); its array operations and cuBLAS,
# cuFFT and cuRAND calls are also the library computing, named wherever they appear.
_ban(
    MENTION_RULES,
    "library_call",
    "CuPy's array operations and its cuBLAS, cuFFT and cuRAND calls run library "
    "kernels: a CUDA candidate compiles and launches its own kernels through ferret.backends.cuda",
    "cupy",
    "cupyx",
)
_ban(
    MENTION_RULES,
    "cross_call_caching",
    "CUDA graphs record work once and replay it, so later calls need not compute",
    "torch.cuda.graph",
    "torch.cuda.graphs",
    "torch.cuda.CUDAGraph",
    "torch.cuda.make_graphed_callables",
)
_ban(
    MENTION_RULES,
    "cross_call_caching",
    "a memoizing cache returns an earlier call's result instead of computing this one",
    "functools.lru_cache",
    "functools.cache",
    "functools.cached_property",
)
_ban(MENTION_RULES, "cross_call_caching", "weak references key state on object identity across calls", "weakref")
_ban(
    MENTION_RULES,
    "allocator_reuse",
    "steering the caching allocator can hand back memory that still holds an earlier answer",
    "torch.cuda.memory",
    "torch.cuda.caching_allocator_alloc",
    "torch.cuda.caching_allocator_delete",
    "torch.cuda.empty_cache",
    "torch.cuda.MemPool",
    "torch.cuda.CUDAPluggableAllocator",
    "torch.cuda.change_current_allocator",
    "torch.cuda.set_per_process_memory_fraction",
    "torch.UntypedStorage",
    "torch.TypedStorage",
    "torch.Storage",
)
_ban(
    MENTION_RULES,
    "lazy_result",
    "tensor subclasses and dispatch hooks return placeholders that compute when read, outside the timed region",
    "torch.utils._python_dispatch",
    "torch.overrides",
    "torch._C._disabled_torch_function_impl",
    "torch.Tensor._make_subclass",
    "torch._C.DisableTorchFunction",
    "torch._C.DisableTorchFunctionSubclass",
    "torch._subclasses",
)
_ban(
    MENTION_RULES,
    "reading_expected",
    "it reads the interpreter's frames or live objects, where the judge's data lives",
    "sys._getframe",
    "sys._current_frames",
    "sys.settrace",
    "sys.setprofile",
    "sys.exc_info",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "inspect",
)
_ban(
    MENTION_RULES,
    "reading_expected",
    "it loads tensors from files, where the expected answer could be read",
    "numpy.load",
    "numpy.fromfile",
    "numpy.memmap",
    "torch.load",
    "torch.from_file",
    "safetensors",
    "builtins.open",
    "io.open",
)
_ban(
    MENTION_RULES,
    "shadowing",
    "changing the module table or the import path replaces what the judge imports",
    "sys.modules",
    "sys.path",
    "sys.meta_path",
    "sys.path_hooks",
    "sys.path_importer_cache",
    "os.environ",
    "os.putenv",
    "os.chdir",
    "importlib.reload",
)
_ban(MENTION_RULES, "harness_patching", "do_bench is the judge's timer; a candidate has no use for it", "triton.testing")
_ban(
    MENTION_RULES,
    "lower_precision",
    "it lets matmuls and reductions run in reduced precision (TF32, fp16/bf16 accumulation, autocast)",
    "torch.set_float32_matmul_precision",
    "torch.set_default_dtype",
    "torch.autocast",
    "torch.amp",
    "torch.cuda.amp",
    "torch.cpu.amp",
)
_ban(
    MENTION_RULES,
    "result_forging",
    "it writes to the process's output streams, where GATE_RESULT is printed",
    "sys.stdout",
    "sys.stderr",
    "sys.__stdout__",
    "sys.__stderr__",
    "os.write",
    "os.dup2",
    "builtins.print",
)
_ban(
    MENTION_RULES,
    "nan_wildcard",
    "a NaN made in the launcher can serve as a wildcard in the comparison",
    "math.nan",
    "torch.nan",
    "numpy.nan",
    "numpy.NaN",
)

# torch.X(...) calls a candidate may make: allocation and metadata only.
TORCH_ALLOWED_CALLS = {
    f"torch.{name}"
    for name in (
        "empty",
        "empty_like",
        "empty_strided",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "arange",
        "tensor",
        "as_tensor",
        "device",
        "Size",
        "is_tensor",
        "is_floating_point",
        "finfo",
        "iinfo",
        "get_default_dtype",
        "no_grad",
        "inference_mode",
        "promote_types",
        "cuda.is_available",
        "cuda.current_device",
        "cuda.get_device_properties",
        "cuda.get_device_capability",
        "cuda.device_count",
        "cuda.device",
        "cuda.get_device_name",
    )
}

# Tensor methods that compute (checked outside @triton.jit only). max/min/item stay allowed: launchers read
# integer metadata with them (cache_lens.max()); floating-point compute is caught at run time.
COMPUTE_METHODS = {
    "matmul",
    "mm",
    "bmm",
    "baddbmm",
    "addmm",
    "addbmm",
    "addmv",
    "mv",
    "dot",
    "outer",
    "einsum",
    "softmax",
    "log_softmax",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log1p",
    "sum",
    "mean",
    "var",
    "std",
    "norm",
    "rsqrt",
    "sqrt",
    "pow",
    "amax",
    "amin",
    "logsumexp",
    "cumsum",
    "cumprod",
    "sort",
    "argsort",
    "topk",
    "sigmoid",
    "tanh",
    "relu",
    "gelu",
    "silu",
    "erf",
    "reciprocal",
    "cos",
    "sin",
    "prod",
    "argmax",
    "argmin",
    "mul",
    "div",
    "square",
    "abs",
    "clamp",
    "masked_fill",
    "where",
    "lerp",
    "addcmul",
    "addcdiv",
    "linear",
    "layer_norm",
    "rms_norm",
    "scaled_dot_product_attention",
    "matrix_power",
    "__matmul__",
    "__rmatmul__",
}
# In-place forms whose out-of-place name is ambiguous with Python builtins (set.add, re.sub).
INPLACE_ONLY_COMPUTE = {"add", "sub"}

# Dtype names below float32.
LOW_DTYPE_NAMES = {"float16", "half", "bfloat16", "fp16", "bf16"}
LOW_DTYPE_PREFIXES = ("float8", "fp8", "float4", "fp4")
# A float8 storage dtype a contract may declare (`Input.scales`), by the names torch and Triton give it: where the
# contract declares it, a cast to it is the storage the contract asks for (the scan allows these names, and only them).
FLOAT8_NAMES: dict[str, tuple[str, ...]] = {
    "float8_e4m3fn": ("float8_e4m3fn", "float8e4nv", "fp8e4nv"),
    "float8_e5m2": ("float8_e5m2", "float8e5", "fp8e5"),
}
DTYPE_ROOTS = ("torch", "triton.language", "triton", "numpy")

# Attribute names banned on any object.
ATTR_RULES: dict[str, tuple[str, str]] = {}
_ban(
    ATTR_RULES,
    "cross_call_caching",
    "tensor addresses and version counters identify inputs across calls; keying on them lets a candidate "
    "replay an earlier result",
    "data_ptr",
    "_cdata",
    "_version",
)
_ban(
    ATTR_RULES,
    "allocator_reuse",
    "reaching a tensor's raw storage lets a candidate reuse or alias memory that still holds an earlier answer",
    "untyped_storage",
    "_typed_storage",
)
_ban(
    ATTR_RULES,
    "reading_expected",
    "frame and namespace introspection reaches the judge's variables, where the expected answer may live",
    "f_back",
    "f_locals",
    "f_globals",
    "f_code",
    "gi_frame",
    "cr_frame",
    "tb_frame",
    "__globals__",
    "__builtins__",
    "__dict__",
    "__code__",
    "__closure__",
    "__subclasses__",
    "__mro__",
    "__bases__",
    "__doc__",
    "__loader__",
    "__spec__",
)
_ban(
    ATTR_RULES,
    "harness_patching",
    "these are the judge's timer and statistics; a candidate has no use for them",
    "elapsed_time",
    "do_bench",
    "perf_counter",
    "perf_counter_ns",
)
_ban(
    ATTR_RULES,
    "lazy_result",
    "these hooks make a tensor compute when read instead of when the kernel runs",
    "__torch_function__",
    "__torch_dispatch__",
)
_ban(
    ATTR_RULES,
    "lower_precision",
    "it lets matmuls and reductions run in reduced precision (TF32, fp16/bf16 accumulation)",
    "allow_tf32",
    "allow_fp16_reduced_precision_reduction",
    "allow_bf16_reduced_precision_reduction",
    "set_float32_matmul_precision",
)
_ban(
    ATTR_RULES,
    "result_forging",
    "it writes to the process's output streams, where GATE_RESULT is printed",
    "stdout",
    "stderr",
    "__stdout__",
    "__stderr__",
)

NAME_RULES: dict[str, tuple[str, str]] = {}
_ban(
    NAME_RULES,
    "reading_expected",
    "the module's own location and loader lead to the files around it, where the gate may be",
    "__builtins__",
    "__file__",
    "__loader__",
    "__spec__",
    "__cached__",
    "__path__",
)
_ban(
    NAME_RULES,
    "lazy_result",
    "these hooks make a tensor compute when read instead of when the kernel runs",
    "__torch_function__",
    "__torch_dispatch__",
)

BUILTIN_CALLS: dict[str, tuple[str, str]] = {}
_ban(
    BUILTIN_CALLS,
    "reading_expected",
    "it reads files or runs or inspects code the scan cannot see; the expected answer could be reached that way",
    "open",
    "exec",
    "eval",
    "compile",
    "__import__",
    "globals",
    "locals",
    "vars",
    "breakpoint",
    "input",
)
_ban(
    BUILTIN_CALLS,
    "result_forging",
    "a candidate has no reason to print; output on stdout can imitate the GATE_RESULT line",
    "print",
)
_ban(
    BUILTIN_CALLS,
    "cross_call_caching",
    "object identity lets a candidate recognise inputs it has seen and replay an earlier result",
    "id",
)

# Substrings of string constants (docstrings excepted).
STRING_RULES: list[tuple[str, str, str]] = [
    ("GATE_RESULT", "result_forging", "the judge's verdict line; writing it forges the result channel"),
    ("report.json", "result_forging", "the judge's report; writing it forges the result"),
    ("manifest.json", "result_forging", "the gate's manifest; only the test-writer writes it"),
    ("gates/", "gate_tampering", "a path into the locked gates, which hold the golden answers"),
    ("gates\\", "gate_tampering", "a path into the locked gates, which hold the golden answers"),
    (".safetensors", "gate_tampering", "the gate stores inputs and golden values as safetensors files"),
    ("golden", "gate_tampering", "the gate's expected values are its golden files"),
    (".tolerances.yaml", "gate_tampering", "the contract's tolerance table is part of the gate"),
    ("contracts/", "gate_tampering", "the contracts define the gate"),
    ("tasks/", "reference_import", "a path into the tasks, where the reference and baseline live"),
    ("reference.py", "reference_import", "the canonical reference's file"),
    ("baseline.py", "reference_import", "the baseline's file"),
    ("ferret/", "reference_import", "a path into the judge's own source"),
    ("/proc/", "reading_expected", "/proc exposes other processes' memory and environment"),
    ("sys.modules", "shadowing", "code that rewrites the module table, kept in a string"),
    ("sys.path", "shadowing", "code that rewrites the import path, kept in a string"),
    ("__torch_function__", "lazy_result", "a tensor-subclass hook named by string"),
    ("__torch_dispatch__", "lazy_result", "a tensor-subclass hook named by string"),
]
MODULE_FILE = re.compile(r"(^|[\\/])[A-Za-z_][\w.-]*\.(py|pyc|pth|so)$")
# Case-insensitive substrings of identifiers and strings that belong to the persisting-L2 controls.
PERSISTING_MARKERS = (
    "persisting",
    "accesspolicywindow",
    "access_policy_window",
    "cudastreamsetattribute",
    "cudadevicesetlimit",
    "cudart",
    "hitratio",
)

# Decorators that make a function a Triton kernel: inside one, tl.dot and @ are the candidate's own compute.
JIT_DECORATORS = {
    "triton.jit",
    "triton.autotune",
    "triton.heuristics",
    "triton.language.jit",
    "triton.runtime.jit",
    "triton.runtime.autotune",
    "triton.runtime.heuristics",
}
# Module-level values that are mutable containers: state that survives from one call of run to the next.
CONTAINER_CALLS = {
    "dict",
    "list",
    "set",
    "collections.defaultdict",
    "collections.OrderedDict",
    "collections.deque",
    "collections.Counter",
    "defaultdict",
    "OrderedDict",
    "deque",
    "Counter",
}
CONTAINER_MUTATORS = {"append", "extend", "insert", "update", "setdefault", "add", "appendleft", "extendleft", "__setitem__"}
# Methods that change run's inputs/outputs dicts themselves rather than the tensors in them.
DICT_MUTATORS = {"update", "pop", "popitem", "clear", "setdefault", "__setitem__", "__delitem__"}
# In-place methods that fill a tensor with a constant or random values.
CONSTANT_FILLS = {
    "zero_",
    "fill_",
    "normal_",
    "uniform_",
    "random_",
    "bernoulli_",
    "exponential_",
    "geometric_",
    "log_normal_",
    "cauchy_",
    "fill_diagonal_",
}
# Too common (ranks, strides, halves) to mean a test case even where a case uses them.
IGNORED_SHAPE_LITERALS = {0, 1, 2}
# torch.<name> attributes that are values, not compute functions.
TORCH_VALUE_NAMES = {
    "float",
    "double",
    "half",
    "bool",
    "long",
    "int",
    "short",
    "cfloat",
    "cdouble",
    "chalf",
    "strided",
    "sparse_coo",
    "sparse_csr",
    "contiguous_format",
    "channels_last",
    "channels_last_3d",
    "preserve_format",
    "inf",
    "pi",
    "e",
    "nan",
    "cuda",
    "backends",
    "version",
    "types",
    "layout",
    "memory_format",
}
# torch.<name> attributes named like dtypes (torch.int8, torch.float8_e4m3fn): values, not compute.
DTYPE_LIKE = re.compile(r"^(u?int|float|bfloat|complex|qu?int|bits)\d")


def lookup(table: dict[str, tuple[str, str]], path: str) -> tuple[str, str, str] | None:
    """Longest key of `table` that is `path` or a dotted prefix of it: (key, slug, why)."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in table:
            return (key, *table[key])
    return None


# The allowed imports as a table, so that `lookup` finds the longest allowed prefix of a path.
ALLOWED_TABLE: dict[str, tuple[str, str]] = {p: ("", "") for p in ALLOWED_IMPORTS}


def slugs_of(table: dict[str, tuple[str, str]]) -> list[str]:
    """The slugs a table bans for, in the order they first appear (one rule is registered per slug)."""
    return list(dict.fromkeys(slug for slug, _ in table.values()))


def examples(table: dict[str, tuple[str, str]], slug: str, most: int = 6) -> str:
    """The first few keys a table bans for `slug`, for a rule's description."""
    keys = [key for key, (s, _) in table.items() if s == slug]
    return ", ".join(keys[:most]) + (" and others" if len(keys) > most else "")
