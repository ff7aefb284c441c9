"""The boundary of an exported op: every tensor's dtype, device, layout and shape checked against the contract
before the kernel is launched. Copied verbatim into every exported package (as `_boundary.py`), so it imports
torch and the standard library only: a serving process needs no Ferret to run the op.

The kernel was judged only on what the contract draws: contiguous tensors on one device, the contract's dtypes,
and shapes whose dims are consistent and at least 1. Anything else is refused here with a message naming the
tensor, what it is and what was expected, because a kernel that reads past a wrong shape fails silently or far
from the call.
"""

from __future__ import annotations

import ast
import hashlib
import json
import operator
from pathlib import Path

import torch

from ferret.syntax import parse_expression

MANIFEST_FILE = "manifest.json"
KERNEL_FILE = "kernel.py"
DTYPE_VARIANT = "$dtype"

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


class BoundaryError(ValueError):
    """A call whose tensors do not fit the contract the kernel was judged on; raised before any launch."""


def _compiled(node: ast.AST):
    """A shape expression as a function of the dims, built once: torch.compile traces the calls of these
    functions, where it could not trace parsing (the contract's language: integers, dim names, + - * // % **,
    min, max)."""
    if isinstance(node, ast.Expression):
        return _compiled(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        value = node.value
        return lambda dims: value
    if isinstance(node, ast.Name):
        name = node.id
        return lambda dims: dims[name]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right, op = _compiled(node.left), _compiled(node.right), _BINARY[type(node.op)]
        return lambda dims: op(left(dims), right(dims))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        operand = _compiled(node.operand)
        return lambda dims: -operand(dims)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
        args, pick = [_compiled(a) for a in node.args], min if node.func.id == "min" else max
        return lambda dims: pick([a(dims) for a in args])
    raise BoundaryError(f"unsupported shape expression {ast.dump(node)[:60]}")


def compile_shape(shape: list) -> list:
    return [_compiled(parse_expression(str(e))) for e in shape]


def load_manifest(package_init: str) -> dict:
    """The package's manifest, after checking that kernel.py is the file the gate judged (its sha256)."""
    folder = Path(package_init).parent
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    digest = hashlib.sha256((folder / KERNEL_FILE).read_bytes()).hexdigest()
    if digest != manifest["candidate_sha256"]:
        raise ImportError(
            f"{folder / KERNEL_FILE} has sha256 {digest}, but the gate passed {manifest['candidate_sha256']}: "
            "the kernel was changed after export; export it again"
        )
    return manifest


class Spec:
    """The op's arguments as the manifest records them: name, role, dtype, shape expressions."""

    def __init__(self, manifest: dict):
        self.op_name: str = manifest["op_name"]
        self.args: list[dict] = manifest["arguments"]
        self.dtypes: list[str] = manifest["dtypes"]
        self.params: dict = manifest["params"]
        self._shapes = {a["name"]: compile_shape(a["shape"]) for a in self.args}

    def shape_of(self, name: str, dims: dict) -> tuple:
        return tuple(f(dims) for f in self._shapes[name])

    def _fail(self, message: str) -> BoundaryError:
        return BoundaryError(f"{self.op_name}: {message}")

    def _variant(self, tensors: dict) -> torch.dtype | None:
        """The dtype the `$dtype` arguments share (one of the contract's dtypes), or None if none has one."""
        following = [a["name"] for a in self.args if a["dtype"] == DTYPE_VARIANT]
        if not following:
            return None
        dtype = tensors[following[0]].dtype
        if str(dtype).removeprefix("torch.") not in self.dtypes:
            raise self._fail(f"{following[0]} is {dtype}; the gate judged {', '.join(self.dtypes)}")
        return dtype

    def _check_tensor(self, arg: dict, tensor, variant, device) -> None:
        name = arg["name"]
        expected = variant if arg["dtype"] == DTYPE_VARIANT else getattr(torch, arg["dtype"])
        if tensor.dtype != expected:
            raise self._fail(f"{name} is {tensor.dtype}, expected {expected}")
        if tensor.device != device:
            raise self._fail(f"{name} is on {tensor.device}, the other arguments on {device}")
        if tensor.dim() != len(arg["shape"]):
            raise self._fail(f"{name} has {tensor.dim()} dims {tuple(tensor.shape)}, expected {arg['shape']}")
        if not tensor.is_contiguous():
            raise self._fail(f"{name} is not contiguous (strides {tensor.stride()}); the gate judged contiguous tensors")

    def bind_dims(self, tensors: dict) -> dict:
        """The contract's dims, read from the first shape entry that names each alone, each at least 1."""
        dims: dict = {}
        for arg in (a for a in self.args if a["name"] in tensors):
            for axis, expr in enumerate(arg["shape"]):
                if isinstance(expr, str) and expr.isidentifier() and expr not in dims:
                    dims[expr] = tensors[arg["name"]].shape[axis]
                    if dims[expr] < 1:
                        raise self._fail(f"{expr} = {dims[expr]} (from {arg['name']}); the gate judged {expr} >= 1")
        return dims

    def check(self, tensors: dict) -> dict:
        """Every argument checked; returns the dims. Raises BoundaryError naming the first that does not fit."""
        missing = [a["name"] for a in self.args if a["name"] not in tensors]
        if missing:
            raise self._fail(f"missing arguments {missing}")
        for arg in self.args:
            if not isinstance(tensors[arg["name"]], torch.Tensor):
                raise self._fail(f"{arg['name']} must be a torch.Tensor, got {type(tensors[arg['name']]).__name__}")
        variant = self._variant(tensors)
        device = tensors[self.args[0]["name"]].device
        for arg in self.args:
            self._check_tensor(arg, tensors[arg["name"]], variant, device)
        dims = self.bind_dims(tensors)
        for arg in self.args:
            expected = self.shape_of(arg["name"], dims)
            if tuple(tensors[arg["name"]].shape) != expected:
                said = ", ".join(f"{k} = {v}" for k, v in dims.items())
                raise self._fail(
                    f"{arg['name']} has shape {tuple(tensors[arg['name']].shape)}, expected {arg['shape']} = {expected} ({said})"
                )
        return dims

    def allocate(self, tensors: dict) -> dict:
        """Empty outputs of the shapes and dtypes the inputs imply (the functional form of the op)."""
        inputs = {a["name"]: tensors[a["name"]] for a in self.args if a["role"] != "out"}
        dims = self.bind_dims(inputs)
        variant = self._variant(inputs)
        first = next(iter(inputs.values()))
        return {
            a["name"]: torch.empty(
                self.shape_of(a["name"], dims),
                dtype=variant if a["dtype"] == DTYPE_VARIANT else getattr(torch, a["dtype"]),
                device=first.device,
            )
            for a in self.args
            if a["role"] == "out"
        }

    def split(self, tensors: dict) -> tuple[dict, dict]:
        """(inputs, outputs) as the candidate's `run` takes them."""
        inputs = {a["name"]: tensors[a["name"]] for a in self.args if a["role"] != "out"}
        outputs = {a["name"]: tensors[a["name"]] for a in self.args if a["role"] == "out"}
        return inputs, outputs
