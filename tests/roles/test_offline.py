"""The offline optimizer (ferret/roles/offline.py) and the kernel templates it renders.

Every point of tasks/{rmsnorm,softmax}/templates/space.yaml renders a candidate that parses and passes the
static integrity scan; a sample of points per op (the default among them, and looped ones) passes the CPU
gate; shapes the gate never draws (no rows, rows too wide for one pass) match the reference; the search
proposes the default first, never repeats an approach, pivots on request and stops on the CPU.
"""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from ferret.backends import cuda
from ferret.contract.load import load_contract
from ferret.gate.scan import shape_constants
from ferret.integrity.scan import scan_source
from ferret.roles.base import OPTIMIZERS, Optimizer, OptimizerContext, RoundFeedback
from ferret.roles.offline import (
    TemplateSearchOptimizer,
    TemplateSpace,
    available_templates,
    load_space,
)

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "contracts" / "rmsnorm.yaml"
TEMPLATES = REPO / "tasks" / "rmsnorm" / "templates"
DEFAULT = "rows=1,warps=4,single-pass"

# Per op: the default, single-pass points with and without hints, and looped points of every block size.
GATE_SAMPLE = {
    "rmsnorm": [
        DEFAULT,
        "rows=8,warps=16,single-pass,evict-hints",
        "rows=4,warps=2,single-pass",
        "rows=2,warps=8,looped,block=1024,evict-hints",
        "rows=8,warps=4,looped,block=2048",
        "rows=4,warps=1,looped,block=4096,evict-hints",
    ],
    "softmax": [
        DEFAULT,
        "rows=8,warps=2,single-pass,evict-hints",
        "rows=4,warps=8,online,block=1024,evict-hints",
        "rows=2,warps=4,online,block=4096",
    ],
}
GATE_CASES = [(op, approach) for op, approaches in GATE_SAMPLE.items() for approach in approaches]


@pytest.fixture(scope="module")
def optimizer() -> TemplateSearchOptimizer:
    return TemplateSearchOptimizer(TEMPLATES)


def context(history=(), tried=(), must_pivot=False, round=None) -> OptimizerContext:
    history = list(history)
    return OptimizerContext(
        op="rmsnorm",
        contract_yaml=CONTRACT.read_text(),
        baseline_source="",
        abi="run(inputs, outputs, params, trace=None) -> None",
        history=history,
        tried_approaches=sorted(set(tried) | {h.approach for h in history}),
        must_pivot=must_pivot,
        round=round or len(history) + 1,
    )


def feedback(approach: str, passed: bool, speedup: float | None = None, round: int = 1) -> RoundFeedback:
    return RoundFeedback(
        round=round,
        approach=approach,
        passed=passed,
        first_failing_stage=None if passed else "inv_rms",
        failures=[] if passed else ["typical@float32: stage inv_rms: rel_l2 0.5"],
        timing={"speedup": speedup, "target_met": speedup >= 1.5} if speedup is not None else {},
    )


# ------------------------------------------------------------------------------------------------ space
def test_space_and_registration(optimizer):
    space = optimizer.space
    assert space.op == "rmsnorm" and space.template == "rmsnorm.py.j2"
    # block_n applies to the looped policy only: 4*5*2 single-pass + 4*5*3*2 looped points.
    assert len(optimizer.points) == 40 + 120
    assert len({space.approach(p) for p in optimizer.points}) == len(optimizer.points)
    assert space.approach(space.default_point()) == DEFAULT
    assert all(p["block_n"] is None for p in optimizer.points if p["block_policy"] == "next_pow2")
    assert OPTIMIZERS["template-search"] is TemplateSearchOptimizer
    assert isinstance(optimizer, Optimizer) and optimizer.name == "template-search"
    assert available_templates(REPO / "tasks" / "rmsnorm")


def test_available_templates_and_bad_spaces(tmp_path):
    assert not available_templates(tmp_path)
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "space.yaml").write_text("op: x\ntemplate: missing.j2\n")
    assert not available_templates(tmp_path)
    data = load_space(TEMPLATES).model_dump()
    with pytest.raises(ValueError, match="default"):
        TemplateSpace.model_validate({**data, "default": {**data["default"], "num_warps": 3}})
    with pytest.raises(ValueError, match="unknown"):
        TemplateSpace.model_validate({**data, "applies_when": {"block_n": {"tiles": [1]}}})
    with pytest.raises(ValueError):
        TemplateSpace.model_validate({**data, "typo": 1})
    # A space file without `invariants` is refused naming the file and the field.
    (tmp_path / "templates" / "rmsnorm.py.j2").write_text("")
    (tmp_path / "templates" / "space.yaml").write_text((TEMPLATES / "space.yaml").read_text().split("invariants:")[0])
    with pytest.raises(ValueError, match=r"templates/space.yaml: invariants: Field required"):
        load_space(tmp_path / "templates")


@pytest.mark.parametrize("op", sorted(GATE_SAMPLE))
def test_every_point_renders_and_scans_clean(op):
    optimizer = TemplateSearchOptimizer(REPO / "tasks" / op / "templates")
    assert optimizer.space.op == op and available_templates(REPO / "tasks" / op)
    assert len(optimizer.points) == 160
    constants = shape_constants(load_contract(REPO / "contracts" / f"{op}.yaml"))
    for point in optimizer.points:
        source = optimizer.render(point)
        name = optimizer.approach(point)
        compile(source, name, "exec")
        result = scan_source(source, path=f"{name}.py", shape_constants=constants)
        assert result.passed, (name, [(f.line, f.message) for f in result.findings])
        assert f"ROWS_PER_PROGRAM = {point['rows_per_program']}\n" in source
        assert f"NUM_WARPS = {point['num_warps']}\n" in source
        assert ("eviction_policy" in source) == point["eviction"], name
        if point["block_policy"] == "looped":
            assert f"LOOP_BLOCK_N = {point['block_n']}\n" in source
            assert f"_{op}_single_pass_kernel" not in source
        else:
            assert f"_{op}_single_pass_kernel[grid]" in source and "LOOP_BLOCK_N" not in source


# ------------------------------------------------------------------------------------------------ gate
@pytest.fixture(scope="module")
def gate_verdicts(tmp_path_factory):
    """The sample judged by the real CPU gates, each built once (two candidates judged at a time)."""
    from ferret.gate.build import build_gate
    from ferret.gate.judge import check

    gates = tmp_path_factory.mktemp("offline-gates")
    folder = tmp_path_factory.mktemp("offline-candidates")
    jobs = []
    for op, approaches in GATE_SAMPLE.items():
        contract = REPO / "contracts" / f"{op}.yaml"
        build_gate(contract, gates_dir=gates, profile="cpu")
        optimizer = TemplateSearchOptimizer(REPO / "tasks" / op / "templates")
        for i, approach in enumerate(approaches):
            path = folder / f"{op}_candidate_{i}.py"
            path.write_text(optimizer.render(optimizer.by_approach[approach]))
            jobs.append((contract, path))
    with ThreadPoolExecutor(max_workers=2) as pool:
        verdicts = list(pool.map(lambda job: check(job[0], job[1], gates_dir=gates, profile="cpu")[0], jobs))
    return dict(zip(GATE_CASES, verdicts, strict=True))


@pytest.mark.parametrize("op,approach", GATE_CASES)
def test_sampled_points_pass_the_cpu_gate(gate_verdicts, op, approach):
    from ferret.gate.judge import summary

    verdict = gate_verdicts[(op, approach)]
    assert verdict.passed, summary(verdict)
    assert not verdict.detections
    assert verdict.parts["edge_cases"].status == "pass" and verdict.parts["fresh_cases"].status == "pass"
    assert not verdict.timing.measured  # the CPU profile never times


def _load(source: str, path: Path):
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf * 0 in the interpreter
@pytest.mark.parametrize("approach", [DEFAULT, "rows=2,warps=4,looped,block=1024,evict-hints"])
def test_shapes_outside_the_gate(optimizer, tmp_path, approach):
    """No rows at all, and (single pass) a row too wide for registers, which takes the looped kernel."""
    from tasks.rmsnorm.reference import reference

    module = _load(optimizer.render(optimizer.by_approach[approach]), tmp_path / "candidate_shapes.py")
    params = {"eps": 1e-6}
    empty = {"x": torch.empty(0, 64), "weight": torch.ones(64)}
    y, trace = torch.empty(0, 64), {}
    module.run(empty, {"y": y}, params, trace)
    assert trace["inv_rms"].shape == (0,)

    generator = torch.Generator().manual_seed(0)
    inputs = {"x": torch.randn(2, 40_000, generator=generator), "weight": torch.randn(40_000, generator=generator)}
    inputs["x"][1, 5] = float("inf")
    y, trace = torch.full((2, 40_000), float("nan")), {}
    module.run(inputs, {"y": y}, params, trace)
    golden = reference(inputs, params)
    torch.testing.assert_close(trace["inv_rms"].double(), golden["inv_rms"], rtol=1e-5, atol=0, equal_nan=True)
    torch.testing.assert_close(y.double(), golden["y"], rtol=1e-5, atol=1e-6, equal_nan=True)
    assert torch.isnan(y[1, 5]) and (y[1, :5] == 0).all()


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("approach", [DEFAULT, "rows=2,warps=4,online,block=2048"])
def test_softmax_shapes_outside_the_gate(tmp_path, approach):
    from tasks.softmax.reference import reference

    optimizer = TemplateSearchOptimizer(REPO / "tasks" / "softmax" / "templates")
    module = _load(optimizer.render(optimizer.by_approach[approach]), tmp_path / "candidate_softmax.py")
    y, trace = torch.empty(0, 64), {}
    module.run({"x": torch.empty(0, 64)}, {"y": y}, {}, trace)
    assert trace["row_max"].shape == trace["row_sum"].shape == (0,)

    x = 3.0 * torch.randn(3, 40_000, generator=torch.Generator().manual_seed(1))
    x[0, :35_000] = float("-inf")  # masked up to the last blocks
    x[1, 7] = float("nan")
    x[2] = float("-inf")
    y, trace = torch.full_like(x, float("nan")), {}
    module.run({"x": x}, {"y": y}, {}, trace)
    golden = reference({"x": x}, {})
    for stage, value in (("row_max", trace["row_max"]), ("row_sum", trace["row_sum"]), ("y", y)):
        torch.testing.assert_close(value.double(), golden[stage], rtol=1e-5, atol=1e-9, equal_nan=True, msg=stage)
    assert torch.isnan(y[1:]).all() and not torch.isnan(y[0]).any()


# ------------------------------------------------------------------------------------------------ search
def test_round_one_proposes_the_default_alone(optimizer):
    proposals = optimizer.propose(context())
    assert [p.approach for p in proposals] == [DEFAULT]
    assert proposals[0].source == optimizer.render(optimizer.space.default_point())
    assert "default" in proposals[0].notes


def test_cpu_stops_once_a_point_passes_without_timing(optimizer):
    assert optimizer.propose(context([feedback(DEFAULT, passed=True)])) == []
    # Even when asked to pivot: with no timing nothing could be shown to be better.
    assert optimizer.propose(context([feedback(DEFAULT, passed=True)], must_pivot=True)) == []


def test_after_a_failure_the_search_moves_one_step_from_the_default(optimizer):
    proposals = optimizer.propose(context([feedback(DEFAULT, passed=False)]))
    assert 1 <= len(proposals) <= optimizer.budget
    default = optimizer.space.default_point()
    for p in proposals:
        assert p.approach != DEFAULT
        assert optimizer.space.distance(optimizer.by_approach[p.approach], default) == 1


def test_with_timing_it_climbs_from_the_fastest_passing_point(optimizer):
    best = "rows=2,warps=4,single-pass"
    history = [
        feedback(DEFAULT, True, 1.1, round=1),
        feedback(best, True, 1.4, round=2),
        feedback("rows=1,warps=8,single-pass", False, round=2),
    ]
    proposals = optimizer.propose(context(history))
    assert len(proposals) == optimizer.budget
    anchor = optimizer.by_approach[best]
    tried = {h.approach for h in history}
    for p in proposals:
        assert p.approach not in tried
        assert optimizer.space.distance(optimizer.by_approach[p.approach], anchor) == 1
        assert best in p.notes


def test_tried_approaches_are_never_proposed(optimizer):
    first = [p.approach for p in optimizer.propose(context([feedback(DEFAULT, passed=False)]))]
    again = optimizer.propose(context([feedback(DEFAULT, passed=False)], tried=first))
    assert again and not {p.approach for p in again} & (set(first) | {DEFAULT})


def test_a_long_search_never_repeats_and_ends_when_the_space_is_spent(optimizer):
    """Rounds fed by a made-up timing: every proposal is new, and the search ends with []."""

    def speed(point):
        return 1.0 + 0.1 * point["rows_per_program"] - 0.01 * abs(point["num_warps"] - 8)

    history, seen = [], []
    for number in range(1, 200):
        proposals = optimizer.propose(context(history, must_pivot=number % 7 == 0, round=number))
        if not proposals:
            break
        for p in proposals:
            seen.append(p.approach)
            history.append(feedback(p.approach, True, speed(optimizer.by_approach[p.approach]), round=number))
    assert seen[0] == DEFAULT
    assert len(seen) == len(set(seen)) == len(optimizer.points)
    assert optimizer.propose(context(history)) == []


def test_must_pivot_changes_the_block_policy(optimizer):
    history = [feedback(DEFAULT, True, 1.2, round=1), feedback("rows=2,warps=4,single-pass", True, 1.3, round=2)]
    proposals = optimizer.propose(context(history, must_pivot=True))
    assert proposals
    assert all(optimizer.by_approach[p.approach]["block_policy"] == "looped" for p in proposals)
    assert all("Pivot" in p.notes for p in proposals)
    # The rest of the point stays near the best one.
    best = optimizer.by_approach["rows=2,warps=4,single-pass"]
    assert optimizer.space.distance(optimizer.by_approach[proposals[0].approach], best) == 1

    # From a looped point that failed (nothing passed yet), the pivot goes back to single-pass.
    looped = "rows=1,warps=4,looped,block=2048"
    history = [feedback(DEFAULT, False, round=1), feedback(looped, False, round=2)]
    proposals = optimizer.propose(context(history, must_pivot=True))
    assert proposals and all(optimizer.by_approach[p.approach]["block_policy"] == "next_pow2" for p in proposals)


def test_pivot_with_every_other_policy_tried_still_proposes_something_new(optimizer):
    looped = [a for a, p in optimizer.by_approach.items() if p["block_policy"] == "looped"]
    history = [feedback(DEFAULT, True, 1.2)]
    proposals = optimizer.propose(context(history, tried=looped, must_pivot=True))
    assert proposals
    assert all(p.approach not in looped and p.approach != DEFAULT for p in proposals)


def test_budget_seed_and_op(optimizer):
    small = TemplateSearchOptimizer(TEMPLATES, budget=1, seed=3)
    assert [p.approach for p in small.propose(context())] == [DEFAULT]
    assert len(small.propose(context([feedback(DEFAULT, passed=False)]))) == 1
    again = TemplateSearchOptimizer(TEMPLATES, budget=1, seed=3)
    history = [feedback(DEFAULT, passed=False)]
    assert [p.approach for p in small.propose(context(history))] == [p.approach for p in again.propose(context(history))]
    with pytest.raises(ValueError):
        TemplateSearchOptimizer(TEMPLATES, budget=0)
    with pytest.raises(ValueError, match="softmax"):
        optimizer.propose(context().model_copy(update={"op": "softmax"}))


# ------------------------------------------------------------------------------------------------ starts
@pytest.fixture(scope="module")
def mla_optimizer() -> TemplateSearchOptimizer:
    return TemplateSearchOptimizer(REPO / "tasks" / "mla_attention" / "templates")


def _mla(history=(), tried=()) -> OptimizerContext:
    return context(history, tried).model_copy(update={"op": "mla_attention"})


def test_starts_come_first_once_a_point_is_timed_then_the_neighbours(mla_optimizer):
    space = mla_optimizer.space
    default = space.approach(space.default_point())
    # the Triton starts (the CUDA one is never proposed where the run judges Triton only, as this context says)
    starts = [space.approach(p) for p in space.start_points() if space.language_of(p) is None]
    assert len(starts) == len(set(starts)) == 3 and default not in starts
    # two steps or more from the default: a one-step climb reaches a start only if a step on the way is faster alone
    assert all(space.distance(p, space.default_point()) >= 2 for p in space.start_points() if space.language_of(p) is None)
    proposals = mla_optimizer.propose(_mla([feedback(default, True, 1.3)]))
    assert [p.approach for p in proposals[:3]] == starts
    assert all("A start of the space" in p.notes for p in proposals[:3])
    # the budget's remainder: one step from the fastest passing point
    assert len(proposals) == mla_optimizer.budget
    assert space.distance(mla_optimizer.by_approach[proposals[3].approach], space.default_point()) == 1
    # a start already tried is not proposed again; the next ones move up
    again = mla_optimizer.propose(_mla([feedback(default, True, 1.3), feedback(starts[0], True, 1.9, round=2)]))
    assert [p.approach for p in again[:2]] == starts[1:]
    assert all(space.distance(mla_optimizer.by_approach[p.approach], space.start_points()[0]) == 1 for p in again[2:])


def test_starts_wait_for_a_timed_pass(mla_optimizer):
    space = mla_optimizer.space
    default = space.approach(space.default_point())
    starts = {space.approach(p) for p in space.start_points()}
    # nothing has passed yet: correctness first, near the default
    failed = mla_optimizer.propose(_mla([feedback(default, False)]))
    assert failed and not {p.approach for p in failed} & starts
    # passed without a time (no GPU): nothing could be shown faster, so nothing, starts included
    assert mla_optimizer.propose(_mla([feedback(default, True)])) == []


def test_a_point_in_a_language_the_run_cannot_judge_is_never_proposed(mla_optimizer):
    """The MLA space's kernel 3 on warpgroup MMA is a CUDA candidate (`languages`): where the run judges Triton only
    (the CPU profile) no proposal needs CUDA, at any stage of the search; where it judges CUDA too, the wgmma start
    comes with the others once the default passes with a time."""
    space = mla_optimizer.space
    default = space.approach(space.default_point())
    wgmma = space.approach(space.canonical({**space.default, "attention_kernel": "wgmma"}))
    assert wgmma in mla_optimizer.by_approach and space.language_of(mla_optimizer.by_approach[wgmma]) == "cuda"
    for history in ([], [feedback(default, False)], [feedback(default, True, 1.3)]):
        proposals = mla_optimizer.propose(_mla(history))
        assert proposals and all(space.language_of(mla_optimizer.by_approach[p.approach]) is None for p in proposals)
    proposals = mla_optimizer.propose(_mla(history).model_copy(update={"languages": ["triton", "cuda"]}))
    starts = [space.approach(p) for p in space.start_points()]
    assert len(starts) == 6 and [p.approach for p in proposals] == starts[: mla_optimizer.budget] == starts[:4]
    assert proposals[3].approach == wgmma and "from ferret.backends import cuda" in proposals[3].source
    # the fifth start (wgmma with launch_overlap=pdl) leads the round after, the sixth (pdl_all: kernel 3 launched
    # programmatically too) follows it
    tried = [feedback(default, True, 1.3), *(feedback(name, True, 1.5, round=2) for name in starts[:4])]
    after = mla_optimizer.propose(_mla(tried).model_copy(update={"languages": ["triton", "cuda"]}))
    assert after[0].approach == starts[4] == f"{wgmma},pdl-launches" and "launch_pdl=gdc" in after[0].source
    assert after[1].approach == starts[5] == f"{wgmma},pdl-launches-with-kernel3"
    assert "programmatic=gdc" in after[1].source


@pytest.mark.parametrize(
    ("languages", "message"),
    [
        ({"tiles": {1: "cuda"}}, r"languages name unknown parameter 'tiles'"),
        ({"num_warps": {3: "cuda"}}, r"languages of 'num_warps': no values \[3\]"),
        ({"num_warps": {4: "cuda"}}, r"the default point must need no language beyond the template's own"),
    ],
)
def test_bad_languages_are_refused_naming_them(languages, message):
    data = load_space(TEMPLATES).model_dump()
    with pytest.raises(ValueError, match=message):
        TemplateSpace.model_validate({**data, "languages": languages})


@pytest.mark.parametrize(
    ("start", "message"),
    [
        ({"tiles": 2}, r"starts\[0\] names unknown parameter 'tiles'"),
        ({"num_warps": 3}, r"starts\[0\]: num_warps=3 is not one of \[1, 2, 4, 8, 16\]"),
        ({"block_n": 1024}, r"starts\[0\]: block_n does not apply at that point"),
        ({"num_warps": 4}, r"starts\[0\] is the default point"),
    ],
)
def test_a_bad_start_is_refused_naming_it(start, message):
    data = load_space(TEMPLATES).model_dump()
    assert data["default"]["num_warps"] == 4 and data["default"]["block_policy"] == "next_pow2"
    with pytest.raises(ValueError, match=message):
        TemplateSpace.model_validate({**data, "starts": [start]})


def test_every_point_of_the_cuda_rmsnorm_template_compiles_for_hopper_and_scans_clean():
    """The CUDA template: each of its 15 points renders a launcher whose kernels NVRTC compiles for
    sm_90a (the H200's, ferret.backends.cuda.DEFAULT_ARCH), with the block size and vector width of the point, and
    that the scan passes."""
    import types

    optimizer = TemplateSearchOptimizer(TEMPLATES / "cuda")
    assert optimizer.space.op == "rmsnorm" and len(optimizer.points) == 15
    constants = shape_constants(load_contract(CONTRACT))
    for point in optimizer.points:
        source, name = optimizer.render(point), optimizer.approach(point)
        result = scan_source(source, path=f"{name}.py", shape_constants=constants)
        assert result.passed, (name, [(f.line, f.message) for f in result.findings])
        module = types.ModuleType(f"cuda_rmsnorm_point_{len(name)}")
        exec(compile(source, name, "exec"), module.__dict__)
        assert module.VEC == point["vec"] and f"#define VEC {point['vec']}\n" in source
        assert module.THREADS == (point["threads"] if point["row_mode"] == "block" else 256)
        cubin = module.KERNELS.cubin(cuda.DEFAULT_ARCH)
        assert all(kernel.encode() in cubin for kernel in module.KERNEL_FOR.values()), name


def test_a_cuda_contract_is_searched_over_the_cuda_templates(tmp_path):
    from ferret_testkit import write_contract

    contract = write_contract(tmp_path, lambda d: d["backend"].update(language="cuda"), link_tasks=True)
    optimizer = TemplateSearchOptimizer.from_contract(contract)
    assert optimizer.template_dir == (tmp_path / "tasks" / "rmsnorm" / "templates" / "cuda")
    assert optimizer.space.template == "rmsnorm_cuda.py.j2"
    assert TemplateSearchOptimizer.from_contract(CONTRACT).template_dir == TEMPLATES


def _every_point_by_brute_force(space: TemplateSpace) -> list[dict]:
    """The whole product of the values, canonicalized, first met kept: what `points` must list, in its order."""
    result: list[dict] = [{}]
    for name, values in space.parameters.items():
        result = [{**p, name: v} for p in result for v in values]
    seen: dict[str, dict] = {}
    for p in result:
        c = space.canonical(p)
        seen.setdefault(space.approach(c), c)
    return list(seen.values())


def test_points_skip_values_that_cannot_apply_and_still_list_every_point_in_order():
    """`points` branches once on a parameter that the ones before it say cannot apply; one whose condition names a
    later parameter still branches on every value. The list must equal the brute-force product's, order included."""
    space = TemplateSpace.model_validate(
        {
            "op": "toy",
            "template": "t.j2",
            "pivot": "policy",
            "invariants": "toy",
            "parameters": {"policy": ["a", "b"], "late": [0, 1], "tiles": [1, 2, 4], "gate": [8, 9], "width": [16, 32]},
            "applies_when": {
                "tiles": {"policy": ["b"]},  # decided before it: pruned when policy is a
                "late": {"gate": [9]},  # names a later parameter: branches on both
                "width": {"policy": ["b"], "gate": [8]},
            },  # pruned unless policy b and gate 8
            "default": {"policy": "a", "late": 0, "tiles": 1, "gate": 8, "width": 16},
        }
    )
    assert space.points() == _every_point_by_brute_force(space)
    # policy a: late (with gate 9) x gate = 3; policy b: 3 tiles x (gate 8: 2 widths, gate 9: 2 lates) = 12
    assert len(space.points()) == 3 + 12


def test_the_mla_space_lists_its_points_once_each():
    space = load_space(REPO / "tasks" / "mla_attention" / "templates")
    table = space.point_table()
    # 138,240 before kernel 3's loop axes; loop_schedule (at 2+ stages and 8 or 16 warps), kv_loads, rescale: 829,440;
    # split_chunk, programs_per_sm (3 values) at per_request only: 1,105,920; split_chunk=balanced (programs_per_sm
    # applies, small_token_block and few_tiles do not): 1,603,584
    # attention_kernel (wgmma at head and token blocks of 64): 1,843,200; launch_overlap (pdl at side_kernels=streamed,
    # a quarter of them): 2,304,000; its pdl_all (2026-12-05): 2,764,800
    assert len(table) == 2_764_800 and len(np.unique(table.places, axis=0)) == len(table)
    assert table.places.dtype == np.int8 and table.places.nbytes == 2_764_800 * len(space.parameters)
    assert table[0] == space.canonical({name: values[0] for name, values in space.parameters.items()})
    for row in range(0, len(table), 997):  # the names and forms listed are `approach`'s and `canonical`'s
        point = table[row]
        assert space.canonical(point) == point and table.row_named(space.approach(point)) == row


def _every_point_the_slow_way(space) -> dict:
    """Every raw point canonicalized and named one by one through `canonical` and `approach`, in product order."""
    import itertools

    names = list(space.parameters)
    points = (space.canonical(dict(zip(names, values, strict=True))) for values in itertools.product(*space.parameters.values()))
    listed: dict = {}
    for point in points:
        listed.setdefault(space.approach(point), point)
    return listed


@pytest.mark.parametrize("size", ["reduced", pytest.param("full", marks=pytest.mark.slow)])
def test_the_points_listed_are_the_canonical_product_named_by_approach(size):
    """`named_points` comes from the point table (ferret.roles.point_table: rows of value places, names by hash): on
    the MLA space cut to two values an axis (its first and the default's, where they differ), with its conditions,
    and on rmsnorm's, the same names, points and order as canonicalizing and naming the whole product one point at a
    time. Reduced: the axes no condition names, but one, at their first value (the full cut's product is ~2^20
    points, its slow listing most of two minutes on a core)."""
    mla = load_space(REPO / "tasks" / "mla_attention" / "templates")
    cut = {name: list(dict.fromkeys([values[0], mla.default[name], *values[1:]]))[:2] for name, values in mla.parameters.items()}
    if size == "reduced":
        conditioned = set(mla.applies_when) | {axis for condition in mla.applies_when.values() for axis in condition}
        free = [name for name in mla.parameters if name not in conditioned]
        assert len(free) >= 2
        for name in free[1:]:
            cut[name] = cut[name][:1]
    for condition in mla.applies_when.values():  # a value that fails each condition, where the cut has none
        if all(v in allowed for axis, allowed in condition.items() for v in cut[axis]):
            axis, allowed = next(iter(condition.items()))
            cut[axis].append(next(v for v in mla.parameters[axis] if v not in allowed))
    # every condition of the space holds at some point of the cut and fails at another
    for name, condition in mla.applies_when.items():
        assert all(any(v in allowed for v in cut[axis]) for axis, allowed in condition.items()), name
        assert any(any(v not in allowed for v in cut[axis]) for axis, allowed in condition.items()), name
    small = mla.model_copy(update={"parameters": cut})
    for space in (small, load_space(REPO / "tasks" / "rmsnorm" / "templates")):
        listed = space.named_points()
        assert len(listed) > 100 and list(listed.items()) == list(_every_point_the_slow_way(space).items())


def test_the_points_are_listed_when_first_needed_and_once(monkeypatch):
    """Constructing the optimizer lists no point (rendering needs none; the MLA space's 829,440 took ~40 s per
    optimizer on a CI core); the first use lists them, later uses reuse the list."""
    from ferret.roles import offline

    listed = []
    real = offline.TemplateSpace.point_table

    def counting(space):
        listed.append(space.op)
        return real(space)

    monkeypatch.setattr(offline.TemplateSpace, "point_table", counting)
    optimizer = TemplateSearchOptimizer(TEMPLATES)
    assert listed == []
    assert optimizer.render(optimizer.space.default_point())
    assert listed == []
    assert len(optimizer.points) == len(optimizer.by_approach) > 0
    assert optimizer.points is optimizer.points and listed == ["rmsnorm"]


def test_from_contract_names_two_points_named_alike_before_a_dispatch(monkeypatch):
    from ferret.errors import UsageError
    from ferret.roles import offline

    # labels that cannot tell any two points apart
    monkeypatch.setattr(offline.TemplateSpace, "label_text", lambda space, name, value: "same-name")
    with pytest.raises(UsageError, match="share the approach name 'same-name,same-name"):
        TemplateSearchOptimizer.from_contract(CONTRACT)


def test_the_ranking_is_the_full_sort_of_the_points_by_distance_complexity_and_the_seeds_order_of_names(optimizer):
    """`_ranked` sorts only the points as near as the count-th (the MLA space's millions took 1.7 s a round to sort
    whole): the same first points as sorting every one by steps from the anchor, steps from the default, complexity,
    then the seed's shuffle of their names (the order runs before the point table had, so resumed runs rank alike)."""
    import random

    space, points = optimizer.space, list(optimizer.points)
    names = [space.approach(p) for p in points]
    shuffled = list(names)
    random.Random(optimizer.seed).shuffle(shuffled)
    tiebreak = {name: place for place, name in enumerate(shuffled)}
    default = space.default_point()
    for rows in (np.arange(len(points)), np.arange(3, len(points), 7)):
        for anchor in (None, default, points[37], points[-1]):

            def key(row, anchor=anchor):
                point = points[row]
                return (
                    space.distance(point, anchor) if anchor else 0,
                    space.distance(point, default),
                    space.complexity(point),
                    tiebreak[names[row]],
                )

            for count in (1, 4, 9, len(rows)):
                expected = [points[row] for row in sorted(rows.tolist(), key=key)[:count]]
                assert optimizer._ranked(rows, anchor, count) == expected, (anchor, count)
