"""Library calls: the candidate must compute with its own Triton kernels.

Outside @triton.jit functions torch may only allocate, view and cast tensors and describe the device;
any other torch, NumPy or operator call, tensor method that computes, or @ computes the result with a
library, and a try/except can fall back to one. Calls of builtins that read files, run code, print or
take object identities are banned for what they reach.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ferret.integrity.context import ScanContext
from ferret.integrity.facts import (
    builtin_calls,
    method_calls,
    resolved_calls,
    shown_path,
)
from ferret.integrity.registry import Hit, register, rule
from ferret.integrity.tables import (
    BUILTIN_CALLS,
    COMPUTE_METHODS,
    DTYPE_LIKE,
    INPLACE_ONLY_COMPUTE,
    LIB,
    MENTION_RULES,
    TORCH_ALLOWED_CALLS,
    TORCH_VALUE_NAMES,
    examples,
    lookup,
    slugs_of,
)

_TORCH_COMPUTE_MODULES = ("torch.nn.functional.", "torch.Tensor.", "torch.special.", "torch.linalg.", "torch.fft.")


@rule("try_fallback", LIB)
def try_fallback(ctx: ScanContext) -> Iterator[Hit]:
    """try/except: a failing kernel can fall back to a library, or to whatever the output holds."""
    for node in ctx.nodes_of(ast.Try, getattr(ast, "TryStar", ast.Try)):
        if node.handlers:
            yield Hit(
                node,
                "try/except: a fallback path the gate does not judge (a failing kernel can fall back to a "
                "library or to whatever is in the output)",
            )


@rule("torch_cuda_call", LIB)
def torch_cuda_call(ctx: ScanContext) -> Iterator[Hit]:
    """torch.cuda.X(...) beyond device queries."""
    for node, path in resolved_calls(ctx):
        if path.startswith("torch.cuda.") and path not in TORCH_ALLOWED_CALLS:
            yield Hit(
                node,
                f"{shown_path(node.func, path)} is not among the torch calls a candidate may make "
                "(allocation and device metadata); whatever it does is not the candidate's kernel",
            )


@rule("torch_call", LIB)
def torch_call(ctx: ScanContext) -> Iterator[Hit]:
    """torch.X(...) beyond allocation (torch.softmax, F.gelu, torch.einsum)."""
    for node, path in resolved_calls(ctx):
        if path.startswith("torch.") and not path.startswith("torch.cuda.") and path not in TORCH_ALLOWED_CALLS:
            yield Hit(
                node,
                f"{shown_path(node.func, path)} computes the result with PyTorch instead of the "
                "candidate's kernel (torch may only allocate, view and cast tensors)",
            )


@rule("operator_matmul", LIB)
def operator_matmul(ctx: ScanContext) -> Iterator[Hit]:
    """operator.matmul(a, b): the @ operator by name."""
    for node, path in resolved_calls(ctx):
        if path in ("operator.matmul", "operator.imatmul", "operator.__matmul__"):
            yield Hit(
                node, f"{shown_path(node.func, path)} is the @ operator, a PyTorch matmul (cuBLAS), not the candidate's kernel"
            )


@rule("contextlib_suppress", LIB)
def contextlib_suppress(ctx: ScanContext) -> Iterator[Hit]:
    """contextlib.suppress(...): try/except by another name."""
    for node, path in resolved_calls(ctx):
        if path == "contextlib.suppress":
            yield Hit(node, f"{shown_path(node.func, path)}: swallowing errors is a fallback path the gate does not judge")


@rule("numpy_call", LIB)
def numpy_call(ctx: ScanContext) -> Iterator[Hit]:
    """numpy.X(...): the launcher computing with NumPy."""
    for node, path in resolved_calls(ctx):
        if path.startswith("numpy."):
            yield Hit(node, f"{shown_path(node.func, path)} computes with NumPy instead of the candidate's kernel")


@rule("compute_method", LIB)
def compute_method(ctx: ScanContext) -> Iterator[Hit]:
    """x.sum(), x.softmax(), y.mul_(...) in the launcher (integer metadata such as .max().item() stays
    allowed: floating-point compute it might hide is caught at run time)."""
    for node, method in method_calls(ctx):
        m = method.attr
        base = m[:-1] if m.endswith("_") and not m.endswith("__") else None  # the in-place form's name
        computes = m in COMPUTE_METHODS or base in COMPUTE_METHODS or base in INPLACE_ONLY_COMPUTE
        if computes and not ctx.scope(node).in_jit:
            yield Hit(node, f".{m}(...) computes with PyTorch in the launcher instead of the candidate's kernel")


@rule("matmul_operator", LIB)
def matmul_operator(ctx: ScanContext) -> Iterator[Hit]:
    """a @ b (or a @= b) outside @triton.jit, where it is a torch matmul."""
    for node in ctx.nodes_of(ast.BinOp, ast.AugAssign):
        if isinstance(node.op, ast.MatMult) and not ctx.scope(node).in_jit:
            yield Hit(
                node, "the @ operator outside a @triton.jit function is a PyTorch matmul (cuBLAS), not the candidate's kernel"
            )


def _is_torch_compute(path: str) -> bool:
    """A torch function that computes (torch.exp, F.gelu), as opposed to a value (torch.float32, torch.pi)."""
    if not path.startswith("torch.") or path in TORCH_ALLOWED_CALLS or lookup(MENTION_RULES, path):
        return False
    parts = path.split(".")
    name = parts[-1]
    return path.startswith(_TORCH_COMPUTE_MODULES) or (
        len(parts) == 2 and name[:1].islower() and name not in TORCH_VALUE_NAMES and not DTYPE_LIKE.match(name)
    )


def _handed_on(ctx: ScanContext) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(expression, node examined) for every argument of a call and every bare decorator."""
    for node in ctx.nodes_of(ast.FunctionDef, ast.AsyncFunctionDef, ast.Call):
        if isinstance(node, ast.Call):
            for arg in list(node.args) + [k.value for k in node.keywords]:
                yield (arg.value if isinstance(arg, ast.Starred) else arg), node
        else:
            yield from ((dec, node) for dec in node.decorator_list if not isinstance(dec, ast.Call))


@rule("torch_function_passed", LIB)
def torch_function_passed(ctx: ScanContext) -> Iterator[Hit]:
    """A torch compute function handed on uncalled: map(torch.exp, xs), @torch.compile."""
    for expr, via in _handed_on(ctx):
        if isinstance(expr, (ast.Name, ast.Attribute)):
            path = ctx.resolve(expr)
            if path is not None and _is_torch_compute(path):
                yield Hit(
                    expr,
                    f"{ast.unparse(expr)} ({path}) hands a PyTorch compute function to other code; the "
                    "candidate must compute with its own kernel",
                    via=via,
                )


def _banned_builtin(slug: str):
    """The rule for one cheat of BUILTIN_CALLS: a call of a banned builtin by its bare name."""
    names = [name for name, (s, _) in BUILTIN_CALLS.items() if s == slug]

    def check(ctx: ScanContext) -> Iterator[Hit]:
        for node, name in builtin_calls(ctx, *names):
            yield Hit(node, f"{name}(...): {BUILTIN_CALLS[name][1]}")

    return check


# One rule per cheat of the builtins table: open/eval/exec (reading the expected answer), print (result
# forging), id (cross-call caching).
for _slug in slugs_of(BUILTIN_CALLS):
    register(
        f"builtin.{_slug}",
        _slug,
        _banned_builtin(_slug),
        doc=f"A call of a builtin banned for {_slug}: {examples(BUILTIN_CALLS, _slug, most=12)}.",
    )
