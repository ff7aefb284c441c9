"""One way to make a role: `resolve_role(kind, spec, contract_path=...)` -> (the role, a note).

`kind` is "optimizer", "reviewer" or "test_writer". `spec` is what the user named:

* a role that needs no model, by its registered name (`template-search`, `static`, `contract-cases`:
  the registries of ferret.roles.base), built from the contract alone;
* a model spec (`anthropic[:MODEL]`, `claude-cli[:MODEL]`, `openai:BASE_URL:MODEL`, `scripted:PATH.json`:
  ferret.models.registry), for the LLM role of that kind;
* None: the LLM role when a model is reachable (ANTHROPIC_API_KEY set, or `claude` on PATH), else the
  role that needs no model; the note then says why it fell back (the note is "" otherwise).

A spec that names nothing, a model that cannot be reached and templates that cannot be used are
UsageErrors naming the spec (as `option` quotes it: `--optimizer 'gemini:x'`) and the choices.

    optimizer, _ = resolve_role("optimizer", "template-search", contract_path=Path("contracts/rmsnorm.yaml"))
    reviewer, note = resolve_role("reviewer", None, contract_path=Path("contracts/rmsnorm.yaml"))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Literal, TypeVar, get_args, overload

from ferret.errors import UsageError
from ferret.models import registry
from ferret.models.base import Model, ModelUnavailable
from ferret.roles.base import (
    OPTIMIZERS,
    REVIEWERS,
    TEST_WRITERS,
    FromContract,
    Optimizer,
    Reviewer,
    TestWriter,
)
from ferret.roles.llm_optimizer import LLMOptimizer
from ferret.roles.offline import MissingTemplates
from ferret.roles.prompts import AGENTS_DIR
from ferret.roles.review import LLMReviewer
from ferret.roles.test_writer import LLMCaseAdviser

__all__ = ["AGENTS_DIR", "REACHABLE_MODELS", "RoleKind", "resolve_role"]

RoleKind = Literal["optimizer", "reviewer", "test_writer"]

# What an unnamed role tries, in order, before it falls back to the role that needs no model.
REACHABLE_MODELS = ("anthropic", "claude-cli")
NO_LLM = "no ANTHROPIC_API_KEY, no `claude` on PATH"

R = TypeVar("R", Optimizer, Reviewer, TestWriter)


@dataclass(frozen=True)
class _Kind(Generic[R]):
    label: str  # as people say it: "test-writer"
    registered: dict[str, FromContract[R]]  # roles that need no model, by name
    offline: str  # the registered one an unnamed role falls back to
    offline_does: str  # what that fallback means, for the note
    llm: Callable[[Model, Path], R]  # the LLM role, from a model and the agents folder

    def choices(self) -> str:
        return f"the choices are {', '.join(sorted(self.registered))} (no model) or a model spec: {registry.SPEC_FORMS}"


_OPTIMIZER: _Kind[Optimizer] = _Kind("optimizer", OPTIMIZERS, "template-search", "the offline template search", LLMOptimizer)
_REVIEWER: _Kind[Reviewer] = _Kind("reviewer", REVIEWERS, "static", "static scan only", LLMReviewer)
_TEST_WRITER: _Kind[TestWriter] = _Kind(
    "test-writer", TEST_WRITERS, "contract-cases", "the contract's own cases only", LLMCaseAdviser
)


@overload
def resolve_role(
    kind: Literal["optimizer"],
    spec: str | None,
    *,
    contract_path: str | Path,
    agents_dir: Path = AGENTS_DIR,
    option: str | None = None,
) -> tuple[Optimizer, str]: ...
@overload
def resolve_role(
    kind: Literal["reviewer"],
    spec: str | None,
    *,
    contract_path: str | Path,
    agents_dir: Path = AGENTS_DIR,
    option: str | None = None,
) -> tuple[Reviewer, str]: ...
@overload
def resolve_role(
    kind: Literal["test_writer"],
    spec: str | None,
    *,
    contract_path: str | Path,
    agents_dir: Path = AGENTS_DIR,
    option: str | None = None,
) -> tuple[TestWriter, str]: ...
@overload
def resolve_role(
    kind: str,
    spec: str | None,
    *,
    contract_path: str | Path,
    agents_dir: Path = AGENTS_DIR,
    option: str | None = None,
) -> tuple[Optimizer | Reviewer | TestWriter, str]: ...
def resolve_role(
    kind: str,
    spec: str | None,
    *,
    contract_path: str | Path,
    agents_dir: Path = AGENTS_DIR,
    option: str | None = None,
) -> tuple[Optimizer | Reviewer | TestWriter, str]:
    """The role of `kind` that `spec` names, and a note saying why a fallback happened ("" when none did).

    `contract_path` is the run's contract (a role that needs no model is built from it); `agents_dir`
    holds the LLM roles' prompts; `option` is how the spec is quoted in an error (`--optimizer`),
    "<kind> spec" by default."""
    if kind == "optimizer":
        return _resolve(_OPTIMIZER, spec, Path(contract_path), agents_dir, option)
    if kind == "reviewer":
        return _resolve(_REVIEWER, spec, Path(contract_path), agents_dir, option)
    if kind == "test_writer":
        return _resolve(_TEST_WRITER, spec, Path(contract_path), agents_dir, option)
    raise ValueError(f"unknown role kind {kind!r}; the kinds are {', '.join(get_args(RoleKind))}")


def _resolve(kind: _Kind[R], spec: str | None, contract_path: Path, agents_dir: Path, option: str | None) -> tuple[R, str]:
    if spec is None:
        return _reachable_or_offline(kind, contract_path, agents_dir)
    return _named(kind, spec, contract_path, agents_dir, option or f"{kind.label} spec"), ""


def _named(kind: _Kind[R], spec: str, contract_path: Path, agents_dir: Path, option: str) -> R:
    said = f"{option} {spec!r}"
    name = spec.strip()
    if name in kind.registered:
        try:
            return kind.registered[name].from_contract(contract_path)
        except UsageError as err:
            raise UsageError(f"{said}: {err}") from None
    try:
        model = registry.model_from_spec(name)
    except registry.UnknownModelSpec:
        raise UsageError(f"{said} is not {'an' if kind.label[0] in 'aeiou' else 'a'} {kind.label}: {kind.choices()}") from None
    except ValueError as err:
        raise UsageError(f"{said}: {err}; {kind.choices()}") from None
    except ModelUnavailable as err:
        raise UsageError(f"{said}: {err}") from None
    return kind.llm(model, agents_dir)


def _reachable_or_offline(kind: _Kind[R], contract_path: Path, agents_dir: Path) -> tuple[R, str]:
    # Looked up on the module at call time, so that a test may stand in for it.
    model = registry.available_model(list(REACHABLE_MODELS))
    if model is not None:
        return kind.llm(model, agents_dir), ""
    try:
        role = kind.registered[kind.offline].from_contract(contract_path)
    except MissingTemplates as err:
        raise UsageError(
            f"no LLM is reachable ({NO_LLM}) and {err.folder} has no kernel templates for the offline optimizer: "
            "name a model (--optimizer anthropic:MODEL, claude-cli or openai:URL:MODEL), or write templates there"
        ) from None
    except UsageError as err:
        raise UsageError(f"no LLM is reachable ({NO_LLM}) and {err}") from None
    return role, f"no LLM {kind.label} was reachable ({NO_LLM}): {kind.offline_does}"
