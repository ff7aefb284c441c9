"""The MLA kernel template of the offline optimizer (tasks/mla_attention/templates).

One template renders both cache layouts (`cache_layout`, a constant of each op's space.yaml, not a search axis):
this op's space renders it contiguous and tasks/mla_attention_paged's space the same file paged
(tests/tasks/mla_attention_paged/test_templates.py checks the paged renders). The honest candidate is the
template's default point; every other point differs from it only in kernel
3's sizing constants (so the static scan of a sample stands for all of them); the sizing rule pads and
clamps as its comments say; and points at the corners of the space compute every stage of the
reference under the interpreter, including head blocks of 64 over 40 heads (a partly masked block).
"""

from __future__ import annotations

import difflib
from pathlib import Path

import numpy as np
import pytest
import torch
from template_checks import assert_points_compile_and_scan_clean

from ferret.contract.load import load_contract
from ferret.roles.offline import TemplateSearchOptimizer, load_space, located
from ferret.roles.point_table import NOT_APPLYING
from tasks.mla_attention import reference as ref
from tasks.mla_attention.inputs import make_inputs
from tasks.variants import import_file

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = REPO / "tasks" / "mla_attention" / "templates"
CANDIDATE = REPO / "tasks" / "mla_attention" / "candidates" / "triton_mla.py"
PARAMS = ref.DEEPSEEK_V3_PARAMS
CONSTANTS = {
    "head_block": "HEAD_BLOCK",
    "token_block": "TOKEN_BLOCK",
    "num_warps": "NUM_WARPS",
    "num_stages": "NUM_STAGES",
    "min_tokens_per_split": "MIN_TOKENS_PER_SPLIT",
    "programs_per_sm": "PROGRAMS_PER_SM",
}
# Corners of the space: smallest and largest blocks, shallow and deep pipelines.
CORNERS = [
    {"head_block": 64, "token_block": 16, "num_warps": 4, "num_stages": 1},
    {"head_block": 16, "token_block": 64, "num_warps": 16, "num_stages": 3},
]


@pytest.fixture(scope="module")
def optimizer() -> TemplateSearchOptimizer:
    return TemplateSearchOptimizer(TEMPLATES)


def _load(source: str, path: Path):
    path.write_text(source)  # Triton's JIT reads kernel source from a real file
    return import_file(path, f"mla_point_{path.stem}")


def test_the_precision_variants_base_is_the_previous_default(optimizer):
    """tasks/mla_attention/candidates/triton_mla_h16.py, the kernel the precision variants edit, is the template at
    the space's default until 2026-12-01 (its starts[0])."""
    rendered = optimizer.render(optimizer.space.start_points()[0])
    assert rendered == (CANDIDATE.parent / "triton_mla_h16.py").read_text()


def test_the_honest_candidate_is_the_default_point(optimizer):
    rendered = optimizer.render(optimizer.space.default_point())
    assert rendered == CANDIDATE.read_text(), (
        "tasks/mla_attention/candidates/triton_mla.py is not the template's default point; regenerate it with "
        "`ferret template render tasks/mla_attention/templates --out tasks/mla_attention/candidates/triton_mla.py`"
    )


def test_one_template_renders_both_cache_layouts(optimizer):
    """This op's space passes cache_layout=contiguous; the paged op renders this very file with cache_layout=paged;
    no contiguous render addresses a block table."""
    assert optimizer.space.constants == {"cache_layout": "contiguous"}
    paged_templates = REPO / "tasks" / "mla_attention_paged" / "templates"
    paged = load_space(paged_templates)  # the space alone: an optimizer would list its 2,405,376 points again
    assert paged.constants == {"cache_layout": "paged", "attention_kernel": "triton"}  # the wgmma axis pinned
    template = TEMPLATES / "mla.py.j2"
    assert located(paged_templates, paged.template).resolve() == template.resolve()
    assert optimizer.template.filename is not None and Path(optimizer.template.filename).resolve() == template.resolve()
    for point in [optimizer.space.default_point(), *optimizer.space.start_points(), *optimizer.points[::20000]]:
        source = optimizer.render(point)
        assert "block_table" not in source and "PAGE_SIZE" not in source, optimizer.approach(point)
        assert "block_table" in optimizer.template.render(**{**point, **paged.constants}), optimizer.approach(point)


STRUCTURE_DEFAULTS = {
    "head_pad": 16,
    "value_split": 1,
    "split_policy": "programs",
    "batch_block": 64,
    "side_kernels": "batch_blocks",
    "small_token_block": 0,
    "few_tiles": "keep",
    "specialize": "none",
    "loop_schedule": "plain",
    "kv_loads": "pointers",
    "rescale": "every_tile",
    "split_chunk": "per_request",
    "attention_kernel": "triton",
}


def test_points_differ_from_the_default_only_in_the_sizing_lines(optimizer):
    """Points at the structural axes' first values render one kernel with other sizing constants (the default
    point has wave-sized splits since 2026-12-01: the comparison is with its sizing at those first values)."""
    default = optimizer.render(optimizer.space.canonical({**optimizer.space.default, **STRUCTURE_DEFAULTS})).splitlines()
    # head blocks of 64 and 128 have both head_pad values; 16 and 32 have none. small_token_block applies to
    # token blocks of 32 and 64 under the waves policy, few_tiles to 64 under waves (token block x policy x small
    # tiles x few tiles: 16: 2; 32: 1 + 2; 64: 1 + 2 x 2); batch_block to side_kernels=batch_blocks, launch_overlap
    # (serial, pdl, pdl_all) to streamed (3 + 3);
    # specialize to all (2); warps x stages x loop_schedule (4 warps: 4 stages; 8 and 16: 1 stage, or 3 x 2 schedules);
    # kv_loads and rescale to all (2 x 2); split_chunk: per_request (programs_per_sm's 3 values) and capacity (1) with
    # those token-block rules, balanced with neither small tiles nor few tiles (3 token blocks x 2 policies x 3
    # programs_per_sm)
    # attention_kernel applies at head blocks and token blocks of 64 (2 of head_block x head_pad's 6; of the token
    # blocks' 58, 5 x 4 per request and at capacity, 1 x 2 x 3 balanced): those points twice, Triton's and wgmma's
    triton = (
        (2 * 2 + 2) * (4 + 2 * (1 + 3 * 2)) * 4 * (3 + 3) * 2 * ((2 + (1 + 2) + (1 + 2 * 2)) * (3 + 1) + 3 * 2 * 3) * 2 * 2 * 2
    )
    wgmma = 2 * (4 + 2 * (1 + 3 * 2)) * 4 * (3 + 3) * 2 * (5 * 4 + 1 * 2 * 3) * 2 * 2 * 2
    table, space = optimizer.table, optimizer.space
    assert len(table) == triton + wgmma
    assert (table.column("attention_kernel") == space.parameters["attention_kernel"].index("wgmma")).sum() == wgmma
    # one name each: the listing refuses two points named alike (ferret.roles.point_table); the names it gives are
    # `approach`'s (a sample here; tests/roles/test_offline.py checks the listing against the product)
    assert all(table.row_named(optimizer.approach(table[row])) == row for row in range(0, len(table), 997))
    at_structure_defaults = np.ones(len(table), bool)
    for name, value in STRUCTURE_DEFAULTS.items():
        at_structure_defaults &= np.isin(table.column(name), [NOT_APPLYING, space.parameters[name].index(value)])
    sizing_only = [table[row] for row in np.flatnonzero(at_structure_defaults).tolist()]
    assert len(sizing_only) == 4 * 3 * 3 * 4 * 4 * 3
    # a sample (each render and diff takes a CI core ~0.2 s) that holds every value of every sizing parameter
    sample = sizing_only[::43]
    for parameter in CONSTANTS:
        assert {p[parameter] for p in sample} == {p[parameter] for p in sizing_only}, parameter
    for point in sample:
        lines = optimizer.render(point).splitlines()
        changed = [new for tag, new in _changed_lines(default, lines)]
        assert len(lines) == len(default)
        for line in changed:
            sizing = any(line.startswith(f"{name} = ") for name in CONSTANTS.values())
            docstring = line.startswith(("head_block=", "num_stages="))
            assert sizing or docstring, (optimizer.approach(point), line)
        for parameter, constant in CONSTANTS.items():
            assert f"{constant} = {point[parameter]}" in lines


def _changed_lines(old: list[str], new: list[str]):
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag != "equal":
            yield from ((tag, line) for line in new[j1:j2])


def test_sampled_points_compile_and_scan_clean(optimizer):
    sample = [optimizer.space.default_point()] + [optimizer.space.canonical({**optimizer.space.default, **c}) for c in CORNERS]
    sample += optimizer.points[:: len(optimizer.points) // 6] + optimizer.space.start_points()
    assert_points_compile_and_scan_clean(optimizer, sample, REPO / "contracts" / "mla_attention.yaml")


@pytest.mark.parametrize(
    "head_block,warps,heads,expected",
    [
        (16, 4, 128, (16, 4)),  # the default at 128 heads
        (32, 8, 16, (16, 8)),  # 16 heads: one block of 16
        (32, 4, 3, (16, 4)),  # fewer than 16 heads are padded to 16 (tl.dot's smallest M)
        (64, 16, 128, (64, 16)),
        (64, 8, 40, (64, 8)),  # 40 heads: a block of 64, partly masked
    ],
)
def test_head_block_and_warps_rule(optimizer, tmp_path, head_block, warps, heads, expected):
    point = {**optimizer.space.default, "head_block": head_block, "num_warps": warps}
    module = _load(optimizer.render(point), tmp_path / "sizing.py")
    config = module._attention_config(batch=2, heads=heads, capacity=100, device=torch.device("cpu"))
    assert (config["BLOCK_H"], config["num_warps"]) == expected
    assert config["BLOCK_N"] == point["token_block"] and config["num_stages"] == point["num_stages"]
    assert config["num_splits"] >= 1


@pytest.mark.parametrize("corner", CORNERS, ids=["heads64-tokens16-stages1", "heads16-tokens64-stages3"])
def test_corner_points_match_the_reference_stage_by_stage(optimizer, tmp_path, corner):
    _assert_stages_match_the_reference(_load(optimizer.render({**optimizer.space.default, **corner}), tmp_path / "corner.py"))


@pytest.mark.parametrize(
    "index",
    [0, 1, 2, 4, 5],
    ids=["heads16-programs", "tma-warp-specialized", "per-request-previous-default", "wgmma-pdl", "wgmma-pdl-all"],
)
def test_the_spaces_starts_match_the_reference_stage_by_stage(optimizer, tmp_path, index):
    """The points the search proposes first once a point is timed (space.yaml `starts`). The fourth, kernel 3 on
    warpgroup MMA (a CUDA candidate, proposed only where CUDA is judged); the fifth adds launch_overlap=pdl to it, the
    sixth pdl_all, which is candidates/wgmma_mla.py (tests/tasks/mla_attention/test_wgmma_candidate.py,
    tests/gpu/test_wgmma_attention_gpu.py): off a GPU their kernel 3 is Triton's and their kernels run without the
    grid-dependency instructions."""
    starts = optimizer.space.start_points()
    assert [optimizer.space.language_of(p) for p in starts] == [None, None, None, "cuda", "cuda", "cuda"]
    _assert_stages_match_the_reference(_load(optimizer.render(starts[index]), tmp_path / "start.py"))


def _assert_stages_match_the_reference(module) -> None:
    inputs = make_inputs(seed=3, batch=3, heads=40, cache_capacity=70, cache_lens=[69, 5, 33], positions=[16383, 6000, 9000])
    copies = {name: t.clone() for name, t in inputs.items()}
    outputs = {"o_heads": torch.full((3, 40, PARAMS["v_head_dim"]), float("nan"), dtype=torch.bfloat16)}
    trace = {}
    module.run(copies, outputs, PARAMS, trace=trace)
    golden = ref.reference(inputs, PARAMS)
    contract = load_contract(REPO / "contracts" / "mla_attention.yaml")
    for stage in ref.STAGES:  # the reference also returns the scores' error scale, not a stage
        expected = golden[stage]
        actual = trace[stage].detach().to(torch.float64)
        finite = torch.isfinite(expected)
        assert torch.equal(torch.isfinite(actual), finite), stage
        rel = float((actual[finite] - expected[finite]).norm() / expected[finite].norm())
        limit = contract.tolerance("bfloat16", stage).rel_l2 or 0.0  # the gate's own, calibrated (test_candidates.py)
        assert rel <= limit, (stage, rel, limit)
    assert torch.equal(outputs["o_heads"], trace["o_heads"])
