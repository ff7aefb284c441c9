"""On a Hopper GPU: kernel 3 on warpgroup MMA (tasks/mla_attention/candidates/wgmma_mla.py, `_wgmma_attention`)
against a float64 reference, on ragged requests whose cache rows past their lengths hold NaN, with every partial
poisoned with NaN first: the merged o_latent within the bf16 error of the Triton kernel 3 on the same inputs, every
split that holds tokens written for every head, every split past a request's tokens lse -inf. The gate judges the
whole candidate (tests/gpu/test_gpu_gates.py); this pins the kernel alone, at head counts and split sizes the
gate's draws may not reach (1, 17, 64, 100 and 256 heads; splits of 1, 3 and 100 tiles); and kernel 3's own o_latent
(one split) bitwise the merge's rounding of its partial."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tasks.variants import import_file

REPO = Path(__file__).resolve().parents[2]
CANDIDATES = REPO / "tasks" / "mla_attention" / "candidates"
RANK, WIDTH, SCALE = 512, 576, 0.1352338

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def candidates():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("kernel 3 on warpgroup MMA needs a GPU of compute capability 9.0")
    return (
        import_file(CANDIDATES / "wgmma_mla.py", "wgmma_mla_gpu"),
        import_file(CANDIDATES / "triton_mla.py", "triton_mla_gpu"),
    )


def _inputs(batch, heads, capacity, lens, seed):
    generator = torch.Generator().manual_seed(seed)
    q = (torch.randn(batch, heads, WIDTH, generator=generator) * 0.5).to(torch.bfloat16)
    cache = torch.randn(batch, capacity, WIDTH, generator=generator).to(torch.bfloat16)
    for b, length in enumerate(lens):
        cache[b, length + 1 :] = float("nan")  # rows no request attends to
    return q.cuda(), cache.cuda(), torch.tensor(lens, dtype=torch.int32).cuda()


def _reference(q, cache, cache_lens):
    out = []
    for b in range(q.shape[0]):
        kv = cache[b, : int(cache_lens[b]) + 1].double()
        out.append(torch.softmax(q[b].double() @ kv.T * SCALE, dim=-1) @ kv[:, :RANK])
    return torch.stack(out)


def _merged(partial, lse):
    lse = lse.double()
    weight = torch.exp2(lse - lse.max(dim=-1, keepdim=True).values)
    weight = weight / weight.sum(dim=-1, keepdim=True)
    return (weight[..., None] * torch.where(torch.isinf(lse)[..., None], 0.0, partial.double())).sum(dim=2)


def _triton_kernel_3(triton_mla, q, cache, cache_lens):
    import triton

    batch, heads, _ = q.shape
    config = triton_mla._attention_config(batch, heads, cache.shape[1], q.device)
    splits = config["num_splits"]
    partial = torch.empty((batch, heads, splits, RANK), dtype=torch.float32, device="cuda")
    lse = torch.empty((batch, heads, splits), dtype=torch.float32, device="cuda")
    triton.set_allocator(triton_mla._descriptor_scratch)
    triton_mla._split_kv_attention_kernel[(triton.cdiv(heads, config["BLOCK_H"]), config["programs"])](
        q,
        cache,
        cache_lens,
        partial,
        lse,
        heads,
        splits,
        batch,
        config["programs"],
        config["min_tiles"],
        q.stride(0),
        q.stride(1),
        cache.stride(0),
        cache.stride(1),
        partial.stride(0),
        partial.stride(1),
        partial.stride(2),
        lse.stride(0),
        lse.stride(1),
        SCALE * math.log2(math.e),
        RANK=RANK,
        ROPE=64,
        BLOCK_H=config["BLOCK_H"],
        BLOCK_N=config["BLOCK_N"],
        INTERPRETED=False,
        LENS_BLOCK=64,
        SPLITS_POW2=triton_mla.MAX_SPLITS,
        num_warps=config["num_warps"],
        num_stages=config["num_stages"],
    )
    return _merged(partial, lse)


CASES = [  # batch, heads, capacity, lengths (None: random), tiles per split
    (2, 128, 300, [0, 299], 1),
    (3, 128, 1000, None, 2),
    (4, 16, 700, None, 3),
    (2, 17, 130, [63, 64], 1),
    (1, 128, 4096, [4095], 4),
    (5, 64, 513, None, 100),
    (3, 1, 200, [5, 128, 199], 1),
    (8, 128, 2048, None, 8),
    (3, 100, 1500, None, 1),
    (2, 256, 700, [699, 300], 3),
    (4, 128, 4096, [4095, 0, 2000, 63], 64),
    (3, 128, 300, [64, 127, 200], 2),  # the appended row in a split's second tile: its first row, its last, row 8
]


@pytest.mark.parametrize("batch,heads,capacity,lens,split_tiles", CASES)
@pytest.mark.parametrize("loads", ["serial", "pdl_all"])
def test_kernel_3_on_warpgroup_mma_matches_the_reference(
    candidates, kernel_3_serial, loads, batch, heads, capacity, lens, split_tiles
):
    """The serial start's kernel 3, and the candidate's (pdl_all's) launched programmatically: its first two tiles
    loaded with the appended row zero-filled, that row loaded over the zeros after the wait (in the first tile, the
    second, or a later one as the lengths put it)."""
    wgmma_mla, triton_mla = candidates
    seed = batch * 1000 + heads + capacity
    lens = lens or torch.randint(0, capacity, (batch,), generator=torch.Generator().manual_seed(seed)).tolist()
    q, cache, cache_lens = _inputs(batch, heads, capacity, lens, seed)
    splits = math.ceil(math.ceil(capacity / 64) / split_tiles)
    partial = torch.full((batch, heads, splits, RANK), float("nan"), device="cuda")
    lse = torch.full((batch, heads, splits), float("nan"), device="cuda")
    if loads == "serial":
        kernel_3_serial._wgmma_attention(q, cache, cache_lens, partial, lse, split_tiles, SCALE * math.log2(math.e))
    else:
        wgmma_mla._wgmma_attention(q, cache, cache_lens, partial, lse, split_tiles, SCALE * math.log2(math.e), programmatic=True)
    reference = _reference(q, cache, cache_lens)
    error = float((_merged(partial, lse) - reference).norm() / reference.norm())
    triton_error = float((_triton_kernel_3(triton_mla, q, cache, cache_lens) - reference).norm() / reference.norm())
    # the same bf16 rounding of P as Triton's kernel 3: within a small factor of its error, never far above bf16's
    assert error < max(2 * triton_error, 2e-3), (error, triton_error)
    filled = torch.arange(splits, device="cuda")[None, :] * split_tiles * 64 < (cache_lens.long() + 1)[:, None]
    b, s = filled.nonzero(as_tuple=True)
    assert torch.isfinite(partial[b, :, s]).all() and torch.isfinite(lse[b, :, s]).all(), "a filled split unwritten"
    assert torch.isneginf(lse.permute(0, 2, 1)[~filled]).all(), "a split past its request's tokens is not -inf"


def test_kernel_3_writes_o_latent_itself_at_one_split_as_the_merge_rounds_it(candidates):
    """One split with o_latent: each row's normalized output rounded to bf16 (bitwise what the merge of one split
    writes: the partial times a weight of exactly 1), the same log-sum-exps, and no partial written."""
    wgmma_mla, _ = candidates
    batch, heads, capacity = 5, 128, 1100
    lens = [1099, 0, 640, 63, 64]
    q, cache, cache_lens = _inputs(batch, heads, capacity, lens, seed=5)
    split_tiles = math.ceil(capacity / 64)
    partial = torch.full((batch, heads, 1, RANK), float("nan"), device="cuda")
    lse = torch.full((batch, heads, 1), float("nan"), device="cuda")
    wgmma_mla._wgmma_attention(q, cache, cache_lens, partial, lse, split_tiles, SCALE * math.log2(math.e))
    o_latent = torch.full((batch, heads, RANK), float("nan"), dtype=torch.bfloat16, device="cuda")
    untouched = torch.full_like(partial, float("nan"))
    direct_lse = torch.full_like(lse, float("nan"))
    wgmma_mla._wgmma_attention(
        q, cache, cache_lens, untouched, direct_lse, split_tiles, SCALE * math.log2(math.e), o_latent=o_latent
    )
    assert torch.equal(o_latent, partial[:, :, 0].to(torch.bfloat16))
    assert torch.equal(direct_lse, lse)
    assert torch.isnan(untouched).all(), "a partial written beside o_latent"


def test_the_wgmma_candidate_step_matches_the_triton_candidate(candidates):
    """The whole step through run(), 128 heads (kernel 3 on warpgroup MMA) and 16 (Triton's kernel 3): o_heads of
    the two candidates agree within bf16 rounding on the same inputs."""
    from tasks.mla_attention import reference as ref
    from tasks.mla_attention.inputs import make_inputs

    wgmma_mla, triton_mla = candidates
    # 64 requests of 128 heads: one split a request (two head blocks x 64 CTAs fill the SMs), so kernel 3 writes
    # o_latent itself and the merge is skipped
    assert wgmma_mla._wgmma_config(64, 128, 1024, torch.device("cuda"))["num_splits"] == 1
    for batch, heads in ((4, 128), (4, 16), (64, 128)):
        inputs = make_inputs(batch=batch, heads=heads, cache_capacity=1024, seed=heads, device="cuda")
        outputs = {}
        for module in (wgmma_mla, triton_mla):
            cache = inputs["kv_cache"].clone()
            o_heads = torch.full((batch, heads, 128), float("nan"), dtype=torch.bfloat16, device="cuda")
            module.run({**inputs, "kv_cache": cache}, {"o_heads": o_heads}, ref.DEEPSEEK_V3_PARAMS)
            outputs[module.__name__] = o_heads.double()
        a, b = outputs.values()
        assert torch.isfinite(a).all() and float((a - b).norm() / b.norm()) < 1e-2


def _wgmma_start(candidates, tmp_path_factory, index: int, overlap: str):
    """The space's start at `index`, the wgmma point with launch_overlap=`overlap`, rendered to a file."""
    from ferret.roles.offline import TemplateSearchOptimizer

    optimizer = TemplateSearchOptimizer(REPO / "tasks" / "mla_attention" / "templates")
    point = optimizer.space.start_points()[index]
    assert (point["attention_kernel"], point["launch_overlap"]) == ("wgmma", overlap)
    path = tmp_path_factory.mktemp("overlapped") / f"wgmma_{overlap}.py"
    path.write_text(optimizer.render(point))
    return import_file(path, f"wgmma_{overlap}")


@pytest.fixture(scope="module", params=[(4, "pdl"), (5, "pdl_all")], ids=["pdl", "pdl_all"])
def overlapped(candidates, tmp_path_factory, request):
    """The space's starts after the wgmma one: launch_overlap=pdl, then pdl_all (kernel 3 launched programmatically
    too, its older cache rows loaded before it waits for kernel 2)."""
    return _wgmma_start(candidates, tmp_path_factory, *request.param)


@pytest.fixture(scope="module")
def kernel_3_serial(candidates, tmp_path_factory):
    """The wgmma start with launch_overlap=serial, whose kernel 3 loads q and its first tiles at once (the committed
    candidate, pdl_all, loads its first two tiles before griddepcontrol.wait and the appended row after)."""
    return _wgmma_start(candidates, tmp_path_factory, 3, "serial")


def test_programmatic_launches_match_the_triton_candidate(candidates, overlapped, monkeypatch):
    """The whole step through run() of the pdl and pdl_all renders on a Hopper GPU, where kernels 2 and 4 (and with
    pdl_all kernel 3) start before the kernel they follow ends and wait for it on the GPU: every o_heads value written
    and within bf16 rounding of the Triton candidate's on the same inputs, three fresh draws a shape (a missing wait
    lets a kernel read a buffer before the kernel before it has written it: a race, so these draws may or may not show
    it), at the row merge's batches (1, 3, 8), at kernel 3's one split (64: the un-absorption follows kernel 3) and at
    16 heads (Triton's kernel 3). run() launches the wgmma kernel 3 programmatically with pdl_all alone."""
    from tasks.mla_attention import reference as ref
    from tasks.mla_attention.inputs import make_inputs

    _wgmma_mla, triton_mla = candidates
    assert overlapped._programmatic_launches(torch.device("cuda")) is True
    kernel_3_launches = []
    launch = overlapped._WGMMA_ATTENTION.launch
    monkeypatch.setattr(
        overlapped._WGMMA_ATTENTION,
        "launch",
        lambda *args, **options: (kernel_3_launches.append(options.get("programmatic", False)), launch(*args, **options)),
    )
    for batch, heads in ((1, 128), (3, 128), (8, 128), (64, 128), (4, 16)):
        for draw in range(3):
            inputs = make_inputs(batch=batch, heads=heads, cache_capacity=1024, seed=100 * batch + heads + draw, device="cuda")
            expected = None
            for module in (triton_mla, overlapped):
                o_heads = torch.full((batch, heads, 128), float("nan"), dtype=torch.bfloat16, device="cuda")
                module.run({**inputs, "kv_cache": inputs["kv_cache"].clone()}, {"o_heads": o_heads}, ref.DEEPSEEK_V3_PARAMS)
                got = o_heads.double()
                assert torch.isfinite(got).all(), (module.__name__, batch, heads, draw)
                if expected is None:
                    expected = got
                else:
                    assert float((got - expected).norm() / expected.norm()) < 1e-2, (module.__name__, batch, heads)
    # the wgmma kernel 3 runs at 128 heads: 4 shapes x 3 draws, programmatic with pdl_all only
    assert kernel_3_launches == [overlapped.__name__ == "wgmma_pdl_all"] * 12, kernel_3_launches
