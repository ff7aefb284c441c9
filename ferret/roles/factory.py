"""Roles named on the command line: a name registered in `ferret.roles.base` (`template-search`,
`static`, `contract-cases`), or a model spec for the LLM role."""

from __future__ import annotations

from pathlib import Path


def _registered(table: dict, spec: str, contract_path: Path):
    # The registries fill as their modules are imported.
    import ferret.roles.offline  # noqa: F401
    import ferret.roles.review  # noqa: F401
    import ferret.roles.test_writer  # noqa: F401

    return table[spec].from_contract(Path(contract_path)) if spec in table else None


def _model(spec: str, table: dict):
    """The model `spec` names; a name that is neither registered nor a model spec is refused with both lists."""
    from ferret.models.registry import model_from_spec

    try:
        return model_from_spec(spec)
    except ValueError as err:
        raise ValueError(f"{err}; or one of {sorted(table)}") from None


def make_optimizer(spec: str, contract_path: Path):
    from ferret.dispatch.dispatcher import REPO_AGENTS
    from ferret.roles.base import OPTIMIZERS
    from ferret.roles.llm_optimizer import LLMOptimizer

    return _registered(OPTIMIZERS, spec, contract_path) or LLMOptimizer(_model(spec, OPTIMIZERS), REPO_AGENTS)


def make_reviewer(spec: str, contract_path: Path):
    from ferret.dispatch.dispatcher import REPO_AGENTS
    from ferret.roles.base import REVIEWERS
    from ferret.roles.review import LLMReviewer

    return _registered(REVIEWERS, spec, contract_path) or LLMReviewer(_model(spec, REVIEWERS), REPO_AGENTS)


def make_test_writer(spec: str, contract_path: Path):
    from ferret.dispatch.dispatcher import REPO_AGENTS
    from ferret.roles.base import TEST_WRITERS
    from ferret.roles.test_writer import LLMTestWriter

    return _registered(TEST_WRITERS, spec, contract_path) or LLMTestWriter(_model(spec, TEST_WRITERS), REPO_AGENTS)
