"""The independent test-writer: builds a locked gate from a contract and its canonical reference.

It runs in a process that never sees a candidate: it draws each case's inputs from their seeds, runs the
canonical reference (float64), stores the golden value of every stage, records the reference's check
against its oracle, and locks everything with sha256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import save_file

from ferret.contract.imports import load_entry, project_root_of
from ferret.contract.load import ContractError, load_contract
from ferret.contract.model import Contract
from ferret.gate.inputs import TORCH_DTYPES, case_variants, draw_inputs, tensor_content_sha256, variant_id
from ferret.gate.lock import (
    MANIFEST_FILE,
    canonical_json,
    gate_hash,
    judge_source_hashes,
    locked_files,
    sha256_file,
    verify_gate,
)
from ferret.gate.models import GateManifest, InputRecord, VariantRecord
from ferret.gate.platform_info import platform_info, resolve_profile, versions
from ferret.gate.trust import is_trusted, record_gate

# Inputs larger than this are not stored: the gate keeps their seed and content hash, and the judge
# regenerates them and checks the hash.
STORE_INPUTS_MAX_BYTES = 64 << 20

Progress = Callable[[str], None]


def build_key(contract: Contract, profile: str) -> str:
    key = {
        "contract": contract.model_dump(mode="json"),
        "profile": profile,
        "platform": platform_info(),
        "versions": versions(),
        "judge": judge_source_hashes(),
    }
    return hashlib.sha256(canonical_json(key)).hexdigest()


def find_gate(gates_dir: Path, key: str) -> Path | None:
    """The gate folder built for `key` whose hash the test-writer recorded; untrusted folders are ignored."""
    if not gates_dir.is_dir():
        return None
    for manifest_path in sorted(gates_dir.glob(f"*/{MANIFEST_FILE}")):
        try:
            if json.loads(manifest_path.read_text()).get("build_key") == key and is_trusted(manifest_path.parent.name):
                return manifest_path.parent
        except (OSError, ValueError):
            continue
    return None


def _validate_reference(contract: Contract, root: Path, progress: Progress) -> dict:
    validation = contract.reference.validation
    record = {"oracle": validation.oracle, "test": validation.test, "tolerance": validation.tolerance}
    if validation.check is None:
        return {**record, "ran": False, "passed": None}
    progress(f"validating the reference against {validation.oracle}")
    result = load_entry(validation.check, root)()
    if not result.get("passed"):
        raise RuntimeError(f"the canonical reference disagrees with its oracle {validation.oracle}: {result}")
    return {**record, "ran": True, **{k: v for k, v in result.items() if isinstance(v, (str, int, float, bool))}}


def build_gate(
    contract_path: str | Path,
    gates_dir: str | Path = "gates",
    profile: str = "cpu",
    progress: Progress = lambda message: None,
    reuse: bool = True,
) -> Path:
    """Build (or find, verify and reuse) the gate of a contract; return its folder `gates/<hash>`.

    A profile other than cpu or gpu is a UsageError raised before anything is written. A gpu gate can be
    built without a GPU (its reference then runs on the CPU); only judging with it needs one."""
    profile = resolve_profile(profile, needs_gpu=False)
    contract_path = Path(contract_path)
    contract = load_contract(contract_path)
    if contract.tolerances is None:
        raise ContractError(f"{contract_path}: tolerances: missing; derive them with `ferret calibrate {contract_path}`")
    gates_dir = Path(gates_dir)
    key = build_key(contract, profile)
    existing = find_gate(gates_dir, key) if reuse else None
    if existing is not None:
        verify_gate(existing, require_trusted=True)
        progress(f"reusing gate {existing}")
        return existing

    root = project_root_of(contract_path)
    reference = load_entry(contract.reference.entry, root)
    device = "cuda" if profile == "gpu" and torch.cuda.is_available() else "cpu"
    golden_dtype = TORCH_DTYPES[contract.reference.golden_dtype]
    validation = _validate_reference(contract, root, progress)

    gates_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=gates_dir))
    try:
        variants = []
        all_variants = case_variants(contract, profile)
        for number, (case, dtype, part) in enumerate(all_variants, 1):
            vid = variant_id(case, dtype)
            started = time.perf_counter()
            inputs = draw_inputs(contract, case, dtype)
            folder = staging / "cases" / vid
            folder.mkdir(parents=True)
            nbytes = sum(t.numel() * t.element_size() for t in inputs.values())
            stored = nbytes <= STORE_INPUTS_MAX_BYTES
            if stored:
                save_file(inputs, str(folder / "inputs.safetensors"))
            with torch.no_grad():
                stages = reference({k: v.to(device) for k, v in inputs.items()}, dict(contract.params))
            missing = [s.name for s in contract.stages if s.name not in stages]
            if missing:
                raise RuntimeError(f"reference {contract.reference.entry} did not return stages {missing}")
            golden = {s.name: stages[s.name].detach().to("cpu", golden_dtype).contiguous() for s in contract.stages}
            save_file(golden, str(folder / "golden.safetensors"))
            variants.append(
                VariantRecord(
                    id=vid,
                    case=case.name,
                    dtype=dtype,
                    part=part,
                    seed=case.seed,
                    dims=case.dims,
                    inputs=InputRecord(
                        stored=stored,
                        file=f"cases/{vid}/inputs.safetensors" if stored else None,
                        content_sha256={k: tensor_content_sha256(v) for k, v in inputs.items()},
                        nbytes=nbytes,
                    ),
                    golden_file=f"cases/{vid}/golden.safetensors",
                )
            )
            progress(f"[{number}/{len(all_variants)}] {vid}: golden stages written ({time.perf_counter() - started:.1f}s)")

        contract_data = contract.model_dump(mode="json")
        (staging / "contract.json").write_bytes(canonical_json(contract_data))
        manifest = GateManifest(
            op=contract.op,
            profile=profile,
            build_key=key,
            contract=contract_data,
            contract_sha256=hashlib.sha256(canonical_json(contract_data)).hexdigest(),
            platform=platform_info(),
            versions=versions(),
            judge_sources=judge_source_hashes(),
            reference={
                "entry": contract.reference.entry,
                "precision": contract.reference.precision,
                "golden_dtype": contract.reference.golden_dtype,
                "device": device,
            },
            validation=validation,
            variants=variants,
            files={name: sha256_file(staging / name) for name in locked_files(staging)},
        )
        manifest_bytes = canonical_json(manifest.model_dump(mode="json"))
        (staging / MANIFEST_FILE).write_bytes(manifest_bytes)
        digest = gate_hash(manifest_bytes)
        final = gates_dir / digest
        for path in staging.rglob("*"):
            # Read-only, owner only: an accidental write fails loudly, and other users read nothing.
            path.chmod(0o500 if path.is_dir() else 0o400)
        if final.exists():
            shutil.rmtree(staging, onerror=_force_remove)
        else:
            staging.chmod(0o700)
            os.replace(staging, final)
        verify_gate(final)
        # Recorded only now, by the process that computed every byte of it (an existing folder of the
        # same hash holds exactly the manifest just recomputed, so it is recorded too).
        record_gate(digest, {"op": contract.op, "profile": profile, "build_key": key, "folder": str(final.resolve())})
        progress(f"gate {digest} locked at {final}")
        return final
    except BaseException:
        shutil.rmtree(staging, onerror=_force_remove)
        raise


def _force_remove(func, path, _exc_info):
    os.chmod(os.path.dirname(path), 0o755)
    os.chmod(path, 0o755)
    func(path)


def main(argv: list[str] | None = None) -> int:
    """`python -m ferret.gate.build`: the test-writer's own process, used by the judge when no gate exists."""
    parser = argparse.ArgumentParser(prog="python -m ferret.gate.build")
    parser.add_argument("contract")
    parser.add_argument("--gates-dir", default="gates")
    parser.add_argument("--profile", choices=("cpu", "gpu"), default="cpu")
    args = parser.parse_args(argv)
    gate = build_gate(args.contract, args.gates_dir, args.profile, progress=lambda m: print(f"ferret: test-writer: {m}", file=sys.stderr, flush=True))
    print(gate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
