"""Candidate languages. Each is a `Backend` (ferret/backends/base.py) that owns what differs per language:
detection, availability, the runner's and timer's loader, the launch recorder's entry points, the scan preset
and the imports a candidate may have, the environment of a candidate's process. The contract, the judge, the
sandbox, the timer and the scan ask the registry (ferret/backends/registry.py: `backend_for(source)`,
`backend(name)`, `backends()`) instead of testing a language's name.

Adding a language is one backend file here (ferret/backends/<language>.py, a `BACKEND` object), one test
file (tests/backends/test_<language>.py) and one `register(...)` line (with its import) in
ferret/backends/registry.py. Its backend names an existing scan preset; a language that needs scan rules of
its own also adds them, as a rule family and a preset, in ferret/integrity (as CUDA's are:
ferret/integrity/rules/cuda.py).

`ferret.backends.cuda` is also what a CUDA candidate imports to compile and launch its kernels (`cuda.Source`).
"""

from __future__ import annotations

from ferret.backends.registry import backend, backend_for, backends, register

__all__ = ["backend", "backend_for", "backends", "language_of", "register"]


def language_of(source: str) -> str:
    """A candidate's language by name, from its imports (`backend_for`)."""
    return backend_for(source).name
