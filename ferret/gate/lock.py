"""The lock: a gate's hash is the sha256 of its manifest, and the manifest holds the sha256 of every
file in the gate and of the judge's own source. Verification recomputes all of it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import ferret
from ferret.errors import GateTampered
from ferret.gate.trust import is_trusted, trust_dir

REPORT_FILE = "report.json"
MANIFEST_FILE = "manifest.json"
# Files the judge writes beside the locked ones; everything else in a gate folder must be in the manifest.
UNLOCKED_FILES = frozenset({REPORT_FILE, REPORT_FILE + ".lock", REPORT_FILE + ".tmp"})
# The judge's own source: editing any of it changes what a verdict means, so it counts as tampering.
JUDGE_PACKAGES = ("contract", "gate", "sandbox", "bench")



def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def judge_source_hashes() -> dict[str, str]:
    root = Path(ferret.__file__).resolve().parent
    hashes = {}
    for package in JUDGE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            hashes[f"ferret/{path.relative_to(root).as_posix()}"] = sha256_file(path)
    return hashes


def canonical_json(data: object) -> bytes:
    return (json.dumps(data, sort_keys=True, indent=1, allow_nan=False) + "\n").encode()


def gate_hash(manifest_bytes: bytes) -> str:
    return hashlib.sha256(manifest_bytes).hexdigest()


def locked_files(gate_dir: Path) -> list[str]:
    return sorted(
        p.relative_to(gate_dir).as_posix()
        for p in gate_dir.rglob("*")
        if p.is_file() and p.relative_to(gate_dir).as_posix() not in UNLOCKED_FILES | {MANIFEST_FILE}
    )


def verify_gate(gate_dir: str | Path, expected_hash: str | None = None, require_trusted: bool = False) -> dict:
    """Return the manifest of an intact gate; raise GateTampered naming each changed, missing or added file.

    With `require_trusted`, the gate's hash must also be one the test-writer recorded (ferret.gate.trust):
    a gate forged whole is self-consistent, but its hash was never recorded."""
    gate_dir = Path(gate_dir)
    manifest_path = gate_dir / MANIFEST_FILE
    if not manifest_path.is_file():
        raise GateTampered(gate_dir, [f"{MANIFEST_FILE}: missing"])
    manifest_bytes = manifest_path.read_bytes()
    digest = gate_hash(manifest_bytes)
    problems: list[str] = []
    expected = expected_hash or gate_dir.name
    if digest != expected:
        problems.append(f"{MANIFEST_FILE}: sha256 {digest[:16]}… does not match the gate's hash {expected[:16]}…")
    try:
        manifest = json.loads(manifest_bytes)
        files: dict[str, str] = manifest["files"]
    except (ValueError, KeyError, TypeError):
        raise GateTampered(gate_dir, problems + [f"{MANIFEST_FILE}: unreadable"]) from None
    present = set(locked_files(gate_dir))
    for name, want in sorted(files.items()):
        path = gate_dir / name
        if name not in present:
            problems.append(f"{name}: missing")
        elif sha256_file(path) != want:
            problems.append(f"{name}: changed (sha256 differs from the lock)")
    for name in sorted(present - set(files)):
        problems.append(f"{name}: added after the gate was locked")
    current_judge = judge_source_hashes()
    for name, want in sorted(manifest.get("judge_sources", {}).items()):
        have = current_judge.get(name)
        if have is None:
            problems.append(f"judge source {name}: missing")
        elif have != want:
            problems.append(f"judge source {name}: changed since the gate was built")
    for name in sorted(set(current_judge) - set(manifest.get("judge_sources", {}))):
        problems.append(f"judge source {name}: added since the gate was built")
    if require_trusted and not problems:
        if not is_trusted(digest):
            problems.append(
                f"gate hash {digest[:16]}… was not recorded by the test-writer in {trust_dir()} (built elsewhere, or forged "
                "whole); rebuild it with `ferret gate build`"
            )
    if problems:
        raise GateTampered(gate_dir, problems)
    return manifest
