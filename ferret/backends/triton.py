"""Triton, the default language: a candidate that imports no other backend's module. Triton compiles and
launches its kernels itself; on the CPU profile they run under its interpreter (TRITON_INTERPRET=1)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ferret.backends.base import LaunchPoint


def _kernel_name(fn_self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return getattr(fn_self, "__name__", None) or getattr(getattr(fn_self, "fn", None), "__name__", "kernel")


class TritonBackend:
    name = "triton"
    title = "Triton"
    module: str | None = None
    scan_preset = "triton"
    imports: tuple[str, ...] = ("triton", "triton.language", "triton.runtime", "triton.compiler", "triton.tools")

    def claims(self, tree: ast.Module) -> bool:
        return True  # the default: asked only when no other backend claims the source

    def unavailable(self, device: str, profile: str) -> str | None:
        return None  # on a GPU compiled, elsewhere interpreted

    def load_before_sandbox(self, on_gpu: bool) -> None:
        return None  # Triton loads what it needs with the harness, before the sandbox

    def launch_points(self) -> list[LaunchPoint]:
        """Compiled kernels' `JITFunction.run` and interpreted ones' `InterpretedFunction.run`."""
        points = []
        try:
            from triton.runtime.jit import JITFunction

            points.append(LaunchPoint(JITFunction, "run", "JITFunction.run", _kernel_name))
        except ImportError:
            pass
        try:
            from triton.runtime.interpreter import InterpretedFunction

            points.append(LaunchPoint(InterpretedFunction, "run", "InterpretedFunction.run", _kernel_name))
        except ImportError:
            pass
        return points

    def settings(self, workdir: Path, compile_flags: Mapping[str, Any]) -> dict[str, str]:
        return {}  # its cache and interpreter switch are Triton's own variables (ferret.sandbox.launch)

    def configure(self, settings: Mapping[str, str]) -> None:
        return None


BACKEND = TritonBackend()
