"""What a candidate's language needs from the judge's side: for CUDA C++, compiling through NVRTC and launching on
the judge's tensors (`ferret.backends.cuda`). Triton needs nothing here: Triton compiles and launches itself."""

from __future__ import annotations

import ast
from typing import Literal

CUDA_MODULE = "ferret.backends.cuda"


def language_of(source: str) -> Literal["triton", "cuda"]:
    """A candidate's language, from its imports: CUDA C++ if it imports `ferret.backends.cuda` (the one way a CUDA
    candidate compiles and launches), else Triton. A file that does not parse is Triton's to fail."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return "triton"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == CUDA_MODULE for a in node.names):
            return "cuda"
        if isinstance(node, ast.ImportFrom) and (node.module == CUDA_MODULE or (
                node.module == "ferret.backends" and any(a.name == "cuda" for a in node.names))):
            return "cuda"
    return "triton"
