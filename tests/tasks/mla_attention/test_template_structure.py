"""The structural axes of the MLA kernel template: head blocks padded to wgmma's 64 rows or
holding all heads, P@V as two 256-wide halves, the split count sized to whole waves over the SMs, the batch
block of the absorption and merge kernels, the streamed kernels 2 and 4 (side_kernels=streamed: a merge of all
splits at once, then the un-absorption as a GEMM over the batch) and small tiles when a program has few
(small_token_block).

Each axis changes the rendered kernel (no dead axis); the sizing rules do what the template's header says;
points that use them compute every stage of the reference under the interpreter, on tiny shapes with a
partly masked head block and ragged lengths (so the merge and the masks are exercised).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from mla_split_checks import assert_capacity_chunks, assert_filled_splits, balanced_runs, split_occupancy
from template_checks import assert_points_compile_and_scan_clean

from ferret.contract.load import load_contract
from ferret.roles.offline import TemplateSearchOptimizer
from tasks.mla_attention import reference as ref
from tasks.mla_attention.inputs import make_inputs
from tasks.variants import import_file

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = REPO / "tasks" / "mla_attention" / "templates"
CONTRACT = REPO / "contracts" / "mla_attention.yaml"
PARAMS = ref.DEEPSEEK_V3_PARAMS
# Head blocks of 64 with 8 warps: the wgmma structure `python -m benchmarks mla` times on the GPU.
WIDE = {"head_block": 64, "num_warps": 8, "programs_per_sm": 1, "split_policy": "waves"}
NEW_AXES = {"head_pad": 64, "value_split": 2, "split_policy": "waves", "batch_block": 16}
# The fastest point measured at large batch, with 16-token tiles where programs have few tiles of 64.
LARGE = {**WIDE, "token_block": 64}
STREAMED = {"side_kernels": "streamed"}
# Kernel 3's loop axes at their second values: the warp-specialized loop, TMA descriptor loads, lazy rescaling.
KERNEL3_AXES = {"loop_schedule": "warp_specialized", "kv_loads": "descriptors", "rescale": "when_max_grows"}


@pytest.fixture(scope="module")
def optimizer() -> TemplateSearchOptimizer:
    return TemplateSearchOptimizer(TEMPLATES)


def _previous_default(optimizer) -> dict:
    """The space's default until 2026-12-01 (16 heads, 32-token tiles, splits over programs), its starts[0] now: the
    base the points here are written over, as they were when these rules were measured."""
    return {**optimizer.space.default, **optimizer.space.starts[0]}


def _point(optimizer, *overrides: dict, **override) -> dict:
    point = _previous_default(optimizer)
    for extra in (*overrides, override):
        point.update(extra)
    return point


def _load(source: str, path: Path):
    path.write_text(source)  # Triton's JIT reads kernel source from a real file
    return import_file(path, f"mla_structure_{path.stem}")


@pytest.mark.parametrize("axis,value", sorted(NEW_AXES.items()))
def test_each_structural_axis_changes_the_kernel(optimizer, axis, value):
    base = _point(optimizer, head_block=64)
    assert optimizer.render({**base, axis: value}) != optimizer.render(base), axis


def test_side_kernels_and_small_tiles_change_the_kernel(optimizer):
    base = _point(optimizer, LARGE)
    streamed = optimizer.render({**base, **STREAMED})
    small = optimizer.render({**base, "small_token_block": 16})
    assert len({optimizer.render(base), streamed, small}) == 3
    assert "def _merge_splits_kernel(" in streamed and "def _combine_unabsorb_kernel(" not in streamed
    assert "SMALL_TOKEN_BLOCK = 16" in small and "SMALL_TOKEN_BLOCK" not in streamed
    # the axes apply only where they mean something: no batch block for the streamed kernels, no small tiles
    # below token blocks of 32 or without the waves policy
    assert optimizer.space.canonical({**base, **STREAMED})["batch_block"] is None
    for other in ({"token_block": 16}, {"split_policy": "programs"}):
        assert optimizer.space.canonical({**base, "small_token_block": 16, **other})["small_token_block"] is None


def test_few_tiles_changes_the_kernel_only_where_it_applies(optimizer):
    base = _point(optimizer, LARGE)
    fallback = optimizer.render({**base, "few_tiles": "default_point"})
    assert fallback != optimizer.render(base) and "def _default_point_config(" in fallback
    for other in ({"token_block": 32}, {"split_policy": "programs"}):
        assert optimizer.space.canonical({**base, "few_tiles": "default_point", **other})["few_tiles"] is None


def test_few_tiles_falls_back_to_the_default_point_as_the_space_defines_it(optimizer, tmp_path):
    """The template's copy of the point it falls back to is the space's default until 2026-12-01 (its starts[0])."""
    module = _gpu_module(optimizer, tmp_path, LARGE, {"few_tiles": "default_point"})
    previous = _previous_default(optimizer)
    assert module.DEFAULT_POINT == {name: previous[name] for name in module.DEFAULT_POINT}


@pytest.mark.parametrize(
    "batch,heads,capacity,expected",
    [
        # 2 head blocks x 8 splits: 8 tiles of 64 per program, so kernel 3 as today's candidate sizes it (H200:
        # 169.5 us against 199.6 at B=8)
        (8, 128, 4096, (16, 32, 4, 5)),
        (1, 128, 4096, (16, 32, 4, 16)),
        (64, 128, 4096, (64, 64, 8, 1)),  # one split of 64 tiles: the point itself (335-339 us against 500)
        (128, 128, 4096, (64, 64, 8, 1)),
        (32, 16, 8192, (16, 64, 8, 4)),  # TP8: 4 splits of 32 tiles keep the point (171 us against 184)
    ],
)
def test_few_tiles_rule(optimizer, tmp_path, batch, heads, capacity, expected):
    module = _gpu_module(optimizer, tmp_path, LARGE, {"few_tiles": "default_point"})
    config = module._attention_config(batch, heads, capacity, torch.device("cuda"))
    assert (config["BLOCK_H"], config["BLOCK_N"], config["num_warps"], config["num_splits"]) == expected
    if expected[1] == 32:  # the fallback sizes kernel 3 exactly as the default point's own rendering does
        default = _load(optimizer.render(_previous_default(optimizer)), tmp_path / "default.py")
        default._sm_count_by_device["cuda"] = 132
        assert config == default._attention_config(batch, heads, capacity, torch.device("cuda"))


def test_new_structure_points_compile_and_scan_clean(optimizer):
    points = [
        _point(optimizer, WIDE, NEW_AXES),
        _point(optimizer, WIDE, head_block=128, value_split=2),
        _point(optimizer, WIDE, token_block=64, num_stages=4, batch_block=32),
        _point(optimizer, LARGE, STREAMED, small_token_block=16),
        _point(optimizer, STREAMED),
        _point(optimizer, WIDE, NEW_AXES, STREAMED, token_block=32, small_token_block=16),
    ]
    assert_points_compile_and_scan_clean(optimizer, points, CONTRACT)


@pytest.mark.parametrize(
    "head_block,head_pad,heads,expected",
    [
        (64, 16, 16, 16),  # today's padding: 16 heads stay a block of 16
        (64, 64, 16, 64),  # padded to wgmma's 64 rows
        (64, 64, 3, 64),
        (128, 16, 128, 128),  # all heads of a TP1 request in one block
        (128, 64, 40, 64),  # 40 heads: one partly masked block of 64
        (128, 64, 100, 128),
    ],
)
def test_head_pad_rule(optimizer, tmp_path, head_block, head_pad, heads, expected):
    module = _load(optimizer.render(_point(optimizer, head_block=head_block, head_pad=head_pad)), tmp_path / "pad.py")
    config = module._attention_config(batch=2, heads=heads, capacity=100, device=torch.device("cpu"))
    assert config["BLOCK_H"] == expected


@pytest.mark.parametrize(
    "programs_per_split,tiles,most,slots,expected",
    [
        (128, 128, 16, 132, 1),  # 128 heads (2 blocks of 64) x B=64, L=4096: one wave already, no split
        (256, 128, 16, 132, 1),  # B=128: two full waves either way; fewer splits is the cheaper merge
        (16, 128, 16, 132, 8),  # B=8: 8 splits fill one wave (128 programs)
        (2, 128, 16, 132, 16),  # B=1: as many splits as the cap allows
        (2, 128, 32, 132, 32),
        (100, 128, 16, 132, 5),  # 100 programs fill 76% of a wave; 500 fill 4 waves to 95%
    ],
)
def test_wave_filling_splits(optimizer, tmp_path, programs_per_split, tiles, most, slots, expected):
    module = _load(optimizer.render(_point(optimizer, split_policy="waves")), tmp_path / "waves.py")
    assert module._wave_filling_splits(programs_per_split, tiles, most, slots) == expected


def test_waves_policy_sizes_splits_from_the_cache(optimizer, tmp_path):
    """Under the interpreter (8 slots, splits of at least one token block) the rule still splits short caches."""
    module = _load(optimizer.render(_point(optimizer, WIDE)), tmp_path / "cfg.py")
    cpu = torch.device("cpu")
    assert module._attention_config(batch=1, heads=16, capacity=128, device=cpu)["num_splits"] == 4
    assert module._attention_config(batch=8, heads=128, capacity=128, device=cpu)["num_splits"] == 1


def _gpu_module(optimizer, tmp_path, *overrides: dict):
    """A rendered point whose host-side sizing believes it runs on a GPU with 132 SMs (an H200)."""
    module = _load(optimizer.render(_point(optimizer, *overrides)), tmp_path / "gpu.py")
    module._sm_count_by_device["cuda"] = 132
    return module


@pytest.mark.parametrize(
    "batch,heads,capacity,expected",
    [
        (8, 128, 4096, (16, 8)),  # 2 head blocks x 8 splits: 8 tiles of 64 per program, so tiles of 16
        (64, 128, 4096, (64, 1)),  # one split of 64 tiles: the large tile
        (32, 16, 8192, (64, 4)),  # TP8: 4 splits of 32 tiles
        (1, 128, 4096, (16, 16)),
    ],
)
def test_small_token_block_rule(optimizer, tmp_path, batch, heads, capacity, expected):
    module = _gpu_module(optimizer, tmp_path, LARGE, {"small_token_block": 16})
    config = module._attention_config(batch, heads, capacity, torch.device("cuda"))
    assert (config["BLOCK_N"], config["num_splits"]) == expected


@pytest.mark.parametrize(
    "batch,heads,expected",
    [
        (8, 128, (16, 64)),  # 128 programs leave 4 SMs idle: value blocks of 64
        (64, 128, (64, 64)),
        (128, 128, (64, 128)),  # 2 batch blocks x 128 heads fill the SMs
        (32, 16, (32, 32)),  # TP8: 16 heads x 4 value blocks
    ],
)
def test_unabsorb_blocks_fill_the_sms(optimizer, tmp_path, batch, heads, expected):
    module = _gpu_module(optimizer, tmp_path, STREAMED)
    assert module._unabsorb_blocks(batch, heads, torch.device("cuda")) == expected


def _assert_matches_reference(module, batch, heads, capacity, cache_lens, positions):
    inputs = make_inputs(seed=5, batch=batch, heads=heads, cache_capacity=capacity, cache_lens=cache_lens, positions=positions)
    copies = {name: t.clone() for name, t in inputs.items()}
    outputs = {"o_heads": torch.full((batch, heads, PARAMS["v_head_dim"]), float("nan"), dtype=torch.bfloat16)}
    trace: dict = {}
    module.run(copies, outputs, PARAMS, trace=trace)
    contract = load_contract(CONTRACT)
    golden = ref.reference(inputs, PARAMS)
    for stage in ref.STAGES:  # the reference also returns the scores' error scale, not a stage
        expected = golden[stage]
        actual = trace[stage].detach().to(torch.float64)
        finite = torch.isfinite(expected)
        assert torch.equal(torch.isfinite(actual), finite), stage
        rel = float((actual[finite] - expected[finite]).norm() / expected[finite].norm())
        limit = contract.tolerance("bfloat16", stage).rel_l2 or 0.0
        assert rel <= limit, (stage, rel, limit)
    assert torch.equal(outputs["o_heads"], trace["o_heads"])


@pytest.mark.parametrize(
    "override,shape",
    [
        # 40 heads in one block of 64 (24 masked rows), P@V in halves, splits by waves, batch blocks of 16
        ({**WIDE, **NEW_AXES}, (3, 40, 70, [69, 5, 33])),
        # all 128 heads of a request in one block (padded from 20), one 512-wide P@V, tokens of 16, 4 stages
        ({**WIDE, "head_block": 128, "head_pad": 64, "token_block": 16, "num_stages": 4}, (2, 20, 50, [49, 0])),
        # streamed merge + GEMM un-absorption with 64-token tiles that fall back to 16 (few tiles per program)
        ({**LARGE, **STREAMED, "small_token_block": 16}, (3, 40, 70, [69, 5, 33])),
        # the default's kernel 3 with the streamed kernels: 3 heads split the value columns in blocks of 32; the
        # second request's one token leaves a split empty (its weight is 0)
        (STREAMED, (2, 3, 50, [49, 0])),
        # 64 heads x 64-token tiles whose programs would walk few tiles: kernel 3 sized as the default point
        ({**LARGE, "few_tiles": "default_point"}, (3, 40, 70, [69, 5, 33])),
        # kernel 3's loop axes one at a time at the default's 64 x 64 blocks, then all three with P@V in halves and
        # 16-token tiles (descriptors of 256-wide halves; the second request's one token leaves splits empty)
        ({**LARGE, "loop_schedule": "warp_specialized"}, (3, 40, 70, [69, 5, 33])),
        ({**LARGE, "kv_loads": "descriptors"}, (3, 40, 70, [69, 5, 33])),
        ({**LARGE, "rescale": "when_max_grows"}, (3, 40, 70, [69, 5, 33])),
        ({**WIDE, **KERNEL3_AXES, "value_split": 2, "token_block": 16}, (2, 20, 50, [49, 0])),
        # split_chunk=capacity: the capacity cut in 16-token chunks (4 splits under the interpreter): one request at
        # full capacity, one of one token (3 empty splits), one of 21 (2 empty); then with the streamed merge, the
        # loop axes and P@V halves; then few_tiles' default-point sizing, which cuts the capacity by its own tiles
        ({**LARGE, "split_chunk": "capacity", "token_block": 16}, (3, 40, 64, [63, 0, 20])),
        (
            {**WIDE, **STREAMED, **KERNEL3_AXES, "split_chunk": "capacity", "value_split": 2, "token_block": 16},
            (2, 20, 50, [49, 0]),
        ),
        ({**LARGE, "split_chunk": "capacity", "few_tiles": "default_point"}, (3, 40, 70, [69, 0, 33])),
        # split_chunk=balanced: 9 tiles of 16 rows in runs of 2 under the interpreter (8 programs), a run crossing
        # from the first request's last tile into the one-token request's; then 40 heads in one block with P@V
        # halves, the streamed merge and the loop axes; then 128 heads in two blocks of 64 (4 programs each, the
        # first request's 5 tiles over 3 runs)
        ({**LARGE, "split_chunk": "balanced", "token_block": 16}, (3, 20, 80, [79, 0, 40])),
        (
            {**WIDE, **STREAMED, **KERNEL3_AXES, "split_chunk": "balanced", "value_split": 2, "token_block": 16},
            (3, 40, 70, [69, 5, 33]),
        ),
        # (with the streamed merge and un-absorption, the default's: kernels 2 and 4 of batch_blocks, one program per
        # head, took 48 of this case's 56 s under the interpreter)
        ({**LARGE, **STREAMED, "split_chunk": "balanced", "token_block": 16}, (2, 128, 80, [70, 3])),
    ],
    ids=[
        "heads64-halves-waves",
        "heads128-tokens16",
        "streamed-small-tiles",
        "streamed-value-blocks",
        "few-tiles-default-point",
        "warp-specialized",
        "tma-descriptors",
        "lazy-rescale",
        "kernel3-axes-halves",
        "capacity-chunks",
        "capacity-chunks-streamed-kernel3-axes",
        "capacity-chunks-few-tiles",
        "balanced-runs",
        "balanced-runs-streamed-kernel3-axes",
        "balanced-runs-two-head-blocks",
    ],
)
def test_new_structure_points_match_the_reference(optimizer, tmp_path, override, shape):
    batch, heads, capacity, cache_lens = shape
    module = _load(optimizer.render(_point(optimizer, override)), tmp_path / "structure.py")
    _assert_matches_reference(module, batch, heads, capacity, cache_lens, [16383, 6000, 9000][:batch])


def _traces(optimizer, tmp_path, inputs: dict, *points: dict) -> list[dict]:
    """Each point's stages (its trace) on copies of the same inputs, under the interpreter."""
    batch, heads = inputs["q_nope"].shape[:2]
    traces = []
    for number, point in enumerate(points):
        module = _load(optimizer.render(point), tmp_path / f"point_{number}.py")
        outputs = {"o_heads": torch.empty((batch, heads, PARAMS["v_head_dim"]), dtype=torch.bfloat16)}
        trace: dict = {}
        module.run({k: t.clone() for k, t in inputs.items()}, outputs, PARAMS, trace=trace)
        traces.append(trace)
    return traces


def test_streamed_kernels_agree_with_todays(optimizer, tmp_path):
    """Same kernel 3, so the same partials: the streamed merge and GEMM differ from today's kernel 4 only in the
    order of fp32 sums (the reference's tolerance alone would miss e.g. a merge that drops the normalization)."""
    inputs = make_inputs(seed=7, batch=2, heads=3, cache_capacity=64, cache_lens=[63, 40], positions=[16383, 6000])
    today, streamed = _traces(optimizer, tmp_path, inputs, _point(optimizer), _point(optimizer, STREAMED))
    assert torch.equal(today["q_absorbed"], streamed["q_absorbed"])
    assert torch.equal(today["q_pe_roped"], streamed["q_pe_roped"])
    for stage in ("o_latent", "o_heads"):
        expected, actual = today[stage].double(), streamed[stage].double()
        assert float((actual - expected).norm() / expected.norm()) < 2e-3, stage


@pytest.mark.parametrize("axis,value", sorted({**KERNEL3_AXES, "split_chunk": "capacity"}.items()))
def test_each_kernel3_loop_axis_changes_the_kernel(optimizer, axis, value):
    # The default of 2026-12-01..02 (starts[2]) holds none of these values; the default now loads through descriptors.
    base = optimizer.space.canonical({**optimizer.space.default, **optimizer.space.starts[2]})
    assert base[axis] != value, axis
    assert optimizer.render(optimizer.space.canonical({**base, axis: value})) != optimizer.render(base), axis


@pytest.mark.parametrize(
    "override",
    [
        {},
        {"kv_loads": "descriptors"},
        KERNEL3_AXES,
        {**KERNEL3_AXES, "value_split": 2},
        {"split_chunk": "capacity", "token_block": 16},
    ],
    ids=["default", "tma-descriptors", "kernel3-axes", "kernel3-axes-halves", "capacity-chunks"],
)
def test_rows_past_the_length_contribute_nothing(optimizer, tmp_path, override):
    """Cache rows past a request's length (here NaN) never reach o_heads: the descriptors' tiles that reach past the
    request's rows read zeros, so the output is bitwise the output with those rows clean."""
    point = optimizer.space.canonical({**optimizer.space.default, **override})
    module = _load(optimizer.render(point), tmp_path / "rows.py")
    inputs = make_inputs(seed=5, batch=3, heads=20, cache_capacity=70, cache_lens=[40, 5, 63], positions=[16383, 6000, 9000])
    poisoned = {name: t.clone() for name, t in inputs.items()}
    for b, length in enumerate([40, 5, 63]):
        poisoned["kv_cache"][b, length + 1 :] = float("nan")  # row `length` is the appended one
    results = []
    for case in (inputs, poisoned):
        outputs = {"o_heads": torch.full((3, 20, PARAMS["v_head_dim"]), float("nan"), dtype=torch.bfloat16)}
        module.run({name: t.clone() for name, t in case.items()}, outputs, PARAMS)
        results.append(outputs["o_heads"])
    assert torch.isfinite(results[0]).all()
    assert torch.equal(results[0], results[1])


def test_capacity_chunks_cut_every_request_alike_and_empty_splits_write_nothing(optimizer, tmp_path, monkeypatch):
    """split_chunk=capacity with 3 splits of a 64-row capacity in 16-token tiles: chunks of 32 rows for every request
    (a request of 21 tokens has 1 split, where its own length in 3 would give 2); splits past a request's length
    store lse -inf and no partial, and with every torch.empty NaN-filled and NaN in the cache rows past each length,
    o_heads is bitwise the clean run's and within the contract's tolerance of the reference."""
    point = optimizer.space.canonical({**optimizer.space.default, "split_chunk": "capacity", "token_block": 16})
    module = _load(optimizer.render(point), tmp_path / "capacity.py")
    cache_lens = [63, 0, 20, 40]  # full capacity, one token, 21 and 41 tokens
    inputs = make_inputs(seed=9, batch=4, heads=20, cache_capacity=64, cache_lens=cache_lens, positions=[16383, 6000, 9000, 100])
    clean = {"o_heads": torch.zeros((4, 20, PARAMS["v_head_dim"]), dtype=torch.bfloat16)}
    module.run({name: t.clone() for name, t in inputs.items()}, clean, PARAMS)
    poisoned = {name: t.clone() for name, t in inputs.items()}
    for b, length in enumerate(cache_lens):
        poisoned["kv_cache"][b, length + 1 :] = float("nan")  # row `length` is the appended one
    o_heads, partial, lse = split_occupancy(module, monkeypatch, poisoned, PARAMS, 64, 3, 16)
    assert_capacity_chunks(o_heads, partial, lse, [n + 1 for n in cache_lens], 64, 3, 16)
    expected = ref.reference(inputs, PARAMS)["o_heads"]
    rel = float((o_heads.double() - expected).norm() / expected.norm())
    limit = load_contract(CONTRACT).tolerance("bfloat16", "o_heads").rel_l2
    assert limit is not None and rel <= limit
    # the same split count as the clean run's (4 one-tile splits under the interpreter) gives the bitwise same output
    again, _, _ = split_occupancy(module, monkeypatch, poisoned, PARAMS, 64, 4, 16)
    assert torch.equal(again, clean["o_heads"])


def test_capacity_split_count_is_the_capacity_in_min_tokens_per_split(optimizer, tmp_path):
    """On a GPU split_chunk=capacity cuts the capacity in min_tokens_per_split chunks whatever the batch (at most 64
    splits); at B=64, H=128, L=4096 the waves policy's 1 split becomes 8 at 512 tokens, 4 at 1024."""
    for tokens, expected in ((512, 8), (1024, 4), (128, 32)):
        point = {**optimizer.space.default, "split_chunk": "capacity", "min_tokens_per_split": tokens}
        module = _gpu_module(optimizer, tmp_path, point)
        for batch in (1, 64):
            assert module._attention_config_of(batch, 128, 4096, torch.device("cuda"))["num_splits"] == expected
        assert module._attention_config_of(64, 128, 65536, torch.device("cuda"))["num_splits"] == 64
    module = _gpu_module(optimizer, tmp_path, _previous_default(optimizer))
    assert module._attention_config_of(64, 128, 4096, torch.device("cuda"))["num_splits"] == 1  # waves, per request


@pytest.mark.parametrize("side_kernels", ["batch_blocks", "streamed"])
def test_balanced_runs_share_the_batch_tiles_and_unused_splits_write_nothing(optimizer, tmp_path, monkeypatch, side_kernels):
    """split_chunk=balanced under the interpreter (8 programs, runs of at least one tile), 16-row tiles: requests of
    5, 1 and 3 tiles are 9 tiles in runs of 2, so program 2 ends the first request and holds the one-token request,
    and the last request's 3 tiles take 2 runs. Exactly those splits are filled, every other split slot stores lse
    -inf and no partial; with every torch.empty NaN-filled and NaN in the cache rows past each length, o_heads is
    bitwise the clean run's and within the contract's tolerance of the reference; with either merge (kernel 4's, or
    the streamed merge, which reads no unwritten slot)."""
    point = optimizer.space.canonical(
        {**optimizer.space.default, "split_chunk": "balanced", "token_block": 16, "side_kernels": side_kernels}
    )
    module = _load(optimizer.render(point), tmp_path / "balanced.py")
    cache_lens = [79, 0, 40]  # 80, 1 and 41 tokens: 5, 1 and 3 tiles of 16
    inputs = make_inputs(seed=9, batch=3, heads=20, cache_capacity=80, cache_lens=cache_lens, positions=[16383, 6000, 9000])
    clean = {"o_heads": torch.zeros((3, 20, PARAMS["v_head_dim"]), dtype=torch.bfloat16)}
    module.run({name: t.clone() for name, t in inputs.items()}, clean, PARAMS)
    poisoned = {name: t.clone() for name, t in inputs.items()}
    for b, length in enumerate(cache_lens):
        poisoned["kv_cache"][b, length + 1 :] = float("nan")  # row `length` is the appended one
    config = module._attention_config(3, 20, 80, torch.device("cpu"))
    assert (config["programs"], config["min_tiles"], config["num_splits"]) == (8, 1, 5)
    o_heads, partial, lse = split_occupancy(module, monkeypatch, poisoned, PARAMS, 80, 5, 16)
    filled = balanced_runs([5, 1, 3], programs=8, min_tiles=1)
    assert filled == {(0, 0), (0, 1), (0, 2), (1, 0), (2, 0), (2, 1)}
    assert_filled_splits(o_heads, partial, lse, filled)
    assert torch.equal(o_heads, clean["o_heads"])
    expected = ref.reference(inputs, PARAMS)["o_heads"]
    rel = float((o_heads.double() - expected).norm() / expected.norm())
    limit = load_contract(CONTRACT).tolerance("bfloat16", "o_heads").rel_l2
    assert limit is not None and rel <= limit


@pytest.mark.parametrize(
    "batch,heads,capacity,min_tokens,expected",
    [
        # 2 head blocks share the 132 SMs; a request of 64 tiles meets at most 17 runs of 4 (its first tile
        # anywhere in a run), whatever the batch: runs follow the batch's tiles
        (64, 128, 4096, 256, (66, 4, 17)),
        (8, 128, 4096, 256, (66, 4, 17)),
        (32, 16, 8192, 1024, (132, 16, 9)),  # TP8: one head block of 16 over every SM
        (64, 128, 65536, 128, (66, 17, 62)),  # long caches: runs of at least 17 tiles keep a request to 64 splits
    ],
)
def test_balanced_sizing_fills_the_sms_and_bounds_the_splits(optimizer, tmp_path, batch, heads, capacity, min_tokens, expected):
    """On a GPU (132 SMs), split_chunk=balanced runs programs_per_sm programs per SM over the head blocks, each run at
    least min_tokens_per_split tokens, and sizes the split slots to the most runs a request can meet (at most 64)."""
    module = _gpu_module(optimizer, tmp_path, LARGE, {"split_chunk": "balanced", "min_tokens_per_split": min_tokens})
    config = module._attention_config_of(batch, heads, capacity, torch.device("cuda"))
    assert (config["programs"], config["min_tiles"], config["num_splits"]) == expected


def test_balanced_runs_read_the_lengths_in_blocks_past_64_requests(optimizer, tmp_path, monkeypatch):
    """Kernel 3 reads cache_lens in blocks of 64 requests (LENS_BLOCK) to find each run's requests: 70 requests of
    1-48 tokens (lengths drawn, one 16-row tile to three each) in 8 runs cross the block boundary. The filled splits
    are exactly the model's, and o_heads is within the contract's tolerance of the reference."""
    point = optimizer.space.canonical({**optimizer.space.default, "split_chunk": "balanced", "token_block": 16})
    module = _load(optimizer.render(point), tmp_path / "balanced_many.py")
    inputs = make_inputs(seed=11, batch=70, heads=1, cache_capacity=48)
    lengths = [int(n) + 1 for n in inputs["cache_lens"]]
    config = module._attention_config(70, 1, 48, torch.device("cpu"))
    o_heads, partial, lse = split_occupancy(module, monkeypatch, inputs, PARAMS, 48, config["num_splits"], 16)
    filled = balanced_runs([math.ceil(n / 16) for n in lengths], programs=config["programs"], min_tiles=1)
    assert max(s for _, s in filled) >= 1 and any(b >= 64 for b, _ in filled)
    assert_filled_splits(o_heads, partial, lse, filled)
    expected = ref.reference(inputs, PARAMS)["o_heads"]
    rel = float((o_heads.double() - expected).norm() / expected.norm())
    limit = load_contract(CONTRACT).tolerance("bfloat16", "o_heads").rel_l2
    assert limit is not None and rel <= limit
