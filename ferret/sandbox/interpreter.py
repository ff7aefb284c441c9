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

`speed_up_interpreter()` installs both."""

from __future__ import annotations

import dataclasses
from typing import Any

from ferret.sandbox.watch import disguised

_INSTALLED: list[bool] = []  # memoize_language_patch has installed its memo in this process


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
