"""Rules for CUDA C++ source inside a candidate: every string of the module that holds a `__global__` function
is read as CUDA (comments blanked, so a word in a comment is no finding), one rule per cheat CUDA makes possible.
The source must be a literal the scan can read: a `cuda.Source(...)` built at run time is reported.

These are patterns; what CUDA code does at run time is judged by the same gate as Triton's (answers, determinism,
stress, timing guards). A finding's line is the line in the candidate's file."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ferret.backends.cuda import LAUNCHER_API
from ferret.integrity.context import ScanContext
from ferret.integrity.registry import Hit, rule
from ferret.integrity.tables import PERSISTING_MARKERS

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def cuda_strings(ctx: ScanContext) -> list[ast.Constant]:
    """The module's string literals that hold CUDA device code."""
    return [n for n in ctx.everything if isinstance(n, ast.Constant) and isinstance(n.value, str) and "__global__" in n.value]


def _blank_comments(code: str) -> str:
    """Comments replaced by spaces, newlines kept: positions still map to the source's lines."""
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), code)


def _located(node: ast.Constant, code: str, offset: int) -> ast.Constant:
    """A stand-in node at the file position of `code[offset]` (a string literal's text starts on its own line
    after a triple quote and newline, or on the literal's line)."""
    line = node.lineno + code.count("\n", 0, offset)
    col = offset - (code.rfind("\n", 0, offset) + 1) if "\n" in code[:offset] else node.col_offset + offset
    stand_in = ast.Constant(value="")
    stand_in.lineno, stand_in.col_offset = line, col
    return stand_in


def _matches(ctx: ScanContext, pattern: re.Pattern[str], detail: str) -> Iterator[Hit]:
    for node in cuda_strings(ctx):
        text = str(node.value)
        for match in pattern.finditer(_blank_comments(text)):
            yield Hit(_located(node, text, match.start()), detail.format(match=match.group(0).strip()), via=node)


_STREAMS = re.compile(
    r"\b(cudaStreamCreate\w*|cudaStreamPerThread|cudaStreamFireAndForget|cudaStreamTailLaunch|"
    r"cudaLaunch\w*|cudaGraph\w*)\b|<<<"
)


@rule("cuda_other_stream_or_launch", "side_stream_or_thread")
def other_stream_or_launch(ctx: ScanContext) -> Iterator[Hit]:
    """CUDA code that creates a stream, launches a kernel from the device (`<<<`, cudaLaunch*) or builds a graph:
    work the judge's events and launch count do not see."""
    yield from _matches(
        ctx,
        _STREAMS,
        "CUDA code uses {match}: work launched outside the judge's stream and launch count escapes the timed region",
    )


_CLOCKS = re.compile(r"\b(clock|clock64|__globaltimer|globaltimer)\s*\(|%(clock|clock64|globaltimer)\w*")


@rule("cuda_clock_read", "warmup_detection")
def clock_read(ctx: ScanContext) -> Iterator[Hit]:
    """CUDA code that reads a clock (`clock64()`, PTX `%globaltimer`): a kernel has no use for time but to behave
    differently when timed."""
    yield from _matches(
        ctx,
        _CLOCKS,
        "CUDA code reads a clock ({match}): a kernel that knows the time can tell the timed calls from the checked ones",
    )


_HOST_MEMORY = re.compile(
    r"\b(cudaHostAlloc|cudaHostGetDevicePointer|cudaHostRegister|cudaMallocManaged|"
    r"cudaMallocHost|__managed__|cudaMemcpy\w*)\b"
)


@rule("cuda_host_memory", "reading_expected")
def host_memory(ctx: ScanContext) -> Iterator[Hit]:
    """CUDA code that maps or copies host memory (`cudaHostGetDevicePointer`, `__managed__`, cudaMemcpy): the
    judge's process memory, where expected answers live, is not the kernel's to read."""
    yield from _matches(
        ctx,
        _HOST_MEMORY,
        "CUDA code reaches host memory ({match}): the judge's memory, where "
        "the expected answers are, is not the kernel's to read",
    )


_LIBRARIES = re.compile(
    r"#\s*include\s*[<\"](cublas\w*|cublasLt|cudnn\w*|cufft\w*|cusparse\w*|cusolver\w*|"
    r"curand(?!_kernel)\w*|thrust/[\w/]+|cutlass/[\w/]+)\.h\w*[>\"]|\b(cublas|cudnn|cufft|cusparse|"
    r"cusolver)\w*\s*\("
)


@rule("cuda_library", "library_call")
def library(ctx: ScanContext) -> Iterator[Hit]:
    """CUDA code that includes or calls a library of ready-made compute (cuBLAS, cuDNN, cuFFT, cuSPARSE,
    cuSOLVER, Thrust, CUTLASS): the candidate must write the kernel."""
    yield from _matches(
        ctx, _LIBRARIES, "CUDA code uses a library of ready-made compute ({match}): the candidate must write the kernel"
    )


# A variable at namespace scope in device memory (`__device__ int calls;`), not a function (no parenthesis before
# the `;` or `=`); `__constant__` data is read-only and stays allowed.
_DEVICE_STATE = re.compile(r"^[ \t]*(static[ \t]+)?__device__[ \t]+(?![^;=\n]*\()[^;=\n]*[;=]", re.MULTILINE)


@rule("cuda_device_state", "cross_call_caching")
def device_state(ctx: ScanContext) -> Iterator[Hit]:
    """CUDA code that declares a variable in device memory at namespace scope (`__device__ int calls;`): it
    outlives a launch, so a kernel can count its calls or keep answers from one call for the next."""
    yield from _matches(
        ctx,
        _DEVICE_STATE,
        "CUDA code keeps state in device memory between launches ({match}): a "
        "kernel can count its calls, or keep answers for the next call",
    )


# The Python scan's markers of the persisting-L2 controls, but `cudart`: in CUDA C++ it also begins CUDA's math
# constants (CUDART_INF_F), and the runtime's own calls are named by the other markers.
_PERSISTING = re.compile("|".join(re.escape(m) for m in PERSISTING_MARKERS if m != "cudart"), re.IGNORECASE)


@rule("cuda_persisting_l2", "persisting_l2")
def persisting_l2(ctx: ScanContext) -> Iterator[Hit]:
    """CUDA code that sets an L2 access policy window or the persisting-L2 limit: data kept in L2 across the judge's
    flush."""
    yield from _matches(ctx, _PERSISTING, "CUDA code asks L2 to keep data ({match}), which the judge's flush cannot evict")


@rule("cuda_backend_attribute", "reading_expected")
def backend_attribute(ctx: ScanContext) -> Iterator[Hit]:
    """A name of `ferret.backends.cuda` outside what a launcher needs (`Source`, `launch`'s typed numbers, `NULL`,
    `aligned`): the module's own imports (`os`, `json`) and the judge's compiling are not the candidate's to reach
    through it."""
    prefix = "ferret.backends.cuda."
    for node in ctx.nodes_of(ast.Attribute, ast.Name):
        path = ctx.resolve(node)
        if path is None or not path.startswith(prefix) or isinstance(getattr(node, "ctx", None), ast.Store):
            continue
        name = path[len(prefix) :].split(".")[0]
        if name not in LAUNCHER_API:
            yield Hit(node, f"reaches {prefix}{name}: a launcher uses only {', '.join(LAUNCHER_API)} of the CUDA backend")


@rule("cuda_source_not_literal", "decoy_kernel")
def source_not_literal(ctx: ScanContext) -> Iterator[Hit]:
    """A `Source(...)` of `ferret.backends.cuda` whose code is not a string literal (or a module-level name bound
    to one): the code that runs would not be the code the scan read."""
    for node in ctx.everything:
        if not (isinstance(node, ast.Call) and ctx.resolve(node.func) == "ferret.backends.cuda.Source"):
            continue
        code = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "code"), None)
        if not _is_literal_code(ctx, code):
            yield Hit(node, "the CUDA source is not a string literal: the code that runs would not be the code the scan read")


def _is_literal_code(ctx: ScanContext, code: ast.AST | None) -> bool:
    if isinstance(code, ast.Constant) and isinstance(code.value, str):
        return True
    if not isinstance(code, ast.Name):
        return False
    bound = [
        n.value
        for n in ctx.tree.body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == code.id for t in n.targets)
    ]
    return len(bound) == 1 and isinstance(bound[0], ast.Constant) and isinstance(bound[0].value, str)
