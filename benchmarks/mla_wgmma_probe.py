"""Kernel 3 on Hopper's warpgroup MMA (tasks/mla_attention/candidates/wgmma_mla.py, `_wgmma_attention`) checked and
timed beside the committed Triton kernel 3 (tasks/mla_attention/candidates/triton_mla.py) on one Hopper GPU.

    PYTHONPATH=/tmp/site:$PWD python3 benchmarks/mla_wgmma_probe.py [--out DIR] [--shapes NAME ...]

1. Runs ragged cases through the candidate's launcher (cache rows past each request's length hold NaN, partials
   poisoned with NaN first) and compares the merged o_latent with a float64 reference; the Triton kernel 3 and
   its merge are compared the same way, as the yardstick of bf16 rounding. Stops at the first failing case.
2. Times each kernel 3 alone (do_bench median, L2 flushed) at the issue's shapes: Triton's at its candidate's
   sizing, the wgmma kernel at the candidate's own split choice (_wgmma_config) and at a sweep of split sizes,
   with TFLOP/s.
Prints a table last; writes DIR/wgmma-probe.jsonl. Session 20's call 1 timed a pair kernel (clusters of two head
blocks, each loading half of every tile and copying it to the other's shared memory: slower, not kept) and call 2
a chunked kernel (each tile's nine chunks loaded and announced one by one: faster, now the kernel) with it.
Session 19's calls 1-4 ran this file at 6e7620a, where the
kernel's source came from benchmarks/mla_wgmma_source.py (now the template's wgmma_attention.cu.j2) and a
--breakdown mode timed it with stages left out.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tasks.variants import import_file  # noqa: E402

RANK, WIDTH = 512, 576
SCALE = 0.1352338
CANDIDATES = REPO / "tasks" / "mla_attention" / "candidates"


def reference_o_latent(q, cache, cache_lens, scale):
    """float64: softmax over each request's attended rows of the 576-wide scores, times the 512-wide latent."""
    out = []
    for b in range(q.shape[0]):
        tokens = int(cache_lens[b]) + 1
        kv = cache[b, :tokens].double()
        s = (q[b].double() @ kv.T) * scale
        out.append(torch.softmax(s, dim=-1) @ kv[:, :RANK])
    return torch.stack(out)


def merge(partial, lse):
    """float64 merge of the splits (lse base 2; slots of -inf weigh 0 and their partials are never read)."""
    lse = lse.double()
    top = lse.max(dim=-1, keepdim=True).values
    weight = torch.exp2(lse - top)
    weight = weight / weight.sum(dim=-1, keepdim=True)
    part = torch.where(torch.isinf(lse)[..., None], 0.0, partial.double())
    return (weight[..., None] * part).sum(dim=2)


def rel_l2(x, ref):
    return float((x - ref).norm() / ref.norm())


def wgmma_buffers(batch, heads, capacity, split_tiles, fill=float("nan")):
    splits = math.ceil(math.ceil(capacity / 64) / split_tiles)
    partial = torch.full((batch, heads, splits, RANK), fill, dtype=torch.float32, device="cuda")
    lse = torch.full((batch, heads, splits), fill, dtype=torch.float32, device="cuda")
    return partial, lse


def triton_run(cand, q, cache, cache_lens, scale):
    """The Triton kernel 3 as triton_mla.run() launches it, and its output buffers."""
    import triton

    batch, heads, _ = q.shape
    config = cand._attention_config(batch, heads, cache.shape[1], q.device)
    splits = config["num_splits"]
    partial = torch.empty((batch, heads, splits, RANK), dtype=torch.float32, device=q.device)
    lse = torch.empty((batch, heads, splits), dtype=torch.float32, device=q.device)
    triton.set_allocator(cand._descriptor_scratch)
    grid = (triton.cdiv(heads, config["BLOCK_H"]), config["programs"])

    def launch():
        cand._split_kv_attention_kernel[grid](
            q, cache, cache_lens, partial, lse, heads, splits, batch, config["programs"], config["min_tiles"],
            q.stride(0), q.stride(1), cache.stride(0), cache.stride(1),
            partial.stride(0), partial.stride(1), partial.stride(2), lse.stride(0), lse.stride(1),
            scale * math.log2(math.e),
            RANK=RANK, ROPE=64, BLOCK_H=config["BLOCK_H"], BLOCK_N=config["BLOCK_N"], INTERPRETED=False,
            LENS_BLOCK=64, SPLITS_POW2=cand.MAX_SPLITS, num_warps=config["num_warps"], num_stages=config["num_stages"])

    return launch, partial, lse


def inputs(batch, heads, capacity, lens, seed, device="cuda"):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = (torch.randn(batch, heads, WIDTH, generator=g) * 0.5).to(torch.bfloat16).to(device)
    cache = torch.randn(batch, capacity, WIDTH, generator=g).to(torch.bfloat16)
    cache_lens = torch.tensor(lens, dtype=torch.int32)
    for b in range(batch):
        cache[b, int(cache_lens[b]) + 1:] = float("nan")  # never read past a request's rows
    return q, cache.to(device), cache_lens.to(device)


CHECKS = [  # (batch, heads, capacity, lens or None for random, split_tiles)
    (2, 128, 300, [0, 299], 1), (3, 128, 1000, None, 2), (4, 16, 700, None, 3), (2, 17, 130, [63, 64], 1),
    (1, 128, 4096, [4095], 4), (5, 64, 513, None, 100), (3, 1, 200, [5, 128, 199], 1), (8, 128, 2048, None, 8),
    (4, 128, 4096, [4095, 0, 2000, 63], 64), (3, 100, 1500, None, 1), (2, 256, 700, [699, 300], 3),
    (6, 128, 900, None, 15),
]


def check(wgmma, triton_mla, out) -> bool:
    """Every case; a case of one split also with o_latent written by kernel 3 itself (bf16)."""
    for index, (batch, heads, capacity, lens, split_tiles) in enumerate(CHECKS):
        if not check_one(wgmma, triton_mla, out, index, batch, heads, capacity, lens, split_tiles):
            return False
    return True


def check_one(wgmma, triton_mla, out, index, batch, heads, capacity, lens, split_tiles) -> bool:
    g = torch.Generator().manual_seed(100 + index)
    lens = lens or torch.randint(0, capacity, (batch,), generator=g).tolist()
    q, cache, cache_lens = inputs(batch, heads, capacity, lens, seed=index)
    ref = reference_o_latent(q, cache, cache_lens, SCALE)
    partial, lse = wgmma_buffers(batch, heads, capacity, split_tiles)
    wgmma._wgmma_attention(q, cache, cache_lens, partial, lse, split_tiles, SCALE * math.log2(math.e))
    torch.cuda.synchronize()
    o = merge(partial, lse)
    direct_err = None
    if partial.shape[2] == 1:  # one split: kernel 3 writes o_latent (bf16) itself, the same values rounded
        o_direct = torch.full((batch, heads, RANK), float("nan"), dtype=torch.bfloat16, device="cuda")
        lse_direct = torch.full_like(lse, float("nan"))
        wgmma._wgmma_attention(q, cache, cache_lens, partial, lse_direct, split_tiles, SCALE * math.log2(math.e),
                               o_latent=o_direct)
        torch.cuda.synchronize()
        same = torch.equal(o_direct, partial[:, :, 0].to(torch.bfloat16)) and torch.equal(lse_direct, lse)
        direct_err = 0.0 if same else float("inf")
    err = rel_l2(o, ref) if torch.isfinite(o).all() else float("inf")
    launch, tp, tl_ = triton_run(triton_mla, q, cache, cache_lens, SCALE)
    launch()
    torch.cuda.synchronize()
    terr = rel_l2(merge(tp, tl_), ref)
    tokens = cache_lens.long() + 1
    filled = (torch.arange(partial.shape[2], device="cuda")[None, :] * split_tiles * 64) < tokens[:, None]
    b, s = filled.nonzero(as_tuple=True)
    unwritten = int((~torch.isfinite(partial[b, :, s])).sum())
    empty_ok = bool(torch.isneginf(lse.permute(0, 2, 1)[~filled]).all())
    row = {"check": index, "batch": batch, "heads": heads, "capacity": capacity,
           "split_tiles": split_tiles, "rel_l2": err, "triton_rel_l2": terr, "unwritten": unwritten,
           "empty_splits_neg_inf": empty_ok, "direct_o_latent_mismatch": direct_err}
    print(json.dumps(row), flush=True)
    out.write(json.dumps({"kind": "check", **row}) + "\n")
    return err < max(2 * terr, 2e-3) and unwritten == 0 and empty_ok and not direct_err


SHAPES = [("full_h128_b1_l4096", 1, 128, 4096, False), ("full_h128_b8_l4096", 8, 128, 4096, False),
          ("full_h128_b64_l4096", 64, 128, 4096, False), ("full_h128_b128_l4096", 128, 128, 4096, False),
          ("full_h16_b64_l16384", 64, 16, 16384, False), ("tp1_b64_l4096", 64, 128, 4096, True),
          ("tp1_b8_l4096", 8, 128, 4096, True), ("tp8_b32_l8192", 32, 16, 8192, True)]


def time_shapes(wgmma, triton_mla, out, shapes):
    import triton

    def bench(fn):
        return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3

    rows = []
    for name, batch, heads, length, ragged in shapes:
        g = torch.Generator().manual_seed(7)
        lens = (torch.randint(length // 8, length, (batch,), generator=g) if ragged
                else torch.full((batch,), length - 1)).tolist()
        q, cache, cache_lens = inputs(batch, heads, length, lens, seed=11)
        cache = torch.nan_to_num(cache)
        flops = sum(2 * heads * (n + 1) * (576 + 512) for n in lens)
        launch, _, _ = triton_run(triton_mla, q, cache, cache_lens, SCALE)
        row = {"shape": name, "triton_us": round(bench(launch), 1)}
        chosen = wgmma._wgmma_config(batch, heads, length, q.device)
        capacity_tiles = math.ceil(length / 64)
        sweep = {max(1, capacity_tiles // s) for s in (1, 2, 4, 8, 16, 32)}
        if chosen is not None:
            sweep.add(chosen["split_tiles"])
        for split_tiles in sorted(sweep):
            partial, lse = wgmma_buffers(batch, heads, length, split_tiles, fill=0.0)

            def go(partial=partial, lse=lse, split_tiles=split_tiles, q=q, cache=cache, cache_lens=cache_lens):
                wgmma._wgmma_attention(q, cache, cache_lens, partial, lse, split_tiles, SCALE * math.log2(math.e))

            row[f"wgmma_us@{split_tiles}"] = round(bench(go), 1)
        if chosen is not None and math.ceil(capacity_tiles / chosen["split_tiles"]) == 1:
            # one split: with o_latent written by kernel 3 itself (what run() launches there)
            split_tiles = chosen["split_tiles"]
            partial, lse = wgmma_buffers(batch, heads, length, split_tiles, fill=0.0)
            o_direct = torch.empty((batch, heads, RANK), dtype=torch.bfloat16, device="cuda")

            def direct(partial=partial, lse=lse, split_tiles=split_tiles, q=q, cache=cache, cache_lens=cache_lens,
                       o_direct=o_direct):
                wgmma._wgmma_attention(q, cache, cache_lens, partial, lse, split_tiles, SCALE * math.log2(math.e),
                                       o_latent=o_direct)

            row["direct_o_latent_us"] = round(bench(direct), 1)
        best = min((v, int(k.split("@")[1])) for k, v in row.items() if k.startswith("wgmma_us@"))
        row.update(best_wgmma_us=best[0], best_split_tiles=best[1], chosen_split_tiles=chosen and chosen["split_tiles"])
        row["chosen_wgmma_us"] = row[f"wgmma_us@{chosen['split_tiles']}"] if chosen else None
        row["chosen_tflops"] = round(flops / row["chosen_wgmma_us"] / 1e6, 1) if chosen else None
        print(json.dumps(row), flush=True)
        out.write(json.dumps({"kind": "time", **row}) + "\n")
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="/tmp/wgmma")
    parser.add_argument("--shapes", nargs="*", default=[s[0] for s in SHAPES])
    args = parser.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    wgmma = import_file(CANDIDATES / "wgmma_mla.py", "wgmma_mla_probe")
    triton_mla = import_file(CANDIDATES / "triton_mla.py", "triton_mla_probe")
    with open(out_dir / "wgmma-probe.jsonl", "a") as out:
        if not check(wgmma, triton_mla, out):
            print("a check failed: no timing", flush=True)
            return
        rows = time_shapes(wgmma, triton_mla, out, [s for s in SHAPES if s[0] in args.shapes])
    print("\n| shape | Triton kernel 3 us | wgmma kernel 3 us (tiles a split, the candidate's) | x Triton | TFLOP/s "
          "| fastest split measured |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r["chosen_wgmma_us"] is None:
            print(f"| {r['shape']} | {r['triton_us']} | (Triton's kernel 3 runs) | | | {r['best_wgmma_us']} "
                  f"({r['best_split_tiles']}) |")
            continue
        print(f"| {r['shape']} | {r['triton_us']} | {r['chosen_wgmma_us']} ({r['chosen_split_tiles']}) "
              f"| {r['triton_us'] / r['chosen_wgmma_us']:.2f} | {r['chosen_tflops']} | {r['best_wgmma_us']} "
              f"({r['best_split_tiles']}) |")


if __name__ == "__main__":
    main()
