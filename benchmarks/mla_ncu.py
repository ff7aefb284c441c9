"""One MLA decode step of template points and FlashMLA's dense decode core on the same inputs, for Nsight Compute.

    ncu --clock-control none --set full -k 'regex:attention_kernel|merge_splits|mla' -o REPORT \\
        python benchmarks/mla_ncu.py --shapes full_h128_b64_l4096 full_h128_b8_l4096 [--point ...] [--candidate FILE]

Per shape, in this order: each point's whole step once (its output checked against the reference within the
contract's tolerance, so a wrong kernel is named, not profiled silently), then FlashMLA's core once (its o_latent
checked). Each is one launch of each of its kernels: the profiler's filter picks which of them it measures (ncu replays
a kernel with the caches flushed before every pass). Shapes, points and the FlashMLA call are
benchmarks/mla_template_bench.py's. Prints one line per launch made, so the profiler's report can be read against it.
A benchmark helper, not a gate.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def bench_module():
    spec = importlib.util.spec_from_file_location("mla_template_bench", REPO / "benchmarks" / "mla_template_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_args(argv: list[str] | None, bench) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", required=True, help="shape names of mla_template_bench.py")
    parser.add_argument("--point", action="append", default=None, type=bench.parse_point,
                        help="what differs from the space's default (repeatable; default: the default point)")
    parser.add_argument("--candidate", action="append", default=[], type=Path, metavar="FILE",
                        help="also a candidate file, launched after the points")
    parser.add_argument("--out", type=Path, default=Path("/tmp/mla-ncu"), help="folder for the rendered points")
    return parser.parse_args(argv)


def launch_shape(bench, contract, points, shape_name: str, spec: dict) -> None:
    import torch

    from tasks.mla_attention import reference as ref

    params = dict(contract.params)
    inputs = {k: v.to("cuda") for k, v in spec["inputs"]().items()}
    golden = ref.reference(inputs, params)
    limit = contract.tolerance("bfloat16", "o_heads").rel_l2
    for approach, path in points:
        why = bench.check(bench.load_module(path).run, inputs, params, golden["o_heads"], limit)
        print(f"{shape_name}: {approach}: {'launched, checked' if why is None else why}", flush=True)
    latent_limit = contract.tolerance("bfloat16", "o_latent").rel_l2
    flash, _call = bench.flash_mla_row(golden, inputs, params, latent_limit, cpu=False)
    print(f"{shape_name}: FlashMLA core: {flash}", flush=True)
    torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    bench = bench_module()
    args = parse_args(argv, bench)
    from ferret.contract.load import load_contract

    contract = load_contract(bench.CONTRACT)
    points = bench.render_points(args.point if args.point is not None else [{}], args.out / "points")
    points += bench.candidate_points(args.candidate)
    for shape_name, spec in bench.shape_list(args.shapes, False, contract):
        launch_shape(bench, contract, points, shape_name, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
