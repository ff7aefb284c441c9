"""Runtime watches inside the candidate's process: which Triton kernels it launched (and a switch that
turns every launch into a no-op), which ATen compute ops it called on floating-point data, and whether
the harness's own functions were replaced while it ran."""

from __future__ import annotations

import builtins
import collections
import functools
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ferret.backends.base import LaunchPoint
from ferret.sandbox.host_watch import FunctionModeEvasion, HostDataWatch

# ATen ops that allocate, move, view or cast data: what a launcher legitimately does around its kernels.
# Anything else that produces a floating-point tensor is computation done by the library, not the kernel.
ALLOWED_ATEN = frozenset(
    """
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like
    full full_like new_full fill_ zero_ copy_ _to_copy to clone contiguous view _unsafe_view reshape
    _reshape_alias as_strided t transpose permute expand squeeze unsqueeze select slice narrow split
    split_with_sizes unbind detach alias lift_fresh lift_fresh_copy arange _local_scalar_dense item set_
    resize_ stride size numel dim is_same_size _has_compatible_shallow_copy_type view_as as_strided_
    record_stream sym_size sym_stride sym_numel sym_storage_offset unfold
    """.split()
)


class ComputeOpRecorder(TorchDispatchMode):
    """Counts ATen ops outside ALLOWED_ATEN whose result is a floating-point tensor.

    torch wraps a mode's `__torch_dispatch__` in `torch._dynamo.disable`, whose first call imports torch._dynamo:
    1.8-2.0 s of the first variant's first call in every candidate process here (torch 2.13, this CPU), in a process
    where Dynamo never runs. The recorder keeps that wrapper's effect without the import: the recording runs under
    `dynamo.disable` once torch._dynamo is loaded (only then can Dynamo trace a frame), and directly before."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # torch's documented opt-out of its own wrapper; `__torch_dispatch__` below does its work

    def __init__(self):
        super().__init__()
        self.flagged: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is None:
            return self._record(func, args, kwargs)
        return dynamo.disable(ComputeOpRecorder._record, recursive=True)(self, func, args, kwargs)

    def _record(self, func, args, kwargs):
        result = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name not in ALLOWED_ATEN:
            results = result if isinstance(result, (tuple, list)) else (result,)
            if any(isinstance(r, torch.Tensor) and r.is_floating_point() for r in results):
                self.flagged[f"aten.{name}"] += 1
        return result


def disguised(wrapper: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    """`wrapper`, standing in for `original`, made to read as it does: its name, qualified name, module, docstring
    and attributes, and (for a Python function) its code's name, file and first line. No `__wrapped__` leads to the
    original (only the original's own, where it has one). A candidate that asked a launch entry point who it is (a
    judge's wrapper, or the library's own) would otherwise learn that it is being judged. What still differs: the
    signature (`*args, **kwargs`) and the closure, reached only through `__code__`, `__closure__` and `inspect`, which
    the static scan names (SECURITY.md)."""
    # A class stood in for (a context manager of torch._C) keeps its attributes to itself: they are its methods.
    functools.update_wrapper(wrapper, original, updated=() if isinstance(original, type) else functools.WRAPPER_UPDATES)
    if hasattr(original, "__wrapped__"):  # a decorated original (contextlib.contextmanager) has its own
        wrapper.__wrapped__ = original.__wrapped__  # type: ignore[attr-defined]
    else:
        del wrapper.__wrapped__  # type: ignore[attr-defined]
    code, own = getattr(original, "__code__", None), getattr(wrapper, "__code__", None)
    if code is not None and own is not None:
        wrapper.__code__ = own.replace(  # type: ignore[attr-defined]
            co_name=code.co_name, co_qualname=code.co_qualname, co_filename=code.co_filename, co_firstlineno=code.co_firstlineno
        )
    return wrapper


class LaunchRecorder:
    """Wraps the launch entry points of every language's kernels (each backend's `launch_points`: Triton's compiled
    and interpreted `run`, `ferret.backends.cuda.Source.launch`) to count launches by kernel name; with `noop` set,
    launches do nothing, so outputs show what the kernels contributed."""

    def __init__(self):
        from ferret.backends.registry import backends

        self.counts: collections.Counter[str] = collections.Counter()
        self.noop = False
        self.patched: dict[str, tuple[Any, Callable[..., Any], str]] = {}  # label -> (class, its wrapper, attribute)
        for backend in backends():
            for point in backend.launch_points():
                self._patch(point)

    def _patch(self, point: LaunchPoint) -> None:
        original = getattr(point.owner, point.attribute)
        recorder = self

        def run(self, *args, **kwargs):
            name = point.kernel_name(self, args, kwargs)
            if recorder.noop:
                recorder.counts[name] += 1
                return None
            result = original(self, *args, **kwargs)
            # Counted once it launched: a launch that raised (and was caught) launched nothing, and must not stand
            # in for a kernel that ran without a counted launch (`guards.foreign_kernels`).
            recorder.counts[name] += 1
            return result

        run = disguised(run, original)
        setattr(point.owner, point.attribute, run)
        self.patched[point.label] = (point.owner, run, point.attribute)

    def intact(self) -> list[str]:
        return [label for label, (cls, run, attr) in self.patched.items() if getattr(cls, attr) is not run]


class WatchEvasion:
    """Wraps the functions that take a dispatch mode off the stack; while `armed` (the candidate's call is
    being watched), any call of them is recorded: switching off the ATen watch is itself the evidence."""

    TARGETS = (
        ("torch.utils._python_dispatch", "_disable_current_modes"),
        ("torch.utils._python_dispatch", "_pop_mode"),
        ("torch.utils._python_dispatch", "_pop_mode_temporarily"),
        ("torch._C", "_pop_torch_dispatch_stack"),
        ("torch._C", "_unset_dispatch_mode"),
        ("torch._C", "_set_dispatch_mode"),
        ("torch._C", "_push_on_torch_dispatch_stack"),
        ("torch._C", "_DisableTorchDispatch"),
        ("torch._C", "_ExcludeDispatchKeyGuard"),
    )

    def __init__(self):
        import importlib

        self.armed = False
        self.calls: collections.Counter[str] = collections.Counter()
        self.patched: dict[str, tuple[object, str, object]] = {}
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
            if evasion.armed:
                evasion.calls[label] += 1
            return original(*args, **kwargs)

        return disguised(wrapper, original)

    def intact(self) -> list[str]:
        return [label for label, (module, attr, wrapper) in self.patched.items() if getattr(module, attr, None) is not wrapper]


def _critical_functions(runner_module) -> dict[str, tuple[object, str, object]]:
    """(owner, attribute, object) of every function the harness relies on after the candidate ran."""
    import safetensors.torch
    import xxhash

    owners = {
        "time": (time, ["perf_counter", "time", "monotonic", "sleep"]),
        "builtins": (builtins, ["open", "print", "isinstance", "type"]),
        "json": (json, ["dumps", "loads"]),
        "threading": (threading, ["active_count"]),
        "torch": (torch, ["equal", "full", "cuda"]),
        "torch.Tensor": (torch.Tensor, ["copy_", "clone", "cpu", "contiguous", "view", "to"]),
        # The classes too: do_bench creates new Event objects on every call, so a subclass put in their
        # place would time everything without touching a single method of the original.
        "torch.cuda": (
            torch.cuda,
            ["synchronize", "memory_allocated", "is_available", "Event", "Stream", "current_stream", "stream"],
        ),
        "torch.cuda.Event": (torch.cuda.Event, ["elapsed_time", "record", "synchronize"]),
        "safetensors.torch": (safetensors.torch, ["save_file", "load_file"]),
        "xxhash": (xxhash, ["xxh3_128_hexdigest"]),
        "runner": (
            runner_module,
            [
                "content_digest",
                "fresh_outputs",
                "run_variant",
                "save_file",
                "load_file",
                "_sync",
                "ComputeOpRecorder",
                "HostDataWatch",
                "_call",
                "_first_call",
                "_fast_runs",
                "_traced_run",
                "_noop_run",
                "_Stopwatch",
                "run_stress",
                "_bits",
                "_same_bits",
            ],
        ),
        "ComputeOpRecorder": (ComputeOpRecorder, ["__torch_dispatch__", "_record", "__enter__", "__exit__"]),
        "HostDataWatch": (HostDataWatch, ["__torch_function__", "_candidate_line", "_real", "__enter__", "__exit__"]),
    }
    try:
        import triton.testing

        owners["triton.testing"] = (triton.testing, ["do_bench"])
    except ImportError:
        pass
    found = {}
    for label, (owner, names) in owners.items():
        for name in names:
            if hasattr(owner, name):
                found[f"{label}.{name}"] = (owner, name, getattr(owner, name))
    return found


class HarnessGuard:
    """Remembers the harness's functions before the candidate is loaded; `changed()` names any replaced."""

    def __init__(
        self,
        runner_module,
        launches: LaunchRecorder,
        evasion: WatchEvasion | None = None,
        host_evasion: FunctionModeEvasion | None = None,
    ):
        self.snapshot = _critical_functions(runner_module)
        self.launches = launches
        self.evasion = evasion
        self.host_evasion = host_evasion

    def changed(self) -> list[str]:
        moved = [label for label, (owner, name, obj) in self.snapshot.items() if getattr(owner, name, None) is not obj]
        watches = (self.evasion.intact() if self.evasion else []) + (self.host_evasion.intact() if self.host_evasion else [])
        return moved + self.launches.intact() + watches
