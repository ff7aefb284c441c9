"""The MLA contract's `cancelling_halves` edits (zero queries: flat attention; a cache whose halves cancel) at
chosen dims, on the CPU or a GPU: the error of the eager baseline, the honest Triton candidate and the chosen
precision variants against the float64 reference, judged as the gate judges (general tolerance row), so a
shape can be tried before it becomes a gate case.

    python benchmarks/mla_cancelling_probe.py --device cuda --dims 1,16,4096 2,128,4096 --variants partial_bf16

One line per (dims, implementation): probs, o_latent, o_heads rel_l2 against their limits.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def implementations(names: list[str], folder: Path) -> dict:
    from ferret.contract.imports import load_entry
    from tasks.mla_attention.precision_variants import load_variant

    found = {"baseline": load_entry("tasks.mla_attention.baseline:run", str(ROOT)),
             "honest": load_entry("tasks.mla_attention.candidates.triton_mla:run", str(ROOT))}
    for name in names:
        found[name] = load_variant(name, folder).run
    return found


def probe(contract, dims: tuple[int, int, int], impls: dict, device: str, seed: int) -> None:
    from ferret.gate.calibrate import _run_implementation
    from ferret.gate.inputs import draw_inputs
    from ferret.gate.metrics import compare_stage
    from tasks.mla_attention import reference as ref

    template = next(c for c in contract.cases_for("cpu") if c.name == "cancelling_halves")
    case = template.model_copy(update={"dims": dict(zip("BHL", dims, strict=True)), "seed": seed})
    inputs = draw_inputs(contract, case, "bfloat16")
    golden = ref.reference({k: v.clone() for k, v in inputs.items()}, dict(contract.params))
    for name, run in impls.items():
        started = time.perf_counter()
        got = _run_implementation(run, inputs, contract, case, "bfloat16", device)
        parts = []
        for stage in ("probs", "o_latent", "o_heads"):
            if got.get(stage) is None:
                continue
            tol = contract.tolerance("bfloat16", stage)
            m = compare_stage(got[stage].cpu(), golden[stage].cpu(), contract.stage(stage), tol)
            parts.append(f"{stage} {m.rel_l2:.4g}/{tol.rel_l2} {'ok' if m.passed else 'REJECTED'}")
        print(f"B,H,L={dims} {name:14s} {time.perf_counter() - started:5.1f}s  " + "; ".join(parts), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dims", nargs="+", default=["1,2,512"], help="B,H,L (repeatable)")
    parser.add_argument("--variants", default="partial_bf16", help="precision variants, comma-separated")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    from ferret.contract.load import load_contract

    contract = load_contract(ROOT / "contracts" / "mla_attention.yaml")
    impls = implementations([v for v in args.variants.split(",") if v], Path(tempfile.mkdtemp()))
    for text in args.dims:
        probe(contract, tuple(int(x) for x in text.split(",")), impls, args.device, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
