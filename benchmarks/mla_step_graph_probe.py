"""Whole MLA decode steps of template points timed as CUDA-graph replays, side by side on one GPU.

    PYTHONPATH=/tmp/site:$PWD python3 benchmarks/mla_step_graph_probe.py --out DIR \\
        --point attention_kernel=wgmma --point attention_kernel=wgmma,launch_overlap=pdl [--shapes B:H:L ...]

Why: at small batch a step is a few tens of microseconds, less than the host takes to launch its five kernels, so
do_bench of run() (benchmarks/mla_template_bench.py) reads the host's launch time there. The gate hides launch time
behind a spin kernel; this probe, for A/B comparisons between points, captures each point's run() into a CUDA graph
(inputs fixed: every request at full length, cache_lens = L - 1) and times its replays with do_bench (L2 flushed before
each replay, median): the GPU's time for the step, the gaps between its kernels included, the host's launches not.
Each point's o_heads is checked first against the first point's on the same inputs (relative L2 under 1e-2, every
value finite). Not the gate (whose timing decides); a benchmark helper. Writes DIR/step-graph-probe.jsonl, prints a
table last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SHAPES = ["1:128:4096", "8:128:4096", "64:128:4096", "128:128:4096"]


def bench_module():
    spec = importlib.util.spec_from_file_location("mla_template_bench", REPO / "benchmarks" / "mla_template_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def graph_of(run, inputs: dict, o_heads, params: dict):
    """run() captured once, after two calls outside the graph (compiling, tuning, per-shape caches)."""
    import torch

    for _ in range(2):
        run(inputs, {"o_heads": o_heads}, params)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(inputs, {"o_heads": o_heads}, params)
    torch.cuda.synchronize()
    return graph


def time_shape(bench, points, batch: int, heads: int, length: int) -> list[dict]:
    import torch
    import triton

    from tasks.mla_attention import reference as ref
    from tasks.mla_attention.inputs import make_inputs

    params = ref.DEEPSEEK_V3_PARAMS
    inputs = make_inputs(batch=batch, heads=heads, cache_capacity=length, seed=7, device="cuda",
                         cache_lens=[length - 1] * batch)
    rows, first = [], None
    for approach, path in points:
        module = bench.load_module(path)
        own = {**inputs, "kv_cache": inputs["kv_cache"].clone()}
        o_heads = torch.full((batch, heads, 128), float("nan"), dtype=torch.bfloat16, device="cuda")
        graph = graph_of(module.run, own, o_heads, params)
        o_heads.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        got = o_heads.double()
        if first is None:
            first = got
        error = float((got - first).norm() / first.norm()) if torch.isfinite(got).all() else float("inf")
        row = {"shape": f"{batch}:{heads}:{length}", "point": approach, "rel_l2_vs_first": error}
        if error < 1e-2:
            row["graph_us"] = round(1e3 * triton.testing.do_bench(graph.replay, warmup=25, rep=300,
                                                                  return_mode="median"), 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
        del graph
    return rows


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    bench = bench_module()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--point", action="append", required=True, type=bench.parse_point,
                        help="what differs from the space's default (repeatable; the first is the yardstick)")
    parser.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES, help="B:H:L, every request at length L")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    points = bench.render_points(args.point, args.out / "points")
    rows = []
    with open(args.out / "step-graph-probe.jsonl", "a") as log:
        for shape in args.shapes:
            batch, heads, length = (int(x) for x in shape.split(":"))
            for row in time_shape(bench, points, batch, heads, length):
                log.write(json.dumps(row) + "\n")
                rows.append(row)
    print("\n| shape | point | graph replay us (median, L2 flushed) | rel L2 vs the first point |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['shape']} | {row['point']} | {row.get('graph_us', '-')} | {row['rel_l2_vs_first']:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
