"""The Triton interpreter (CPU profile, `TRITON_INTERPRET=1`) without its repeated set-up work and dead checks.

Each launch of an interpreted kernel patches `triton.language` to the interpreter's semantics for its grid
(`GridExecutor.__call__`: `_patch_lang`, undone when the grid ends). Every call of a `@triton.jit` helper
from inside the kernel patches the same modules again (`InterpretedFunction.__call__`), walking every
member of `tl`, `tl.core`, `tl.math` and `tl.tensor` with `inspect.getmembers`: with helpers called in
loops this was about a third of the interpreter's time on MLA's candidate (triton 3.x).

`memoize_language_patch()` skips that repeat inside a grid when the helper sees only language modules
the grid has already patched; what gets patched, and when it is undone, is unchanged (the skipped patch
sets the same stateless functions again and was never undone by the interpreter either). It changes
nothing when the interpreter lacks the functions it expects (another Triton), and nothing on a GPU.

`skip_unasserted_overflow_checks()` stops the interpreter from computing integer-overflow checks whose assertion it
never makes. With `sanitize_overflow` (on by default) every int32 `+`, `-` and `*` is also done in int64 and compared
with int32's range, and the result goes to `device_assert`, which returns at once unless the options say `debug`
(the interpreter's never do in triton 3.9, read 2026-12-03): six wasted tensor operations per integer one, about a
quarter of MLA's interpreter time. Nothing the kernel computes changes; with `debug` on, the checks are left as they are.

`speed_up_interpreter()` installs both.

`fix_scalar_tensor_index()` keeps the interpreter working under numpy 2.5. Triton 3.6's interpreter gives `tl.tensor` an
`__index__` that calls `int()` on the tensor's numpy data, a one-element 1-d array for a scalar: numpy 2.5 refuses that
(`TypeError: only 0-dimensional arrays can be converted to Python scalars`), so every `range()` bounded by a kernel
argument raised inside the interpreter and an honest kernel was rejected. The fix gives that one element to `int()`
(as triton 3.9 does, with `squeeze()`), nothing else changed; it installs nothing where the interpreter's own `__index__`
already takes a one-element array (triton 3.9, or a numpy that still accepts the conversion).

`prepare_interpreter()` installs the fix and the speed-ups: every process that runs candidates under the interpreter
(the candidate's, its timers', the audit's workers, calibration, the red team's harm test) calls it."""

from __future__ import annotations

import dataclasses
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np

from ferret.sandbox.watch import disguised

_INSTALLED: list[bool] = []  # memoize_language_patch has installed its memo in this process
_INDEX_FIXED: list[bool] = []  # fix_scalar_tensor_index has installed its fix in this process


def memoize_language_patch() -> bool:
    """Install the memo in `triton.runtime.interpreter`; True if installed (now or before)."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    patch = getattr(interpreter, "_patch_lang", None)
    grid = getattr(interpreter, "GridExecutor", None)
    scope = getattr(interpreter, "_LangPatchScope", None)
    tl = getattr(interpreter, "tl", None)
    if patch is None or grid is None or scope is None or tl is None or not hasattr(tl, "core"):
        return False
    if _INSTALLED:
        return True
    language, core = tl, tl.core
    patched: list[set[int]] = []  # per grid being run (innermost last): ids of the language modules patched

    def languages_of(fn: Any) -> set[int]:
        # called on every helper call: two identity tests a global, nothing slower
        return {id(v) for v in fn.__globals__.values() if v is language or v is core}

    def memo_patch_lang(fn: Any):
        seen = languages_of(fn)
        if patched and seen and seen <= patched[-1]:
            return scope()  # already patched for this grid: nothing set, nothing to undo
        result = patch(fn)
        if patched:
            patched[-1] |= seen
        return result

    run_grid = grid.__call__

    def call(self, *args, **kwargs):
        patched.append(set())
        try:
            return run_grid(self, *args, **kwargs)
        finally:
            patched.pop()

    # Read as the interpreter's own functions (`disguised`): the CPU profile's interpreter is a tell anyway, but no
    # attribute or name of these says "judge".
    interpreter._patch_lang = disguised(memo_patch_lang, patch)
    grid.__call__ = disguised(call, run_grid)
    _INSTALLED.append(True)
    return True


def skip_unasserted_overflow_checks() -> bool:
    """Turn `sanitize_overflow` off in the interpreter's options where `debug` is off (the checks' assertion is then
    never made); True if the checks are off (now or before)."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    builder: Any = getattr(interpreter, "interpreter_builder", None)
    options: Any = getattr(builder, "options", None)
    if not dataclasses.is_dataclass(options) or isinstance(options, type) or getattr(options, "debug", True):
        return False
    sanitize = getattr(options, "sanitize_overflow", None)
    if sanitize is None:
        return False
    if sanitize:
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
    return True


def speed_up_interpreter() -> bool:
    """Both of the above; True if both are in place."""
    memo = memoize_language_patch()
    return skip_unasserted_overflow_checks() and memo


def _scalar_index(self: Any) -> int:
    # A scalar's data is a one-element array (1-d in the interpreter): its element, as a 0-d array, is what `int()`
    # converted before numpy 2.5, with numpy's own rules (truncation, bool, uint64). Anything else goes to `int()`
    # unchanged, to fail as it did.
    data = self.handle.data
    if isinstance(data, np.ndarray) and data.size == 1 and data.ndim > 0:
        data = data.reshape(())
    return int(data)


class _RecordingScope:
    """Stands in for the interpreter's `_LangPatchScope`: keeps what would be set, sets nothing."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def set_attr(self, obj: object, name: str, value: Any) -> None:
        self.values[name] = value


def _index_refuses_one_element_arrays(patch_tensor: Any) -> bool:
    """Whether the `__index__` that `patch_tensor` (the interpreter's `_patch_lang_tensor`) gives tensors raises on a
    scalar's one-element 1-d data under this numpy: asked of a stand-in class and a stand-in tensor, nothing patched."""
    scope = _RecordingScope()
    try:
        patch_tensor(type("StandIn", (), {}), scope)
    except Exception:  # an interpreter whose patch takes something else: not the one this fixes
        return False
    index = scope.values.get("__index__")
    if index is None:
        return False
    scalar = SimpleNamespace(handle=SimpleNamespace(data=np.array([7], dtype=np.int32)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # numpy 1.25 to 2.4: deprecated, still converted
        try:
            return index(scalar) != 7
        except TypeError:
            return True


def fix_scalar_tensor_index() -> bool:
    """Make the interpreter's `tl.tensor.__index__` convert a scalar's one-element array through its element where
    its own refuses to (triton 3.6 under numpy 2.5); True if the fix is installed (now or before)."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    patch_tensor = getattr(interpreter, "_patch_lang_tensor", None)
    if patch_tensor is None:
        return False
    if _INDEX_FIXED:
        return True
    if not _index_refuses_one_element_arrays(patch_tensor):
        return False

    def patch_lang_tensor(tensor: Any, scope: Any) -> None:
        patch_tensor(tensor, scope)

        def index(self: Any) -> int:
            return _scalar_index(self)

        # Set through the same scope, after the interpreter's own: undone with it when the grid ends. Read as the
        # interpreter's own lambda (`disguised`), as the memo's functions are.
        scope.set_attr(tensor, "__index__", disguised(index, tensor.__dict__["__index__"]))

    interpreter._patch_lang_tensor = disguised(patch_lang_tensor, patch_tensor)
    _INDEX_FIXED.append(True)
    return True


def prepare_interpreter() -> bool:
    """The interpreter as candidates get it: `fix_scalar_tensor_index()` and `speed_up_interpreter()`; True if the
    speed-ups are in place (the fix is only installed where it is needed)."""
    fix_scalar_tensor_index()
    return speed_up_interpreter()
