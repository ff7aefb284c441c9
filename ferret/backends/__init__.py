"""Candidate languages. Each is a `Backend` (ferret/backends/base.py) that owns everything that differs per
language: detection, availability, the runner's and timer's loader, the launch recorder's entry points, the
scan preset, the environment of a candidate's process, the sandbox's tool folders. The rest of ferret asks
the registry (ferret/backends/registry.py: `backend_for(source)`, `backend(name)`, `backends()`) and never
names a language.

Adding a language is one backend file here (ferret/backends/<language>.py, a `BACKEND` object), one test
file (tests/backends/test_<language>.py) and one `register(...)` line in ferret/backends/registry.py.

`ferret.backends.cuda` is also what a CUDA candidate imports to compile and launch its kernels (`cuda.Source`).
"""

from __future__ import annotations

from ferret.backends.registry import backend, backend_for, backends, register

__all__ = ["backend", "backend_for", "backends", "language_of", "register"]


def language_of(source: str) -> str:
    """A candidate's language by name, from its imports (`backend_for`)."""
    return backend_for(source).name
