"""The candidate languages the judge knows, one `Backend` each (ferret/backends/base.py), in the order they
were registered. A source belongs to the first backend other than the default that claims it, else to the
default (Triton)."""

from __future__ import annotations

from ferret.backends import cuda, triton
from ferret.backends.base import Backend
from ferret.syntax import parse_module

_BACKENDS: dict[str, Backend] = {}
DEFAULT = triton.BACKEND.name


def register(backend: Backend) -> Backend:
    """Add a language; its name must be new."""
    if backend.name in _BACKENDS:
        raise ValueError(f"a backend named {backend.name!r} is registered already")
    _BACKENDS[backend.name] = backend
    return backend


def backends() -> tuple[Backend, ...]:
    return tuple(_BACKENDS.values())


def names() -> tuple[str, ...]:
    """The languages a contract may name."""
    return tuple(_BACKENDS)


def backend(name: str) -> Backend:
    """The backend of a language by its name; an unknown name is a ValueError that lists the known ones."""
    if name not in _BACKENDS:
        raise ValueError(f"unknown language {name!r}; the languages are {', '.join(_BACKENDS)}")
    return _BACKENDS[name]


def backend_for(source: str) -> Backend:
    """The language a candidate's source is written in, from what it imports. A source that does not parse is
    the default's to fail."""
    try:
        tree = parse_module(source)
    except (SyntaxError, ValueError, RecursionError):
        return _BACKENDS[DEFAULT]
    claimed = (b for name, b in _BACKENDS.items() if name != DEFAULT and b.claims(tree))
    return next(claimed, _BACKENDS[DEFAULT])


def evidence(found: Backend) -> str:
    """Why a source was read as `found`'s: the module it imports, or for the default, those it does not."""
    if found.module is not None:
        return f"it imports {found.module}"
    others = [b.module for b in _BACKENDS.values() if b.module is not None]
    return f"it does not import {' or '.join(others)}" if others else "every source is"


# One line per language.
register(triton.BACKEND)
register(cuda.BACKEND)
