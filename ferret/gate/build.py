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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from ferret.contract.imports import load_entry, project_root_of
from ferret.contract.load import ContractError, load_contract
from ferret.contract.model import Case, Contract, ProfileName
from ferret.gate.inputs import (
    TORCH_DTYPES,
    case_variants,
    draw_inputs,
    tensor_content_sha256,
    variant_id,
)
from ferret.gate.lock import (
    MANIFEST_FILE,
    canonical_json,
    gate_hash,
    judge_source_hashes,
    locked_files,
    project_lock,
    sha256_file,
    verify_gate,
)
from ferret.gate.models import GateManifest, InputRecord, PartName, ProjectLock, VariantRecord
from ferret.gate.platform_info import platform_info, resolve_profile, versions
from ferret.gate.trust import is_trusted, record_gate

# Inputs larger than this are not stored: the gate keeps their seed and content hash, and the judge
# regenerates them and checks the hash.
STORE_INPUTS_MAX_BYTES = 64 << 20

Progress = Callable[[str], None]


def build_key(contract_path: Path, contract: Contract, profile: str, project: dict | None = None) -> str:
    """What determines a gate; a change to any of it (the project's files the judge loads included) means
    another gate, so that editing the reference, say, gets a fresh gate rather than the old one's.
    `project` is the contract's `project_lock`, when already computed."""
    if project is None:
        project = project_lock(contract_path, contract, project_root_of(contract_path))
    key = {
        "contract": contract.model_dump(mode="json"),
        "profile": profile,
        "platform": platform_info(),
        "versions": versions(),
        "judge": judge_source_hashes(),
        "project": project,
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
    contract = _load_calibrated_contract(contract_path)
    gates_dir = Path(gates_dir)
    root = project_root_of(contract_path)
    project = project_lock(contract_path, contract, root)
    key = build_key(contract_path, contract, profile, project)
    existing = find_gate(gates_dir, key) if reuse else None
    if existing is not None:
        verify_gate(existing, require_trusted=True)
        progress(f"reusing gate {existing}")
        return existing

    reference = load_entry(contract.reference.entry, root)
    device = "cuda" if profile == "gpu" and torch.cuda.is_available() else "cpu"
    golden_dtype = TORCH_DTYPES[contract.reference.golden_dtype]
    validation = _validate_reference(contract, root, progress)

    gates_dir.mkdir(parents=True, exist_ok=True)
    # Everything is written into a hidden folder first and moved into place whole, once locked, so that no
    # half-built gate ever sits under its hash.
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=gates_dir))
    build = _Build(contract, profile, key, reference, device, golden_dtype, staging, project)
    try:
        variants = _write_variants(build, progress)
        manifest_bytes = _write_manifest(build, validation, variants)
        return _lock_into_place(build, gates_dir, manifest_bytes, progress)
    except BaseException:
        shutil.rmtree(staging, onerror=_force_remove)
        raise


def _load_calibrated_contract(contract_path: Path) -> Contract:
    """The contract, which must carry its tolerances: a gate judges by them, and only calibrate makes them."""
    contract = load_contract(contract_path)
    if contract.tolerances is None:
        raise ContractError(f"{contract_path}: tolerances: missing; derive them with `ferret calibrate {contract_path}`")
    return contract


@dataclass(frozen=True)
class _Build:
    """What every step of one build shares: the contract and profile, the build key, the canonical reference
    and where it runs, the dtype its golden values are stored in, and the staging folder written into."""

    contract: Contract
    profile: ProfileName
    key: str
    reference: Callable
    device: str
    golden_dtype: torch.dtype
    staging: Path
    project: dict


def _write_variants(build: _Build, progress: Progress) -> list[VariantRecord]:
    """Every case variant of the profile drawn, computed by the reference and written, in order."""
    variants = []
    all_variants = case_variants(build.contract, build.profile)
    for number, (case, dtype, part) in enumerate(all_variants, 1):
        started = time.perf_counter()
        record = _write_variant(build, case, dtype, part)
        variants.append(record)
        progress(f"[{number}/{len(all_variants)}] {record.id}: golden stages written ({time.perf_counter() - started:.1f}s)")
    return variants


def _write_variant(build: _Build, case: Case, dtype: str, part: PartName) -> VariantRecord:
    """One variant's folder `cases/<id>`: its inputs (unless too large: then only their seed and content
    hash) and the golden value of every stage; and the record of it for the manifest."""
    vid = variant_id(case, dtype)
    inputs = draw_inputs(build.contract, case, dtype)
    folder = build.staging / "cases" / vid
    folder.mkdir(parents=True)
    nbytes = sum(t.numel() * t.element_size() for t in inputs.values())
    stored = nbytes <= STORE_INPUTS_MAX_BYTES
    if stored:
        save_file(inputs, str(folder / "inputs.safetensors"))
    save_file(_golden_stages(build, inputs), str(folder / "golden.safetensors"))
    return VariantRecord(
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


def _golden_stages(build: _Build, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The reference's value of every stage the contract names (and of every error scale its stages declare), on the
    CPU in the golden dtype; a stage the reference does not return is an error, not a gap in the gate."""
    contract = build.contract
    with torch.no_grad():
        stages = build.reference({k: v.to(build.device) for k, v in inputs.items()}, dict(contract.params))
    missing = [name for name in contract.golden_names() if name not in stages]
    if missing:
        raise RuntimeError(f"reference {contract.reference.entry} did not return stages {missing}")
    return {name: stages[name].detach().to("cpu", build.golden_dtype).contiguous() for name in contract.golden_names()}


def _write_manifest(build: _Build, validation: dict, variants: list[VariantRecord]) -> bytes:
    """Write contract.json and the manifest (which hashes every file written before it); return the
    manifest's bytes, whose hash names the gate."""
    contract, staging = build.contract, build.staging
    contract_data = contract.model_dump(mode="json")
    (staging / "contract.json").write_bytes(canonical_json(contract_data))
    manifest = GateManifest(
        op=contract.op,
        profile=build.profile,
        build_key=build.key,
        contract=contract_data,
        contract_sha256=hashlib.sha256(canonical_json(contract_data)).hexdigest(),
        platform=platform_info(),
        versions=versions(),
        judge_sources=judge_source_hashes(),
        project=ProjectLock.model_validate(build.project),
        reference={
            "entry": contract.reference.entry,
            "precision": contract.reference.precision,
            "golden_dtype": contract.reference.golden_dtype,
            "device": build.device,
        },
        validation=validation,
        variants=variants,
        files={name: sha256_file(staging / name) for name in locked_files(staging)},
    )
    manifest_bytes = canonical_json(manifest.model_dump(mode="json"))
    (staging / MANIFEST_FILE).write_bytes(manifest_bytes)
    return manifest_bytes


def _lock_into_place(build: _Build, gates_dir: Path, manifest_bytes: bytes, progress: Progress) -> Path:
    """Make the staging folder read-only, move it to `gates/<hash>`, verify it there and record its hash as
    trusted."""
    digest = gate_hash(manifest_bytes)
    final = gates_dir / digest
    staging = build.staging
    for path in staging.rglob("*"):
        # Read-only, owner only: an accidental write fails loudly, and other users read nothing.
        path.chmod(0o500 if path.is_dir() else 0o400)
    if final.exists():
        shutil.rmtree(staging, onerror=_force_remove)
    else:
        _move_unless_another_locked_it(staging, final)
    verify_gate(final)
    # Recorded only now, by the process that computed every byte of it (an existing folder of the
    # same hash holds exactly the manifest just recomputed, so it is recorded too).
    record_gate(
        digest, {"op": build.contract.op, "profile": build.profile, "build_key": build.key, "folder": str(final.resolve())}
    )
    progress(f"gate {digest} locked at {final}")
    return final


def _move_unless_another_locked_it(staging: Path, final: Path) -> None:
    """Rename the staged gate into place; if another process sharing the gates folder locked the same hash
    between our check and the rename (the rename then fails: the folder is not empty), keep theirs. It holds
    the same bytes, and `verify_gate` checks that right after."""
    staging.chmod(0o700)
    try:
        os.replace(staging, final)
    except OSError:
        if not final.is_dir():
            raise
        shutil.rmtree(staging, onerror=_force_remove)


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
    gate = build_gate(
        args.contract,
        args.gates_dir,
        args.profile,
        progress=lambda m: print(f"ferret: test-writer: {m}", file=sys.stderr, flush=True),
    )
    print(gate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
