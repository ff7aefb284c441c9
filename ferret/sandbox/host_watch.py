"""The host-numerics watch inside the candidate's process: floating-point data taken out of the tensor world by the
candidate's own code (`.tolist()`, `.item()`, `.numpy()`, `float(t)`, iterating, `__array__`, `__dlpack__`, raw
storage, and on the GPU a copy to the host), where Python or NumPy could then do the math the kernel should do.

It is a `TorchFunctionMode`: torch hands it every call of its Python API, however the candidate reached the function
(a computed attribute name, a module that re-exports torch or NumPy, `torch.Tensor.numpy` fetched by `getattr`).
A call counts where the innermost frame that is either the candidate's file or a kernel launch is the candidate's:
the Triton interpreter copies tensors to NumPy inside its launch, and what library code the candidate calls (the
standard library, NumPy, torch's own Python) is transparent, so `statistics.fmean(t)` counts at the candidate's
line. Integer tensors stay readable (launchers read lengths and offsets on the host) unless their data came from a
floating-point tensor (`x.view(torch.int32)`, `x.argmax()`) or a kernel may have written it: every result of an op
with a floating-point input, and every integer tensor but the call's inputs that a launch reached, is remembered as
float-derived for the life of the watch."""

from __future__ import annotations

import collections
import os
import sys
import weakref
from collections.abc import Iterable
from types import FrameType

import torch
from torch.overrides import TorchFunctionMode

# At import, not in the watch: the runner takes ferret's modules out of `sys.modules` before the candidate loads
# (`hide_harness_modules`), and an import made during a judged call would put them back where the candidate sees them.
from ferret.backends.registry import backends

# Tensor methods that hand a tensor's values to Python (or to another library) instead of to a kernel.
EXTRACTIONS = frozenset(
    """
    tolist item numpy __array__ __float__ __int__ __index__ __complex__ __bool__ __iter__ __contains__
    __dlpack__ __repr__ __str__ __format__ __reduce_ex__ __getstate__ untyped_storage storage _typed_storage
    """.split()
)
# A frame of one of these names in the file of a launch entry point (Triton's `JITFunction.run`, the interpreter's
# `InterpretedFunction.run` and its `GridExecutor.__call__`, the CUDA backend's `Source.launch`) is a launch: the
# Triton interpreter reads its arguments' storage there, and that is not the candidate's own code.
_LAUNCH_NAMES = frozenset({"run", "launch", "__call__"})
# How a launch reaches a tensor's memory: an integer tensor reached so inside a launch may hold what a kernel wrote.
_RAW_ACCESS = frozenset({"data_ptr", "untyped_storage"})


def _package_dir(module) -> str:
    return os.path.dirname(os.path.realpath(module.__file__))


def _launch_files() -> frozenset[str]:
    """The files of every language's launch entry points (`Backend.launch_points`), resolved."""
    files = set()
    for backend in backends():
        for point in backend.launch_points():
            module = sys.modules.get(getattr(point.owner, "__module__", ""))
            path = getattr(module, "__file__", None)
            if path:
                files.add(os.path.realpath(path))
    return frozenset(files)


class HostDataWatch(TorchFunctionMode):
    """Counts floating-point data taken to the host by the candidate's own code: `seen` maps
    "Tensor.<method> at <file>:<line>" to a count."""

    def __init__(self, candidate: str | os.PathLike, on_gpu: bool, inputs: Iterable[torch.Tensor] = ()):
        super().__init__()
        # The call's own input tensors: a kernel may read an integer input, never write it (inputs are hashed).
        self._inputs = {id(t) for t in inputs}
        self.candidate = os.path.realpath(candidate)
        self.on_gpu = on_gpu
        self.seen: collections.Counter[str] = collections.Counter()
        # id -> a weak reference, for tensors made from floating-point data (a WeakSet would compare tensors with ==)
        self._float_derived: dict[int, weakref.ref[torch.Tensor]] = {}
        self._launch_files = _launch_files()
        self._files: dict[str, str] = {}  # a code object's file name -> its real path (resolved once)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        tensors = [a for a in _flat(args) + _flat(list(kwargs.values())) if isinstance(a, torch.Tensor)]
        floating = [t for t in tensors if _is_float(t) or self._derived(t)]
        if floating:
            for r in _flat([result]):
                if isinstance(r, torch.Tensor) and not _is_float(r):
                    self._remember(r)
        if name in _RAW_ACCESS and args and isinstance(args[0], torch.Tensor) and id(args[0]) not in self._inputs:
            if not _is_float(args[0]) and self._nearest(sys._getframe(1))[0] == "launch":
                self._remember(args[0])  # an integer buffer a kernel may have filled with a float's bits
        what = None
        if name == "unbind" and sys._getframe(1).f_code.co_name == "__iter__":
            name = "__iter__"  # torch hands modes no `__iter__`: iterating a tensor is the `unbind` inside it
        if name in EXTRACTIONS and args and any(args[0] is t for t in floating):
            what = f"Tensor.{name}"
        elif self.on_gpu and _moved_to_host(floating, result):
            what = f"Tensor.{name} to the host"
        if what is not None:
            where = self._candidate_line(sys._getframe(1))
            if where is not None:
                self.seen[f"{what} at {where}"] += 1
        return result

    def _derived(self, t: torch.Tensor) -> bool:
        ref = self._float_derived.get(id(t))
        return ref is not None and ref() is t

    def _remember(self, t: torch.Tensor) -> None:
        key = id(t)
        self._float_derived[key] = weakref.ref(t, lambda _, key=key, table=self._float_derived: table.pop(key, None))

    def _real(self, filename: str) -> str:
        if filename not in self._files:
            self._files[filename] = os.path.realpath(filename)
        return self._files[filename]

    def _candidate_line(self, frame: FrameType | None) -> str | None:
        """`file:line` of the candidate's frame that made the call, or None where a launch (or no candidate frame)
        is nearer."""
        kind, where = self._nearest(frame)
        return where if kind == "candidate" else None

    def _nearest(self, frame: FrameType | None) -> tuple[str | None, str | None]:
        """("candidate", its `file:line`) or ("launch", None) for the innermost frame that is either; (None, None)
        where neither is on the stack."""
        while frame is not None:
            path = self._real(frame.f_code.co_filename)
            if path == self.candidate:
                return "candidate", f"{os.path.basename(path)}:{frame.f_lineno}"
            if frame.f_code.co_name in _LAUNCH_NAMES and path in self._launch_files:
                return "launch", None
            frame = frame.f_back
        return None, None


def _is_float(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _flat(values) -> list:
    out = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out.extend(_flat(v))
        else:
            out.append(v)
    return out


def _moved_to_host(floating: list[torch.Tensor], result) -> bool:
    """A floating-point tensor on the device went in and a tensor on the host came out (`.cpu()`, `.to("cpu")`,
    a host tensor's `copy_` from the device)."""
    if not any(t.device.type != "cpu" for t in floating):
        return False
    return any(isinstance(r, torch.Tensor) and r.device.type == "cpu" for r in _flat([result]))


class FunctionModeEvasion:
    """Wraps the functions that take a torch-function mode off its stack; while `armed`, a call of them made from
    outside torch's own code is recorded with the caller's `file:line`: switching off the host-numerics watch is
    itself the evidence. torch pops a
    mode itself around a mode's handler (`torch.overrides.handle_torch_function`); those calls come from torch's
    files and are not counted."""

    TARGETS = (
        ("torch.overrides", "_pop_mode"),
        ("torch.overrides", "_pop_mode_temporarily"),
        ("torch._C", "_pop_torch_function_stack"),
        ("torch._C", "DisableTorchFunction"),
        ("torch._C", "_set_torch_function_state"),
    )

    def __init__(self):
        import importlib

        self.armed = False
        self.calls: collections.Counter[str] = collections.Counter()
        self.patched: dict[str, tuple[object, str, object]] = {}
        self._torch_dir = _package_dir(torch) + os.sep
        for module_name, attr in self.TARGETS:
            module = importlib.import_module(module_name)
            original = getattr(module, attr, None)
            if original is None:
                continue
            label = f"{module_name}.{attr}"
            wrapper = self._wrap(original, label)
            setattr(module, attr, wrapper)
            self.patched[label] = (module, attr, wrapper)

    def _wrap(self, original, label: str):
        evasion = self

        def wrapper(*args, **kwargs):
            caller = sys._getframe(1)
            if evasion.armed and not os.path.realpath(caller.f_code.co_filename).startswith(evasion._torch_dir):
                evasion.calls[f"{label} at {os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}"] += 1
            return original(*args, **kwargs)

        return wrapper

    def intact(self) -> list[str]:
        return [label for label, (module, attr, wrapper) in self.patched.items() if getattr(module, attr, None) is not wrapper]
