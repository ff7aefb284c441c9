"""The wgmma MLA attention kernel (benchmarks/mla_wgmma_source.py) checked and timed beside the committed Triton
kernel 3 on one Hopper GPU.

    PYTHONPATH=/tmp/site:$PWD python3 benchmarks/mla_wgmma_probe.py [--out DIR] [--variants 8192:1024,1024:8192]

1. For each descriptor variant of the P@V operand: compiles (NVRTC, sm_90a, through ferret.backends.cuda), runs
   ragged cases (cache rows past each request's length hold NaN, partials poisoned with NaN first) and compares
   the merged o_latent and each split's log-sum-exp with a float64 reference; the committed Triton kernel 3 and
   its merge are compared the same way, as the yardstick of bf16 rounding.
2. Times the passing variant's kernel alone (do_bench median, L2 flushed) beside the Triton kernel 3 at the
   issue's shapes, for a few split sizes, with TFLOP/s and the fraction of the flop floor.
Prints a table last; writes DIR/wgmma-probe.jsonl.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import mla_wgmma_source  # noqa: E402

from ferret.backends import cuda as backend  # noqa: E402

RANK, WIDTH = 512, 576


def load_candidate(path: Path):
    spec = importlib.util.spec_from_file_location("triton_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class WgmmaKernel:
    def __init__(self, pv_leading: int, pv_stride: int, switches: tuple[str, ...] = ()):
        import cupy

        code = mla_wgmma_source.source(pv_leading, pv_stride, switches)
        started = time.time()
        cubin = backend.compile_cubin(code, ["-std=c++17"], arch="sm_90a")
        self.compile_s = time.time() - started
        self.module = cupy.cuda.function.Module()
        self.module.load(cubin)
        self.function = self.module.get_function("mla_wgmma_attention_kernel")
        from cupy.cuda import driver

        driver.funcSetAttribute(self.function.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                mla_wgmma_source.SMEM_BYTES)
        self.registers = driver.funcGetAttribute(driver.CU_FUNC_ATTRIBUTE_NUM_REGS, self.function.ptr)
        self.cupy = cupy

    def __call__(self, q, cache, cache_lens, partial, lse, split_tiles, scale_log2):
        batch, heads, _ = q.shape
        num_splits = partial.shape[2]
        args = (q, cache, cache_lens, partial, lse, backend.i32(heads), backend.i32(num_splits), backend.i32(split_tiles),
                backend.i64(q.stride(0)), backend.i64(q.stride(1)), backend.i64(cache.stride(0)),
                backend.i64(cache.stride(1)), backend.i64(partial.stride(0)), backend.i64(partial.stride(1)),
                backend.i64(partial.stride(2)), backend.i64(lse.stride(0)), backend.i64(lse.stride(1)),
                backend.f32(scale_log2))
        stream = self.cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        self.function(((heads + 63) // 64, num_splits, batch), (256,), backend.kernel_args(args),
                      shared_mem=mla_wgmma_source.SMEM_BYTES, stream=stream)


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


def wgmma_run(kernel, q, cache, cache_lens, split_tiles, scale):
    batch, heads, _ = q.shape
    capacity_tiles = math.ceil(cache.shape[1] / 64)
    splits = math.ceil(capacity_tiles / split_tiles)
    partial = torch.full((batch, heads, splits, RANK), float("nan"), dtype=torch.float32, device=q.device)
    lse = torch.full((batch, heads, splits), float("nan"), dtype=torch.float32, device=q.device)
    kernel(q, cache, cache_lens, partial, lse, split_tiles, scale * math.log2(math.e))
    return partial, lse


def triton_run(cand, q, cache, cache_lens, scale):
    batch, heads, _ = q.shape
    config = cand._attention_config(batch, heads, cache.shape[1], q.device)
    splits = config["num_splits"]
    partial = torch.empty((batch, heads, splits, RANK), dtype=torch.float32, device=q.device)
    lse = torch.empty((batch, heads, splits), dtype=torch.float32, device=q.device)
    import triton

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
]
SCALE = 0.1352338


def check_variant(kernel, cand, out):
    worst = 0.0
    for index, (batch, heads, capacity, lens, split_tiles) in enumerate(CHECKS):
        g = torch.Generator().manual_seed(100 + index)
        lens = lens or torch.randint(0, capacity, (batch,), generator=g).tolist()
        q, cache, cache_lens = inputs(batch, heads, capacity, lens, seed=index)
        ref = reference_o_latent(q, cache, cache_lens, SCALE)
        partial, lse = wgmma_run(kernel, q, cache, cache_lens, split_tiles, SCALE)
        torch.cuda.synchronize()
        o = merge(partial, lse)
        err = rel_l2(o, ref) if torch.isfinite(o).all() else float("inf")
        launch, tp, tl_ = triton_run(cand, q, cache, cache_lens, SCALE)
        launch()
        torch.cuda.synchronize()
        terr = rel_l2(merge(tp, tl_), ref)
        # every split that holds tokens: its lse finite and its partial written for every head
        tokens = cache_lens.long() + 1
        filled = (torch.arange(partial.shape[2], device="cuda")[None, :] * split_tiles * 64) < tokens[:, None]
        unwritten = int((~torch.isfinite(partial[filled.nonzero()[:, 0], :, filled.nonzero()[:, 1]])).sum())
        empty_ok = bool(torch.isneginf(lse.permute(0, 2, 1)[~filled]).all())
        row = {"check": index, "batch": batch, "heads": heads, "capacity": capacity, "split_tiles": split_tiles,
               "rel_l2": err, "triton_rel_l2": terr, "unwritten": unwritten, "empty_splits_neg_inf": empty_ok}
        print(json.dumps(row), flush=True)
        out.write(json.dumps({"kind": "check", **row}) + "\n")
        ok = err < max(4 * terr, 5e-3) and unwritten == 0 and empty_ok
        worst = max(worst, err) if ok else float("inf")
    return worst


def time_shapes(kernel, cand, out, shapes):
    import triton

    rows = []
    for name, batch, heads, length, ragged in shapes:
        g = torch.Generator().manual_seed(7)
        lens = (torch.randint(length // 8, length, (batch,), generator=g) if ragged
                else torch.full((batch,), length - 1)).tolist()
        q, cache, cache_lens = inputs(batch, heads, length, lens, seed=11)
        cache = torch.nan_to_num(cache)
        flops = sum(2 * heads * (n + 1) * (576 + 512) for n in lens)
        launch, _, _ = triton_run(cand, q, cache, cache_lens, SCALE)
        t_triton = triton.testing.do_bench(launch, warmup=25, rep=200, return_mode="median") * 1e3
        row = {"shape": name, "triton_us": round(t_triton, 1)}
        capacity_tiles = math.ceil(length / 64)
        best = None
        for split_tiles in sorted({max(1, capacity_tiles // s) for s in (1, 2, 4, 8, 16, 32)}):
            splits = math.ceil(capacity_tiles / split_tiles)
            partial = torch.empty((batch, heads, splits, RANK), dtype=torch.float32, device="cuda")
            lse = torch.empty((batch, heads, splits), dtype=torch.float32, device="cuda")

            def go(q=q, cache=cache, cache_lens=cache_lens, partial=partial, lse=lse, split_tiles=split_tiles):
                kernel(q, cache, cache_lens, partial, lse, split_tiles, SCALE * math.log2(math.e))

            t = triton.testing.do_bench(go, warmup=25, rep=200, return_mode="median") * 1e3
            row[f"wgmma_us@{split_tiles}"] = round(t, 1)
            if best is None or t < best[0]:
                best = (t, split_tiles)
        row["best_wgmma_us"] = round(best[0], 1)
        row["best_split_tiles"] = best[1]
        row["tflops"] = round(flops / best[0] / 1e6, 1)
        row["x_triton"] = round(t_triton / best[0], 2)
        print(json.dumps(row), flush=True)
        out.write(json.dumps({"kind": "time", **row}) + "\n")
        rows.append(row)
    return rows


SHAPES = [("full_h128_b1_l4096", 1, 128, 4096, False), ("full_h128_b8_l4096", 8, 128, 4096, False),
          ("full_h128_b64_l4096", 64, 128, 4096, False), ("full_h128_b128_l4096", 128, 128, 4096, False),
          ("full_h16_b64_l16384", 64, 16, 16384, False), ("tp1_b64_l4096", 64, 128, 4096, True),
          ("tp8_b32_l8192", 32, 16, 8192, True)]


SWITCHES = [(), ("SKIP_QK",), ("SKIP_SOFTMAX",), ("SKIP_PV",), ("SKIP_LOADS",), ("SKIP_QK", "SKIP_PV"),
            ("SKIP_QK", "SKIP_PV", "SKIP_SOFTMAX")]


def breakdown(points: list[str], switch_sets=SWITCHES) -> None:
    """Each stage's share of the kernel's time: the same launch with stages left out (wrong results, timing only);
    or variants (switch sets such as PREFETCH=2) side by side."""
    import triton

    kernels = {switches: WgmmaKernel(8192, 1024, switches) for switches in switch_sets}
    print("| shape | split tiles | " + " | ".join("-".join(k) or "full" for k in switch_sets) + " |")
    for point in points:
        name, split_tiles = point.split(":")
        split_tiles = int(split_tiles)
        _, batch, heads, length, _ = next(s for s in SHAPES if s[0] == name)
        q, cache, cache_lens = inputs(batch, heads, length, [length - 1] * batch, seed=11)
        cache = torch.nan_to_num(cache)
        splits = math.ceil(math.ceil(length / 64) / split_tiles)
        partial = torch.empty((batch, heads, splits, RANK), dtype=torch.float32, device="cuda")
        lse = torch.empty((batch, heads, splits), dtype=torch.float32, device="cuda")
        times = []
        for switches in switch_sets:
            kernel = kernels[switches]

            def go(kernel=kernel):
                kernel(q, cache, cache_lens, partial, lse, split_tiles, SCALE * math.log2(math.e))

            times.append(triton.testing.do_bench(go, warmup=25, rep=200, return_mode="median") * 1e3)
        print(f"| {name} | {split_tiles} | " + " | ".join(f"{t:.1f}" for t in times) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="/tmp/wgmma")
    parser.add_argument("--variants", default="8192:1024,1024:8192")
    parser.add_argument("--shapes", nargs="*", default=[s[0] for s in SHAPES])
    parser.add_argument("--breakdown", nargs="*", default=None,
                        help="SHAPE:SPLIT_TILES ...: time the kernel with each stage left out (timing only)")
    parser.add_argument("--switches", nargs="*", default=None,
                        help="switch sets for --breakdown, each comma-separated (e.g. PREFETCH=2,SKIP_QK); '' is none")
    args = parser.parse_args()
    if args.breakdown is not None:
        sets = SWITCHES if args.switches is None else [tuple(x for x in s.split(",") if x) for s in args.switches]
        breakdown(args.breakdown, sets)
        return
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    cand = load_candidate(REPO / "tasks" / "mla_attention" / "candidates" / "triton_mla.py")
    with open(out_dir / "wgmma-probe.jsonl", "a") as out:
        chosen = None
        for variant in args.variants.split(","):
            leading, stride = map(int, variant.split(":"))
            try:
                kernel = WgmmaKernel(leading, stride)
            except Exception as err:  # noqa: BLE001 - report and go on to the next variant
                print(f"variant {variant}: compile/load failed: {err}", flush=True)
                continue
            print(f"variant {variant}: compiled in {kernel.compile_s:.1f} s, {kernel.registers} registers", flush=True)
            worst = check_variant(kernel, cand, out)
            print(f"variant {variant}: worst rel_l2 {worst}", flush=True)
            if worst != float("inf"):
                chosen = kernel
                break
        if chosen is None:
            print("no variant passed", flush=True)
            return
        rows = time_shapes(chosen, cand, out, [s for s in SHAPES if s[0] in args.shapes])
    print("\n| shape | triton kernel 3 us | wgmma us (split tiles) | x triton | TFLOP/s |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['shape']} | {r['triton_us']} | {r['best_wgmma_us']} ({r['best_split_tiles']}) | {r['x_triton']} "
              f"| {r['tflops']} |")


if __name__ == "__main__":
    main()
