"""The committed MLA loop runs that a prepared device call resumes (benchmarks/results/*/runs.tar.gz, both cut in
round 3): resumed with today's template space, round 3 proposes the wgmma, wgmma + pdl and wgmma + pdl_all starts in
that order, from each run's own rounds 1 and 2, as the dispatcher builds its context (`_feedback` of each logged
candidate, the languages a GPU run judges). If the space's starts or the search change, a prepared resume would judge
other points; this says so before device time is spent on it."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import pytest

from ferret.dispatch.dispatcher import _feedback, read_run_log
from ferret.roles.base import OptimizerContext
from ferret.roles.offline import TemplateSearchOptimizer

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = REPO / "tasks" / "mla_attention" / "templates"
RUNS = {  # the packed run folder and its run id, as the prepared calls name them
    "h200-session22": ("benchmarks/results/2026-12-04-h200-session22/runs.tar.gz", "20261204-144628-8ad09c"),
    # resumed in session 32 as this predicted (benchmarks/results/2026-12-06-session32, call 1); kept as it was cut
    "h100-session31": ("benchmarks/results/2026-12-06-session31/call1-runs.tar.gz", "20261206-051045-d59944"),
}
PROPOSALS_PER_ROUND = 3  # the prepared calls' PROPOSALS


@pytest.fixture(scope="module")
def optimizer() -> TemplateSearchOptimizer:
    return TemplateSearchOptimizer(TEMPLATES)


def _unpacked(tar_path: str, tmp_path: Path) -> Path:
    with tarfile.open(REPO / tar_path) as packed:
        # the data filter where this Python has it (3.10.12, 3.11.4 and later): committed files, still no links out
        options: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        packed.extractall(tmp_path, **options)
    return tmp_path / "runs"


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_prepared_resume_judges_the_three_wgmma_starts_in_round_3(name, optimizer, tmp_path):
    tar_path, run_id = RUNS[name]
    log = read_run_log(_unpacked(tar_path, tmp_path) / run_id)
    assert log.status == "incomplete" and len(log.rounds) == 2, "the run was cut in round 3, rounds 1 and 2 logged"
    history = [_feedback(c) for r in log.rounds for c in r.candidates]
    context = OptimizerContext(
        op="mla_attention", contract_yaml="", baseline_source="", abi="", history=history,
        tried_approaches=sorted({c.approach for r in log.rounds for c in r.candidates}), round=3,
        languages=["triton", "cuda"],
    )
    proposals = optimizer.propose(context)[:PROPOSALS_PER_ROUND]
    space = optimizer.space
    wgmma = {"attention_kernel": "wgmma"}
    expected = [space.canonical({**space.default, **wgmma, **overlap})
                for overlap in ({}, {"launch_overlap": "pdl"}, {"launch_overlap": "pdl_all"})]
    assert [p.approach for p in proposals] == [optimizer.approach(point) for point in expected]
