"""Static integrity scan of a candidate's source: patterns from shared/reference/cheats.md, found on the AST.

A candidate is one Python file defining `run(inputs, outputs, params, trace=None)`. Honest candidates
import math, torch and triton; they use torch only to allocate, view and cast tensors and to launch
their Triton kernels, and do their math inside `@triton.jit` functions. Everything else that reaches
for a library, the file system, the clock, other threads, the allocator, state kept across calls or the
judge's own files is reported as a `Finding` that names the cheat it enables.

    result = scan_file("candidate.py", shape_constants={16, 512, 7168})
    if not result.passed:
        for f in result.findings:
            print(f.line, f.cheat, f.message)

The scan parses and never imports or runs the candidate. It is one layer: what it cannot see (a launch
never taken at run time, floating-point compute reached by a path it does not know, impossible speed)
is for the runtime checks. Lines are 1-based, columns 1-based.
"""

from __future__ import annotations

import ast
import hashlib
import operator
import re
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, Field

# slug -> entries of shared/reference/cheats.md. `syntax_error` is the one slug outside the catalogue.
CHEATS: dict[str, list[int]] = {
    "allocator_reuse": [1],
    "constant_output": [2],
    "input_mutation": [3],
    "lower_precision": [4],
    "hardcoded_cases": [5],
    "unwritten_output": [6],
    "nan_wildcard": [7],
    "decoy_kernel": [8],
    "library_call": [9],
    "reference_import": [10],
    "reading_expected": [11],
    "shadowing": [12],
    "side_stream_or_thread": [13],
    "lazy_result": [14],
    "harness_patching": [15],
    "cross_call_caching": [16],
    "warmup_detection": [17],
    "persisting_l2": [18],
    "impossible_speed": [19],
    "gate_tampering": [20],
    "result_forging": [21],
    "syntax_error": [],
}

_WORDS = {
    "allocator_reuse": "allocator reuse",
    "constant_output": "constant output",
    "input_mutation": "input mutation",
    "lower_precision": "lower precision",
    "hardcoded_cases": "hard-coded test cases",
    "unwritten_output": "unwritten output",
    "nan_wildcard": "NaN as a wildcard",
    "decoy_kernel": "decoy kernel",
    "library_call": "library call",
    "reference_import": "reference import",
    "reading_expected": "reading the expected answer",
    "shadowing": "shadowing",
    "side_stream_or_thread": "side stream or thread",
    "lazy_result": "lazy result",
    "harness_patching": "harness patching",
    "cross_call_caching": "cross-call caching",
    "warmup_detection": "warm-up detection",
    "persisting_l2": "persisting L2",
    "impossible_speed": "impossible speed",
    "gate_tampering": "gate tampering",
    "result_forging": "result forging",
    "syntax_error": "syntax error",
}


class Finding(BaseModel):
    cheat: str = Field(description="Slug from CHEATS.")
    catalogue: list[int] = Field(description="Entries of cheats.md this pattern belongs to.")
    line: int = Field(description="1-based line of the offending code.")
    col: int = Field(description="1-based column of the offending code.")
    code: str = Field(description="The offending source line, stripped.")
    message: str = Field(description="What was found and why it is banned, naming the cheat in words.")


class ScanResult(BaseModel):
    path: str
    sha256: str = Field(description="sha256 of the scanned source.")
    findings: list[Finding]

    @property
    def passed(self) -> bool:
        return not self.findings


# ------------------------------------------------------------------------------------------------
# Tables. Dotted paths match themselves and everything under them ("torch.nn" matches
# "torch.nn.functional.softmax"); the longest matching key wins.
# ------------------------------------------------------------------------------------------------

# Imports a Triton candidate may have. Everything not listed here or below is a library call.
_ALLOWED_IMPORTS = {
    "__future__", "math", "cmath", "typing", "typing_extensions", "dataclasses", "functools", "itertools",
    "collections", "enum", "numbers", "operator", "abc", "contextlib", "copy", "re", "string", "struct",
    "fractions", "decimal", "bisect", "heapq", "warnings", "types", "statistics", "random", "json",
    "torch", "torch.cuda", "torch.types", "torch.backends",
    "triton", "triton.language", "triton.runtime", "triton.compiler", "triton.tools",
}

_LIB = "library_call"
_IMPORT_RULES: dict[str, tuple[str, str]] = {}


def _rule(table: dict, slug: str, why: str, *paths: str) -> None:
    for p in paths:
        table[p] = (slug, why)


_rule(_IMPORT_RULES, "reference_import",
      "the candidate must compute the op itself, not return what the project's reference, baseline or judge, "
      "or a model library's implementation, computes",
      "tasks", "ferret", "reference", "baseline", "transformers", "vllm", "flash_attn", "flashinfer", "xformers",
      "apex", "liger_kernel", "sglang")
_rule(_IMPORT_RULES, _LIB, "it is a library of ready-made compute; the candidate must write the kernel",
      "torch.nn", "torch.special", "torch.linalg", "torch.fft", "torch.ops", "torch.library", "torch._C",
      "torch._ops", "torch._refs", "torch._prims", "torch._decomp", "torch._inductor", "torch._dynamo",
      "torch.compiler", "torch.sparse", "torch.func", "torch.autograd", "torch.testing", "torch.distributed",
      "torch.jit", "torch.hub", "torch.ao", "torch.quantization", "torch.export", "torch.fx", "torch.masked",
      "torch.nested", "torch.utils", "torch._higher_order_ops", "torch.signal", "triton.ops")
_rule(_IMPORT_RULES, "reading_expected",
      "it reaches the file system, the interpreter's frames or objects, or raw memory, where the expected "
      "answer or the judge's state could be read",
      "os", "posix", "nt", "pathlib", "io", "glob", "fnmatch", "shutil", "pickle", "_pickle", "dill", "cloudpickle",
      "marshal", "shelve", "gc", "inspect", "sys", "builtins", "importlib", "pkgutil", "runpy", "zipimport",
      "ctypes", "cffi", "mmap", "tempfile", "safetensors", "h5py", "traceback", "linecache", "tokenize", "code",
      "codeop", "dis", "socket", "urllib", "http", "requests", "zipfile", "tarfile", "sqlite3", "fileinput",
      "tracemalloc", "sysconfig")
_rule(_IMPORT_RULES, "side_stream_or_thread",
      "work in another thread, process or stream escapes the timed region the judge measures",
      "threading", "_thread", "concurrent", "multiprocessing", "asyncio", "subprocess", "signal", "sched",
      "torch.multiprocessing", "torch.cuda.streams")
_rule(_IMPORT_RULES, "harness_patching",
      "a candidate has no use for clocks, benchmarking or mocking; they serve to fake or patch the timing",
      "time", "timeit", "triton.testing", "unittest", "cProfile", "profile")
_rule(_IMPORT_RULES, "cross_call_caching",
      "it keys state on object identity or replays recorded work across calls",
      "weakref", "torch.cuda.graphs")
_rule(_IMPORT_RULES, "shadowing", "it changes how the interpreter finds modules, which the judge relies on",
      "site", "sitecustomize", "usercustomize")
_rule(_IMPORT_RULES, "persisting_l2",
      "raw CUDA runtime bindings can set a persisting-L2 window that survives the judge's cache flush",
      "cupy", "cupyx", "cuda", "pycuda")
_rule(_IMPORT_RULES, "result_forging", "it writes to the output streams or runs code at exit, where a verdict "
      "could be forged", "logging", "atexit")
_rule(_IMPORT_RULES, "gate_tampering", "recomputing file digests is what re-locking an edited gate takes",
      "hashlib")
_rule(_IMPORT_RULES, "lazy_result", "tensor subclasses and dispatch modes defer or fake the computation",
      "torch.utils._python_dispatch", "torch.overrides", "torch._subclasses")
_rule(_IMPORT_RULES, "allocator_reuse", "steering the caching allocator can hand back memory that still holds "
      "an earlier answer", "torch.cuda.memory")
_rule(_IMPORT_RULES, "lower_precision", "autocast silently computes in lower precision",
      "torch.amp", "torch.cuda.amp", "torch.cpu.amp")

# References (names, attribute chains, from-imports) that are banned wherever they appear.
_MENTION_RULES: dict[str, tuple[str, str]] = {}
_rule(_MENTION_RULES, "side_stream_or_thread",
      "a side stream or event lets work run outside the stream the judge's end event waits for",
      "torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.set_stream", "torch.cuda.Event",
      "torch.cuda.current_stream", "torch.cuda.default_stream", "torch.cuda.ExternalStream",
      "torch.cuda.StreamContext", "torch.cuda.streams", "torch.Stream", "torch.Event", "torch.multiprocessing")
_rule(_MENTION_RULES, "side_stream_or_thread",
      "work in another thread or process escapes the timed region the judge measures",
      "threading", "_thread", "concurrent", "multiprocessing", "asyncio", "subprocess")
_rule(_MENTION_RULES, "side_stream_or_thread", "a child process escapes the judge's timing and watchdog",
      "os.fork", "os.forkpty", "os.system", "os.popen", "os.spawnl", "os.spawnv", "os.spawnve", "os.spawnlp",
      "os.posix_spawn", "os.posix_spawnp", "os.execv", "os.execve", "os.execl", "os.execvp")
_rule(_MENTION_RULES, "cross_call_caching",
      "CUDA graphs record work once and replay it, so later calls need not compute",
      "torch.cuda.graph", "torch.cuda.graphs", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables")
_rule(_MENTION_RULES, "cross_call_caching",
      "a memoizing cache returns an earlier call's result instead of computing this one",
      "functools.lru_cache", "functools.cache", "functools.cached_property")
_rule(_MENTION_RULES, "cross_call_caching", "weak references key state on object identity across calls", "weakref")
_rule(_MENTION_RULES, "allocator_reuse",
      "steering the caching allocator can hand back memory that still holds an earlier answer",
      "torch.cuda.memory", "torch.cuda.caching_allocator_alloc", "torch.cuda.caching_allocator_delete",
      "torch.cuda.empty_cache", "torch.cuda.MemPool", "torch.cuda.CUDAPluggableAllocator",
      "torch.cuda.change_current_allocator", "torch.cuda.set_per_process_memory_fraction", "torch.UntypedStorage",
      "torch.TypedStorage", "torch.Storage")
_rule(_MENTION_RULES, "lazy_result",
      "tensor subclasses and dispatch hooks return placeholders that compute when read, outside the timed region",
      "torch.utils._python_dispatch", "torch.overrides", "torch._C._disabled_torch_function_impl",
      "torch.Tensor._make_subclass", "torch._C.DisableTorchFunction", "torch._C.DisableTorchFunctionSubclass",
      "torch._subclasses")
_rule(_MENTION_RULES, "reading_expected",
      "it reads the interpreter's frames or live objects, where the judge's data lives",
      "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "sys.exc_info",
      "gc.get_objects", "gc.get_referrers", "gc.get_referents", "inspect")
_rule(_MENTION_RULES, "reading_expected", "it loads tensors from files, where the expected answer could be read",
      "numpy.load", "numpy.fromfile", "numpy.memmap", "torch.load", "torch.from_file", "safetensors",
      "builtins.open", "io.open")
_rule(_MENTION_RULES, "shadowing",
      "changing the module table or the import path replaces what the judge imports",
      "sys.modules", "sys.path", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache",
      "os.environ", "os.putenv", "os.chdir", "importlib.reload")
_rule(_MENTION_RULES, "harness_patching", "do_bench is the judge's timer; a candidate has no use for it",
      "triton.testing")
_rule(_MENTION_RULES, "lower_precision",
      "it lets matmuls and reductions run in reduced precision (TF32, fp16/bf16 accumulation, autocast)",
      "torch.set_float32_matmul_precision", "torch.set_default_dtype", "torch.autocast", "torch.amp",
      "torch.cuda.amp", "torch.cpu.amp")
_rule(_MENTION_RULES, "result_forging", "it writes to the process's output streams, where GATE_RESULT is printed",
      "sys.stdout", "sys.stderr", "sys.__stdout__", "sys.__stderr__", "os.write", "os.dup2", "builtins.print")
_rule(_MENTION_RULES, "nan_wildcard",
      "a NaN made in the launcher can serve as a wildcard in the comparison", "math.nan", "torch.nan",
      "numpy.nan", "numpy.NaN")

# torch.X(...) calls a candidate may make: allocation and metadata only.
_TORCH_ALLOWED_CALLS = {
    f"torch.{name}"
    for name in (
        "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
        "arange", "tensor", "as_tensor", "device", "Size", "is_tensor", "is_floating_point", "finfo", "iinfo",
        "get_default_dtype", "no_grad", "inference_mode", "promote_types",
        "cuda.is_available", "cuda.current_device", "cuda.get_device_properties", "cuda.get_device_capability",
        "cuda.device_count", "cuda.device", "cuda.get_device_name",
    )
}

# Tensor methods that compute (checked outside @triton.jit only). max/min/item stay allowed: launchers read
# integer metadata with them (cache_lens.max()); floating-point compute is caught at run time.
_COMPUTE_METHODS = {
    "matmul", "mm", "bmm", "baddbmm", "addmm", "addbmm", "addmv", "mv", "dot", "outer", "einsum", "softmax",
    "log_softmax", "exp", "exp2", "expm1", "log", "log2", "log1p", "sum", "mean", "var", "std", "norm", "rsqrt",
    "sqrt", "pow", "amax", "amin", "logsumexp", "cumsum", "cumprod", "sort", "argsort", "topk", "sigmoid", "tanh",
    "relu", "gelu", "silu", "erf", "reciprocal", "cos", "sin", "prod", "argmax", "argmin", "mul", "div", "square",
    "abs", "clamp", "masked_fill", "where", "lerp", "addcmul", "addcdiv", "linear", "layer_norm", "rms_norm",
    "scaled_dot_product_attention", "matrix_power", "__matmul__", "__rmatmul__",
}
# In-place forms whose out-of-place name is ambiguous with Python builtins (set.add, re.sub).
_INPLACE_ONLY_COMPUTE = {"add", "sub"}

# Dtype names below float32.
_LOW_DTYPE_NAMES = {"float16", "half", "bfloat16", "fp16", "bf16"}
_LOW_DTYPE_PREFIXES = ("float8", "fp8", "float4", "fp4")
_DTYPE_ROOTS = ("torch", "triton.language", "triton", "numpy")

# Attribute names banned on any object.
_ATTR_RULES: dict[str, tuple[str, str]] = {}
_rule(_ATTR_RULES, "cross_call_caching",
      "tensor addresses and version counters identify inputs across calls; keying on them lets a candidate "
      "replay an earlier result", "data_ptr", "_cdata", "_version")
_rule(_ATTR_RULES, "allocator_reuse", "reaching a tensor's raw storage lets a candidate reuse or alias memory "
      "that still holds an earlier answer", "untyped_storage", "_typed_storage")
_rule(_ATTR_RULES, "reading_expected",
      "frame and namespace introspection reaches the judge's variables, where the expected answer may live",
      "f_back", "f_locals", "f_globals", "f_code", "gi_frame", "cr_frame", "tb_frame", "__globals__",
      "__builtins__", "__dict__", "__code__", "__closure__", "__subclasses__", "__mro__", "__bases__", "__doc__",
      "__loader__", "__spec__")
_rule(_ATTR_RULES, "harness_patching", "these are the judge's timer and statistics; a candidate has no use for them",
      "elapsed_time", "do_bench", "perf_counter", "perf_counter_ns")
_rule(_ATTR_RULES, "lazy_result", "these hooks make a tensor compute when read instead of when the kernel runs",
      "__torch_function__", "__torch_dispatch__")
_rule(_ATTR_RULES, "lower_precision",
      "it lets matmuls and reductions run in reduced precision (TF32, fp16/bf16 accumulation)",
      "allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
      "set_float32_matmul_precision")
_rule(_ATTR_RULES, "result_forging", "it writes to the process's output streams, where GATE_RESULT is printed",
      "stdout", "stderr", "__stdout__", "__stderr__")

_NAME_RULES: dict[str, tuple[str, str]] = {}
_rule(_NAME_RULES, "reading_expected",
      "the module's own location and loader lead to the files around it, where the gate may be",
      "__builtins__", "__file__", "__loader__", "__spec__", "__cached__", "__path__")
_rule(_NAME_RULES, "lazy_result", "these hooks make a tensor compute when read instead of when the kernel runs",
      "__torch_function__", "__torch_dispatch__")

_BUILTIN_CALLS: dict[str, tuple[str, str]] = {}
_rule(_BUILTIN_CALLS, "reading_expected",
      "it reads files or runs or inspects code the scan cannot see; the expected answer could be reached that way",
      "open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint", "input")
_rule(_BUILTIN_CALLS, "result_forging",
      "a candidate has no reason to print; output on stdout can imitate the GATE_RESULT line", "print")
_rule(_BUILTIN_CALLS, "cross_call_caching",
      "object identity lets a candidate recognise inputs it has seen and replay an earlier result", "id")

# Substrings of string constants (docstrings excepted).
_STRING_RULES: list[tuple[str, str, str]] = [
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
_MODULE_FILE = re.compile(r"(^|[\\/])[A-Za-z_][\w.-]*\.(py|pyc|pth|so)$")
# Case-insensitive substrings of identifiers and strings that belong to the persisting-L2 controls.
_PERSISTING_MARKERS = ("persisting", "accesspolicywindow", "access_policy_window", "cudastreamsetattribute",
                       "cudadevicesetlimit", "cudart", "hitratio")

_JIT_DECORATORS = {"triton.jit", "triton.autotune", "triton.heuristics", "triton.language.jit",
                   "triton.runtime.jit", "triton.runtime.autotune", "triton.runtime.heuristics"}
_CONTAINER_CALLS = {"dict", "list", "set", "collections.defaultdict", "collections.OrderedDict", "collections.deque",
                    "collections.Counter", "defaultdict", "OrderedDict", "deque", "Counter"}
_CONTAINER_MUTATORS = {"append", "extend", "insert", "update", "setdefault", "add", "appendleft", "extendleft",
                       "__setitem__"}
_DICT_MUTATORS = {"update", "pop", "popitem", "clear", "setdefault", "__setitem__", "__delitem__"}
_CONSTANT_FILLS = {"zero_", "fill_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_", "geometric_",
                   "log_normal_", "cauchy_", "fill_diagonal_"}
_IGNORED_SHAPE_LITERALS = {0, 1, 2}
# torch.<name> attributes that are values, not compute functions.
_TORCH_VALUE_NAMES = {"float", "double", "half", "bool", "long", "int", "short", "cfloat", "cdouble", "chalf",
                      "strided", "sparse_coo", "sparse_csr", "contiguous_format", "channels_last",
                      "channels_last_3d", "preserve_format", "inf", "pi", "e", "nan", "cuda", "backends", "version",
                      "types", "layout", "memory_format"}
_DTYPE_LIKE = re.compile(r"^(u?int|float|bfloat|complex|qu?int|bits)\d")


def _lookup(table: dict[str, tuple[str, str]], path: str) -> tuple[str, str, str] | None:
    """Longest key of `table` that is `path` or a dotted prefix of it: (key, slug, why)."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in table:
            return (key, *table[key])
    return None


def _is_low_dtype_name(name: str) -> bool:
    return name in _LOW_DTYPE_NAMES or name.startswith(_LOW_DTYPE_PREFIXES)


def _root_name(expr: ast.AST) -> str | None:
    """The name an expression hangs off: `x` for x.a[0].view(...).b; None for calls of plain functions."""
    while True:
        if isinstance(expr, (ast.Attribute, ast.Subscript, ast.Starred)):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        else:
            break
    return expr.id if isinstance(expr, ast.Name) else None


def _peel(expr: ast.AST) -> list[ast.AST]:
    """Elements of tuple/list/set displays and dict values, recursively; the expression itself otherwise."""
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        return [e for elt in expr.elts for e in _peel(elt)]
    if isinstance(expr, ast.Dict):
        return [e for v in expr.values for e in _peel(v)]
    return [expr]


def _names_in(target: ast.AST) -> list[str]:
    """Names a binding target binds (not the base of `a[i] = ...` or `a.b = ...`)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _names_in(elt)]
    if isinstance(target, ast.Starred):
        return _names_in(target.value)
    return []


_CMP_OPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not}
_UNKNOWN = object()


def _const_value(expr: ast.AST):
    """The value of a test built only from literals (`False`, `0`, `not True`, `1 == 2`), else _UNKNOWN."""
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        v = _const_value(expr.operand)
        return _UNKNOWN if v is _UNKNOWN else (not v)
    if isinstance(expr, ast.BoolOp):
        values = [_const_value(v) for v in expr.values]
        if any(v is _UNKNOWN for v in values):
            return _UNKNOWN
        return all(values) if isinstance(expr.op, ast.And) else any(values)
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and type(expr.ops[0]) in _CMP_OPS:
        left, right = _const_value(expr.left), _const_value(expr.comparators[0])
        if left is _UNKNOWN or right is _UNKNOWN:
            return _UNKNOWN
        try:
            return _CMP_OPS[type(expr.ops[0])](left, right)
        except TypeError:
            return _UNKNOWN
    return _UNKNOWN


def _is_rank_query(expr: ast.AST) -> bool:
    """x.dim(), x.ndim, x.ndimension(), len(x.shape), len(x.size()): ranks, not case dims."""
    if isinstance(expr, ast.Attribute) and expr.attr == "ndim":
        return True
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("dim", "ndimension"):
            return True
        if isinstance(expr.func, ast.Name) and expr.func.id == "len" and expr.args:
            arg = expr.args[0]
            if isinstance(arg, ast.Attribute) and arg.attr == "shape":
                return True
            if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "size":
                return True
    return False


class _Function:
    """What the scan tracks per function while walking it."""

    def __init__(self, node: ast.FunctionDef | ast.AsyncFunctionDef, jit: bool, is_run: bool, derived: set[str],
                 inputs: set[str], outputs: set[str], inputs_param: str | None, outputs_param: str | None):
        self.node = node
        self.jit = jit
        self.is_run = is_run
        self.derived = derived  # names holding the function's arguments or views of them
        self.inputs = inputs  # in run: names holding the inputs dict or tensors from it
        self.outputs = outputs  # in run: names holding the outputs dict or tensors from it
        self.inputs_param = inputs_param
        self.outputs_param = outputs_param


class _Scanner(ast.NodeVisitor):
    def __init__(self, source: str, tree: ast.Module, shape_constants: frozenset[int]):
        self.lines = source.splitlines()
        self.tree = tree
        self.shape_constants = shape_constants - _IGNORED_SHAPE_LITERALS
        self.found: dict[tuple[str, int, int], Finding] = {}
        self.stack: list[_Function] = []
        self.aliases: dict[str, str] = {}
        self.docstrings: set[int] = set()
        self.jit_defs: set[int] = set()
        self.top_functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.containers: set[str] = set()
        self.int_constants: dict[str, int] = {}
        self._prepare()

    # -------------------------------------------------------------------------------------------- output
    def add(self, node: ast.AST, cheat: str, detail: str) -> None:
        line = getattr(node, "lineno", 1) or 1
        col = (getattr(node, "col_offset", 0) or 0) + 1
        key = (cheat, line, col)
        if key in self.found:
            return
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        numbers = CHEATS[cheat]
        where = f" (cheats.md {', '.join(map(str, numbers))})" if numbers else ""
        self.found[key] = Finding(cheat=cheat, catalogue=list(numbers), line=line, col=col, code=code,
                                  message=f"{_WORDS[cheat]}{where}: {detail}")

    def findings(self) -> list[Finding]:
        return sorted(self.found.values(), key=lambda f: (f.line, f.col, f.cheat))

    # -------------------------------------------------------------------------------------- preparation
    def _prepare(self) -> None:
        tree = self.tree
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                        and isinstance(first.value.value, str):
                    self.docstrings.add(id(first.value))
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        # Names bound to a module or to something reached through one (`sm = torch.softmax`), to a fixpoint.
        assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)]
        for _ in range(8):
            changed = False
            for node in assigns:
                path = self.resolve(node.value)
                if path is None:
                    continue
                for target in node.targets:
                    if isinstance(target, ast.Name) and self.aliases.get(target.id) != path \
                            and target.id not in self.aliases:
                        self.aliases[target.id] = path
                        changed = True
            if not changed:
                break
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and self._is_jit(node):
                self.jit_defs.add(id(node))
        stores: dict[str, int] = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                stores[n.id] = stores.get(n.id, 0) + 1
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.top_functions[stmt.name] = stmt
            targets, value = [], None
            if isinstance(stmt, ast.Assign):
                targets, value = stmt.targets, stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                targets, value = [stmt.target], stmt.value
            for target in targets:
                if not isinstance(target, ast.Name):
                    continue
                if self._is_container(value):
                    self.containers.add(target.id)
                # Only names bound once, here, to an int literal stand for that int in comparisons.
                if isinstance(value, ast.Constant) and type(value.value) is int and stores.get(target.id) == 1:
                    self.int_constants[target.id] = value.value

    def _is_container(self, value: ast.AST | None) -> bool:
        if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
            return True
        if isinstance(value, ast.Call):
            name = self.resolve(value.func) or (value.func.id if isinstance(value.func, ast.Name) else None)
            return name in _CONTAINER_CALLS
        return False

    def _is_jit(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if self.resolve(target) in _JIT_DECORATORS:
                return True
        return False

    def resolve(self, expr: ast.AST) -> str | None:
        """The dotted path an expression names through the module's imports (`F.softmax` ->
        `torch.nn.functional.softmax`), or None when it does not go through an import."""
        if isinstance(expr, ast.Name):
            return self.aliases.get(expr.id)
        if isinstance(expr, ast.Attribute):
            base = self.resolve(expr.value)
            return f"{base}.{expr.attr}" if base else None
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Name) and func.id == "getattr" and len(expr.args) >= 2 \
                    and isinstance(expr.args[1], ast.Constant) and isinstance(expr.args[1].value, str):
                base = self.resolve(expr.args[0])
                return f"{base}.{expr.args[1].value}" if base else None
            if expr.args and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, str):
                if isinstance(func, ast.Name) and func.id == "__import__":
                    return expr.args[0].value.split(".")[0]
                if self.resolve(func) == "importlib.import_module":
                    return expr.args[0].value
        return None

    def _derive(self, func: ast.AST, seeds: set[str]) -> set[str]:
        """Names that hold `seeds` or views, items or attributes of them, within `func` (flow-insensitive)."""
        names = set(seeds)
        if not names:
            return names
        binds: list[tuple[ast.AST, ast.AST]] = []
        for node in ast.walk(func):
            if isinstance(node, ast.Assign):
                binds += [(t, node.value) for t in node.targets]
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                binds.append((node.target, node.value))
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                binds.append((node.target, node.iter))
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                binds.append((node.optional_vars, node.context_expr))

        def holds(value: ast.AST) -> bool:
            return any(_root_name(e) in names for e in _peel(value))

        for _ in range(10):
            before = len(names)
            for target, value in binds:
                if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                        and len(target.elts) == len(value.elts):
                    for t, v in zip(target.elts, value.elts):
                        if holds(v):
                            names.update(_names_in(t))
                elif holds(value):
                    names.update(_names_in(target))
            if len(names) == before:
                break
        return names

    # -------------------------------------------------------------------------------------- contexts
    @property
    def fn(self) -> _Function | None:
        return self.stack[-1] if self.stack else None

    @property
    def in_jit(self) -> bool:
        return any(f.jit for f in self.stack)

    @property
    def run_ctx(self) -> _Function | None:
        return self.stack[0] if self.stack and self.stack[0].is_run else None

    # ---------------------------------------------------------------------------------------- walking
    def scan(self) -> list[Finding]:
        self.visit(self.tree)
        self._check_run()
        self._check_unreachable()
        self._check_unlaunched_kernels()
        return self.findings()

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add(node, "lazy_result", f"defines {node.name}, a hook that makes a tensor compute when it is read "
                     "instead of when the kernel runs")
        self._check_persisting_identifier(node, node.name)
        for dec in node.decorator_list:
            if not isinstance(dec, ast.Call):
                self._check_torch_reference(dec)
            self.visit(dec)
        self.visit(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
        params += [a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None]
        is_run = not self.stack and node.name == "run" and self.top_functions.get("run") is node
        positional = [a.arg for a in node.args.posonlyargs + node.args.args]
        inputs_param = positional[0] if is_run and len(positional) >= 1 else None
        outputs_param = positional[1] if is_run and len(positional) >= 2 else None
        ctx = _Function(
            node, jit=id(node) in self.jit_defs, is_run=is_run, derived=self._derive(node, set(params)),
            inputs=self._derive(node, {inputs_param}) if inputs_param else set(),
            outputs=self._derive(node, {outputs_param}) if outputs_param else set(),
            inputs_param=inputs_param, outputs_param=outputs_param,
        )
        self.stack.append(ctx)
        for stmt in node.body:
            self.visit(stmt)
        self.stack.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            path = self.resolve(base) or ""
            last = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""
            if path.endswith(".Tensor") or last == "Tensor":
                self.add(node, "lazy_result", f"class {node.name} subclasses {ast.unparse(base)}: a tensor subclass "
                         "can defer or fake the computation until its values are read")
        self._check_persisting_identifier(node, node.name)
        self.generic_visit(node)

    # imports
    def _classify_import(self, node: ast.AST, path: str, shown: str) -> None:
        hit = _lookup(_MENTION_RULES, path)
        if hit:
            self.add(node, hit[1], f"imports {shown}: {hit[2]}")
        allowed = _lookup({p: ("", "") for p in _ALLOWED_IMPORTS}, path)
        rule = _lookup(_IMPORT_RULES, path)
        if rule and (not allowed or len(rule[0]) >= len(allowed[0])):
            self.add(node, rule[1], f"imports {shown}: {rule[2]}")
        elif not allowed and not hit:
            self.add(node, _LIB, f"imports {shown}, a module outside what a Triton candidate needs (math, torch, "
                     "triton): the candidate must write the kernel, not call a library")

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._classify_import(node, a.name, a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.add(node, "reference_import", f"relative import ({'.' * node.level}{node.module or ''}): a "
                     "candidate is one self-contained file; a relative import reaches the package around it, "
                     "where the reference or the judge lives")
            return
        module = node.module or ""
        self._classify_import(node, module, module)
        if any(a.name == "*" for a in node.names) and module.split(".")[0] in ("torch", "numpy"):
            self.add(node, _LIB, f"from {module} import *: every PyTorch function becomes a bare name the scan "
                     "cannot tell from the candidate's own")
        for a in node.names:
            if a.name != "*":
                full = f"{module}.{a.name}"
                hit = _lookup(_MENTION_RULES, full)
                if hit:
                    self.add(node, hit[1], f"imports {full}: {hit[2]}")
                rule = _lookup(_IMPORT_RULES, full)
                if rule and rule[0] != module and not _lookup(_IMPORT_RULES, module):
                    self.add(node, rule[1], f"imports {full}: {rule[2]}")

    # statements
    def visit_Try(self, node: ast.AST) -> None:
        if getattr(node, "handlers", None):
            self.add(node, _LIB, "try/except: a fallback path the gate does not judge (a failing kernel can fall "
                     "back to a library or to whatever is in the output)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Global(self, node: ast.Global) -> None:
        self.add(node, "warmup_detection", f"global {', '.join(node.names)}: state rebound across calls can count "
                 "calls and tell the warm-up from the timed runs")
        self.generic_visit(node)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.add(node, "warmup_detection", f"nonlocal {', '.join(node.names)}: state kept in a closure across calls "
                 "can count calls and tell the warm-up from the timed runs")
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        fn = self.fn
        if fn is not None and fn.is_run and node.value is not None \
                and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            self.add(node, "unwritten_output", "run returns a value; the ABI ignores it: the judge reads only the "
                     "outputs it allocated, which must be written in place")
        self.generic_visit(node)

    def _check_dead_test(self, node: ast.AST, test: ast.AST, orelse: list | ast.AST | None, kind: str) -> None:
        value = _const_value(test)
        if value is _UNKNOWN:
            return
        if not value:
            self.add(node, "decoy_kernel", f"`{kind} {ast.unparse(test)}`: a branch that never runs; code there "
                     "(a kernel, a launch) is a decoy")
        elif orelse and not (kind == "while"):
            first = orelse[0] if isinstance(orelse, list) else orelse
            self.add(first, "decoy_kernel", f"the else of `{kind} {ast.unparse(test)}` never runs; code there is "
                     "a decoy")

    def visit_If(self, node: ast.If) -> None:
        self._check_dead_test(node, node.test, node.orelse, "if")
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._check_dead_test(node, node.test, node.orelse, "while")
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._check_dead_test(node, node.test, node.orelse, "if")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_store(target, node.value, augmented=False)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._check_store(node.target, node.value, augmented=False)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_store(node.target, node.value, augmented=True)
        if isinstance(node.op, ast.MatMult) and not self.in_jit:
            self._matmul(node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_store(target, None, augmented=False)
        self.generic_visit(node)

    def _check_store(self, target: ast.AST, value: ast.AST | None, augmented: bool) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._check_store(elt, None, augmented)
            return
        if isinstance(target, ast.Starred):
            target = target.value
        if isinstance(target, ast.Attribute):
            self._check_attribute_store(target)
        elif isinstance(target, ast.Subscript):
            self._check_subscript_store(target, value, augmented)

    def _check_attribute_store(self, target: ast.Attribute) -> None:
        shown = ast.unparse(target)
        base_path = self.resolve(target.value)
        if target.attr in _ATTR_RULES and _ATTR_RULES[target.attr][0] == "lower_precision":
            self.add(target, "lower_precision", f"sets {shown}: {_ATTR_RULES[target.attr][1]}")
            return
        if target.attr == "__class__":
            self.add(target, "lazy_result", f"assigns {shown}: swapping a tensor's class makes it a subclass that "
                     "can compute when read")
            return
        if base_path is not None:
            full = f"{base_path}.{target.attr}"
            hit = _lookup(_MENTION_RULES, full)
            shown = shown if shown == full else f"{shown} ({full})"
            if base_path.split(".")[0] in ("builtins", "sys") or (hit and hit[1] == "shadowing"):
                self.add(target, "shadowing", f"assigns {shown}: it replaces what the judge's code imports "
                         "or finds in the interpreter")
            else:
                self.add(target, "harness_patching", f"assigns {shown}: patching an attribute of an imported "
                         "module replaces functions the judge itself calls (timers, synchronize, comparisons)")
            return
        if target.attr in ("synchronize", "elapsed_time", "perf_counter", "do_bench", "record", "wait_event"):
            self.add(target, "harness_patching", f"assigns {shown}: replacing the timer's methods fakes the clock")
            return
        if isinstance(target.value, ast.Name) and target.value.id in self.top_functions:
            self.add(target, "warmup_detection", f"assigns {shown}: an attribute on a function keeps state across "
                     "calls and can count them to tell the warm-up from the timed runs")
            return
        run = self.run_ctx
        root = _root_name(target.value)
        if run is not None and root is not None and target.attr in ("data", "grad", "storage"):
            if root in run.inputs:
                self.add(target, "input_mutation", f"assigns {shown}: rebinding an input tensor's data changes the "
                         "input the judge hashes")
            elif root in run.outputs:
                self.add(target, "unwritten_output", f"assigns {shown}: rebinding the output's data replaces the "
                         "judge's tensor instead of writing into it")

    def _check_subscript_store(self, target: ast.Subscript, value: ast.AST | None, augmented: bool) -> None:
        shown = ast.unparse(target)
        base = target.value
        base_path = self.resolve(base)
        if base_path is not None:
            hit = _lookup(_MENTION_RULES, base_path)
            slug = "shadowing" if (hit and hit[1] == "shadowing") or base_path.startswith(("sys", "builtins")) \
                else "harness_patching"
            self.add(target, slug, f"writes {shown}{'' if shown.startswith(base_path) else f' ({base_path})'}: it changes state of an imported module that the "
                     "judge's code relies on")
            return
        run = self.run_ctx
        if run is not None and isinstance(base, ast.Name):
            if base.id == run.outputs_param:
                self.add(target, "unwritten_output", f"assigns {shown}: rebinding an entry of outputs replaces the "
                         "judge's NaN-filled tensor instead of writing into it; the judge reads its own tensor")
                return
            if base.id == run.inputs_param:
                self.add(target, "input_mutation", f"assigns {shown}: replacing an entry of inputs changes what a "
                         "later check on the same objects would see")
                return
        root = _root_name(base)
        if run is not None and root is not None:
            if root in run.inputs:
                self.add(target, "input_mutation", f"writes {shown} from the launcher: it changes an input tensor "
                         "(only inout inputs may change, and only through the candidate's kernel)")
                return
            if root in run.outputs:
                if value is not None and isinstance(value, (ast.Constant, ast.UnaryOp)) \
                        and _const_value(value) is not _UNKNOWN:
                    self.add(target, "constant_output", f"writes the constant {ast.unparse(value)} into the output: "
                             "a constant output passes only where the true output is tiny")
                else:
                    self.add(target, _LIB, f"writes {shown} with a PyTorch indexing copy instead of the candidate's "
                             "kernel")
                return
        fn = self.fn
        if fn is not None and isinstance(base, ast.Name) and base.id in self.containers:
            reads_itself = value is not None and any(isinstance(n, ast.Name) and n.id == base.id
                                                     for n in ast.walk(value))
            if augmented or reads_itself:
                self.add(target, "warmup_detection", f"updates {shown}, module-level state, from its own value inside "
                         "a function: a counter kept across calls can tell the warm-up from the timed runs")
            elif value is not None and self._holds_arguments(value, fn):
                self.add(target, "cross_call_caching", f"stores {ast.unparse(value)} (an argument or a view of it) in "
                         f"the module-level {base.id}: state kept across calls can replay an earlier result")

    def _holds_arguments(self, value: ast.AST, fn: _Function) -> bool:
        return any(_root_name(e) in fn.derived for e in _peel(value))

    # expressions
    def _matmul(self, node: ast.AST) -> None:
        self.add(node, _LIB, "the @ operator outside a @triton.jit function is a PyTorch matmul (cuBLAS), not the "
                 "candidate's kernel")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self.in_jit:
            self._matmul(node)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if not self.in_jit and self.shape_constants:
            operands = [node.left, *node.comparators]
            eq_like = any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)) for op in node.ops)
            if eq_like and not any(_is_rank_query(o) for o in operands):
                for operand in operands:
                    for lit, value in self._int_literals(operand):
                        if value in self.shape_constants:
                            self.add(lit, "hardcoded_cases", f"compares against {value}, a dimension of the "
                                     "contract's test cases: a branch for a known case (fresh shapes are drawn at "
                                     "check time)")
        self.generic_visit(node)

    def _int_literals(self, expr: ast.AST) -> list[tuple[ast.AST, int]]:
        out = []
        for e in _peel(expr):
            if isinstance(e, ast.Constant) and type(e.value) is int:
                out.append((e, e.value))
            elif isinstance(e, ast.Name) and e.id in self.int_constants:
                out.append((e, self.int_constants[e.id]))
        return out

    def visit_Dict(self, node: ast.Dict) -> None:
        if not self.in_jit and self.shape_constants:
            for key in node.keys:
                if key is None:
                    continue
                for lit, value in self._int_literals(key):
                    if value in self.shape_constants:
                        self.add(lit, "hardcoded_cases", f"a table keyed by {value}, a dimension of the contract's "
                                 "test cases: an answer for a known case")
        self.generic_visit(node)

    def visit_MatchValue(self, node: ast.MatchValue) -> None:
        if not self.in_jit and self.shape_constants:
            for lit, value in self._int_literals(node.value):
                if value in self.shape_constants:
                    self.add(lit, "hardcoded_cases", f"matches {value}, a dimension of the contract's test cases")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if id(node) in self.docstrings:
            return
        value = node.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if isinstance(value, str):
            for marker, slug, why in _STRING_RULES:
                if marker in value:
                    self.add(node, slug, f"the string {value[:60]!r} names {marker!r}: {why}")
            if _MODULE_FILE.search(value):
                self.add(node, "shadowing", f"the string {value[:60]!r} names a Python module file: a file named like "
                         "a module (torch.py, sitecustomize.py, a .pth) shadows what the judge imports")
            self._check_persisting_identifier(node, value, what="string")

    def _check_persisting_identifier(self, node: ast.AST, text: str, what: str = "name") -> None:
        low = text.lower()
        for marker in _PERSISTING_MARKERS:
            if marker in low:
                self.add(node, "persisting_l2", f"the {what} {text[:60]!r} points at CUDA's persisting-L2 controls "
                         "(access-policy windows, cudaLimitPersistingL2CacheSize), which keep data in L2 past the "
                         "judge's flush")
                return

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in _NAME_RULES:
            slug, why = _NAME_RULES[node.id]
            self.add(node, slug, f"uses {node.id}: {why}")
        self._check_persisting_identifier(node, node.id)
        path = self.aliases.get(node.id)
        if path is not None and isinstance(node.ctx, ast.Load):
            self._check_mention(node, path)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr in _ATTR_RULES:
            slug, why = _ATTR_RULES[attr]
            self.add(node, slug, f"uses .{attr}: {why}")
        if attr == "nan_to_num" and not self.in_jit:
            self.add(node, "nan_wildcard", "nan_to_num hides NaN in the output (the gate owns the NaN/Inf policy)")
        self._check_persisting_identifier(node, attr)
        path = self.resolve(node)
        if path is not None:
            self._check_mention(node, path)
        self.generic_visit(node)

    def _check_mention(self, node: ast.AST, path: str) -> None:
        hit = _lookup(_MENTION_RULES, path)
        if hit is None:
            return
        _, slug, why = hit
        if slug == "nan_wildcard" and self.in_jit:
            return
        shown = ast.unparse(node)
        self.add(node, slug, f"{shown if shown == path else f'{shown} ({path})'}: {why}")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        path = self.resolve(func)
        if path is not None:
            self._check_resolved_call(node, path)
        elif isinstance(func, ast.Name):
            self._check_builtin_call(node, func.id)
        elif isinstance(func, ast.Attribute):
            self._check_method_call(node, func)
        elif isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr" \
                and len(func.args) >= 2 and isinstance(func.args[1], ast.Constant) \
                and isinstance(func.args[1].value, str) and func.args[1].value.isidentifier():
            # getattr(x, "softmax")(...) is x.softmax(...)
            self._check_method_call(node, ast.Attribute(value=func.args[0], attr=func.args[1].value, ctx=ast.Load()))
        self._check_dtype_keywords(node)
        for arg in list(node.args) + [k.value for k in node.keywords]:
            self._check_torch_reference(arg.value if isinstance(arg, ast.Starred) else arg)
        self.generic_visit(node)

    def _check_torch_reference(self, expr: ast.AST) -> None:
        """A torch compute function passed along uncalled (`map(torch.exp, xs)`, `@torch.compile`)."""
        if not isinstance(expr, (ast.Name, ast.Attribute)):
            return
        path = self.resolve(expr)
        if path is None or not path.startswith("torch.") or path in _TORCH_ALLOWED_CALLS \
                or _lookup(_MENTION_RULES, path):
            return
        parts = path.split(".")
        name = parts[-1]
        compute = (
            path.startswith(("torch.nn.functional.", "torch.Tensor.", "torch.special.", "torch.linalg.", "torch.fft."))
            or (len(parts) == 2 and name[:1].islower() and name not in _TORCH_VALUE_NAMES
                and not _DTYPE_LIKE.match(name))
        )
        if compute:
            self.add(expr, _LIB, f"{ast.unparse(expr)} ({path}) hands a PyTorch compute function to other code; the "
                     "candidate must compute with its own kernel")

    def _check_resolved_call(self, node: ast.Call, path: str) -> None:
        shown = ast.unparse(node.func)
        named = shown if shown == path else f"{shown} ({path})"
        if _lookup(_MENTION_RULES, path):
            return  # reported where the name is mentioned
        if path.startswith("torch.cuda.") and path not in _TORCH_ALLOWED_CALLS:
            self.add(node, _LIB, f"{named} is not among the torch calls a candidate may make (allocation and device "
                     "metadata); whatever it does is not the candidate's kernel")
        elif path.startswith("torch.") and path not in _TORCH_ALLOWED_CALLS:
            self.add(node, _LIB, f"{named} computes the result with PyTorch instead of the candidate's kernel (torch "
                     "may only allocate, view and cast tensors)")
        elif path in ("operator.matmul", "operator.imatmul", "operator.__matmul__"):
            self.add(node, _LIB, f"{named} is the @ operator, a PyTorch matmul (cuBLAS), not the candidate's kernel")
        elif path == "contextlib.suppress":
            self.add(node, _LIB, f"{named}: swallowing errors is a fallback path the gate does not judge")
        elif path in ("triton.language.cast", "triton.language.core.cast"):
            dtype = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "dtype"), None)
            bitcast = any(k.arg == "bitcast" and _const_value(k.value) is True for k in node.keywords)
            if dtype is not None and not bitcast and self._is_low_dtype(dtype):
                self._downcast(node, ast.unparse(dtype))
        elif path.startswith("numpy."):
            self.add(node, _LIB, f"{named} computes with NumPy instead of the candidate's kernel")
        elif path in ("builtins.setattr", "builtins.delattr"):
            self._check_builtin_call(node, path.split(".")[1])

    def _check_builtin_call(self, node: ast.Call, name: str) -> None:
        if name in _BUILTIN_CALLS:
            slug, why = _BUILTIN_CALLS[name]
            self.add(node, slug, f"{name}(...): {why}")
            if name in ("__import__",) and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                self._classify_import(node, node.args[0].value, node.args[0].value)
        elif name in ("setattr", "delattr") and node.args:
            obj = node.args[0]
            obj_path = self.resolve(obj)
            attr = node.args[1] if len(node.args) > 1 else None
            attr_name = attr.value if isinstance(attr, ast.Constant) and isinstance(attr.value, str) else None
            if obj_path is not None:
                if obj_path.split(".")[0] in ("builtins", "sys"):
                    self.add(node, "shadowing", f"{name}({ast.unparse(obj)}, ...): it replaces what the judge's code "
                             "imports or finds in the interpreter")
                else:
                    self.add(node, "harness_patching", f"{name}({ast.unparse(obj)}, ...): patching an attribute of an "
                             "imported module replaces functions the judge itself calls")
            elif isinstance(obj, ast.Name) and obj.id in self.top_functions:
                self.add(node, "warmup_detection", f"{name}({obj.id}, ...): an attribute on a function keeps state "
                         "across calls and can count them")
            elif attr_name == "__class__":
                self.add(node, "lazy_result", f"{name}(..., '__class__', ...): swapping a tensor's class makes it a "
                         "subclass that can compute when read")
            elif attr_name in ("data", "grad"):
                self.add(node, "input_mutation", f"{name}(..., {attr_name!r}, ...): rebinding a tensor's data behind "
                         "the judge's back")
        elif name == "type" and len(node.args) == 3:
            self.add(node, "lazy_result", "type(name, bases, namespace) builds a class at run time, e.g. a tensor "
                     "subclass that computes when read")
        elif name == "float" and node.args and not self.in_jit and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and node.args[0].value.strip().lower().lstrip("+-") == "nan":
            self.add(node, "nan_wildcard", "float('nan') in the launcher: a NaN made outside the kernel can serve as "
                     "a wildcard in the comparison")

    def _check_method_call(self, node: ast.Call, func: ast.Attribute) -> None:
        m = func.attr
        receiver = func.value
        if not self.in_jit:
            base = m[:-1] if m.endswith("_") and not m.endswith("__") else None
            if m in _COMPUTE_METHODS or (base is not None and (base in _COMPUTE_METHODS or base in _INPLACE_ONLY_COMPUTE)):
                self.add(node, _LIB, f".{m}(...) computes with PyTorch in the launcher instead of the candidate's "
                         "kernel")
        if m in ("half", "bfloat16") and not node.args:
            self._downcast(node, f".{m}()")
        elif m in ("to", "type"):
            bitcast = any(k.arg == "bitcast" and _const_value(k.value) is True for k in node.keywords)
            candidates = list(node.args) + [k.value for k in node.keywords if k.arg == "dtype"]
            for arg in candidates:
                if not bitcast and self._is_low_dtype(arg):
                    self._downcast(node, f".{m}({ast.unparse(arg)})")
                    break
        if m == "storage" and not node.args:
            self.add(node, "allocator_reuse", ".storage() reaches a tensor's raw storage, which can alias memory "
                     "that still holds an earlier answer")
        elif m == "set_":
            self.add(node, "allocator_reuse", ".set_(...) swaps a tensor's storage, which can alias memory that still "
                     "holds an earlier answer")
        run = self.run_ctx
        if run is not None:
            if isinstance(receiver, ast.Name) and receiver.id == run.outputs_param and m in _DICT_MUTATORS:
                self.add(node, "unwritten_output", f"outputs.{m}(...) changes the judge's outputs dict instead of "
                         "writing into its NaN-filled tensors")
                return
            if isinstance(receiver, ast.Name) and receiver.id == run.inputs_param and m in _DICT_MUTATORS:
                self.add(node, "input_mutation", f"inputs.{m}(...) changes the judge's inputs dict")
                return
            root = _root_name(receiver)
            inplace = m.endswith("_") and not m.endswith("__")
            if root is not None and root in run.outputs and m in _CONSTANT_FILLS:
                self.add(node, "constant_output", f".{m}(...) fills the output with a constant or random values: it "
                         "passes only where the true output is tiny or input independent")
                return
            if root is not None and root in run.inputs and inplace:
                self.add(node, "input_mutation", f".{m}(...) changes an input tensor in place from the launcher (only "
                         "inout inputs may change, and only through the candidate's kernel)")
                return
        fn = self.fn
        if fn is not None and isinstance(receiver, ast.Name) and receiver.id in self.containers \
                and m in _CONTAINER_MUTATORS:
            values = list(node.args) + [k.value for k in node.keywords]
            if m in ("setdefault", "__setitem__", "insert"):
                values = values[1:]
            if any(self._holds_arguments(v, fn) for v in values):
                self.add(node, "cross_call_caching", f"{receiver.id}.{m}(...) keeps an argument (or a view of it) in "
                         "module-level state across calls: an earlier result can be replayed")

    def _check_dtype_keywords(self, node: ast.Call) -> None:
        for k in node.keywords:
            if k.arg in ("dtype", "out_dtype") and self._is_low_dtype(k.value):
                if isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "type"):
                    continue  # reported as a cast
                self._downcast(node, f"{k.arg}={ast.unparse(k.value)}")
            elif k.arg == "input_precision" and isinstance(k.value, ast.Constant) \
                    and str(k.value.value).lower() in ("tf32", "tf32x3", "bf16x3", "bf16x6"):
                self._downcast(node, f"input_precision={k.value.value!r}")
            elif k.arg == "allow_tf32" and _const_value(k.value) is True:
                self._downcast(node, "allow_tf32=True")

    def _is_low_dtype(self, expr: ast.AST) -> bool:
        path = self.resolve(expr)
        if path is None:
            return False
        root, _, name = path.rpartition(".")
        return root in _DTYPE_ROOTS and _is_low_dtype_name(name)

    def _downcast(self, node: ast.AST, what: str) -> None:
        self.add(node, "lower_precision", f"downcast {what}: check the contract's accumulation precision; a literal "
                 "lower-precision dtype computes or stores intermediates below what the contract asks (casting the "
                 "final result to the output's own dtype is done with a non-literal dtype)")

    # ------------------------------------------------------------------------------------- whole module
    def _check_run(self) -> None:
        run = self.top_functions.get("run")
        if run is None:
            bound = any(isinstance(n, ast.Name) and n.id == "run" and isinstance(n.ctx, ast.Store)
                        for stmt in self.tree.body for n in ast.walk(stmt)) \
                or "run" in self.aliases
            if not bound:
                self.add(self.tree, "unwritten_output", "the candidate defines no run(inputs, outputs, params, "
                         "trace=None), so it writes no outputs")
            return
        positional = [a.arg for a in run.args.posonlyargs + run.args.args]
        if run.args.vararg is not None or run.args.kwarg is not None:
            return
        if len(positional) < 2:
            self.add(run, "unwritten_output", "run does not take (inputs, outputs, params, trace=None): it cannot "
                     "write the outputs the judge allocated")
            return
        outputs = positional[1]
        used = any(isinstance(n, ast.Name) and n.id == outputs for stmt in run.body for n in ast.walk(stmt))
        if not used:
            self.add(run, "unwritten_output", f"run never uses its {outputs!r} argument: the judge's NaN-filled "
                     "outputs are never written")

    def _check_unreachable(self) -> None:
        for node in ast.walk(self.tree):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if not isinstance(block, list):
                    continue
                for i, stmt in enumerate(block[:-1]):
                    if isinstance(stmt, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
                        nxt = block[i + 1]
                        kind = type(stmt).__name__.lower()
                        self.add(nxt, "decoy_kernel", f"unreachable code after {kind} (line {stmt.lineno}): code that "
                                 "never runs is a decoy")
                        break

    def _check_unlaunched_kernels(self) -> None:
        """A @triton.jit function that no code reachable from run or the module's top level refers to."""
        funcs = self.top_functions

        def refs(nodes: Iterable[ast.AST]) -> set[str]:
            return {n.id for root in nodes for n in ast.walk(root) if isinstance(n, ast.Name)}

        roots: list[ast.AST] = []
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                roots += stmt.decorator_list + [stmt.args]
                if stmt.returns is not None:
                    roots.append(stmt.returns)
            else:
                roots.append(stmt)
        seen: set[str] = set()
        todo = refs(roots) | ({"run"} if "run" in funcs else set())
        while todo:
            name = todo.pop()
            if name in seen or name not in funcs:
                continue
            seen.add(name)
            todo |= refs(funcs[name].body) - seen
        for name, node in funcs.items():
            if id(node) in self.jit_defs and name not in seen:
                self.add(node, "decoy_kernel", f"@triton.jit kernel {name} is defined but never launched: nothing "
                         "reachable from run refers to it")


def _unscannable(path: str, digest: str, source: str, line: int, col: int, why: str) -> ScanResult:
    lines = source.splitlines()
    code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    finding = Finding(cheat="syntax_error", catalogue=[], line=line, col=col, code=code,
                      message=f"syntax error: {why}, so nothing in it can be judged")
    return ScanResult(path=path, sha256=digest, findings=[finding])


def scan_source(source: str, path: str = "<candidate>", shape_constants: Iterable[int] = frozenset()) -> ScanResult:
    """Scan a candidate's source. Never raises on bad input: a file that does not parse (or nests too deeply
    to walk) yields one `syntax_error` finding."""
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as err:
        msg = getattr(err, "msg", None) or str(err)
        return _unscannable(path, digest, source, getattr(err, "lineno", None) or 1, getattr(err, "offset", None) or 1,
                            f"the candidate does not parse ({msg})")
    except (RecursionError, MemoryError):
        return _unscannable(path, digest, source, 1, 1, "the candidate nests too deeply to parse")
    constants = frozenset(int(c) for c in shape_constants)
    try:
        findings = _Scanner(source, tree, constants).scan()
    except RecursionError:
        return _unscannable(path, digest, source, 1, 1, "the candidate nests too deeply to scan")
    return ScanResult(path=path, sha256=digest, findings=findings)


def scan_file(path: str | Path, shape_constants: Iterable[int] = frozenset()) -> ScanResult:
    """Scan a candidate file; sha256 is of the file's bytes."""
    raw = Path(path).read_bytes()
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        finding = Finding(cheat="syntax_error", catalogue=[], line=1, col=1, code="",
                          message=f"syntax error: the candidate is not UTF-8 text ({err.reason}), so nothing in it can be "
                          "judged")
        return ScanResult(path=str(path), sha256=hashlib.sha256(raw).hexdigest(), findings=[finding])
    result = scan_source(source, str(path), shape_constants)
    return result.model_copy(update={"sha256": hashlib.sha256(raw).hexdigest()})
