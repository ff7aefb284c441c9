"""Drawing a case's inputs from the contract's declarative distributions.

Inputs are drawn on the CPU with a seeded torch.Generator so that the same (contract, case, seed) gives
bitwise the same tensors on every machine; they are moved to the device afterwards.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import threading
from pathlib import Path

import torch
from safetensors.torch import load, save

from ferret.contract.imports import load_entry
from ferret.contract.model import (
    DTYPE_VARIANT,
    FLOAT8_MAX,
    Case,
    Constant,
    Contract,
    Edit,
    Input,
    Normal,
    ProfileName,
    RandInt,
    RowScaledNormal,
    Uniform,
)
from ferret.contract.shapes import evaluate, evaluate_shape
from ferret.gate.models import PartName, VariantRecord

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "bool": torch.bool,
}


def resolve_dtype(declared: str, variant_dtype: str) -> torch.dtype:
    return TORCH_DTYPES[variant_dtype if declared == DTYPE_VARIANT else declared]


def _input_seed(case_seed: int, input_name: str) -> int:
    # Each input gets its own stream, so adding an input to a contract does not change the others.
    digest = hashlib.sha256(f"{case_seed}:{input_name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _draw(spec: Input, shape: tuple[int, ...], dims: dict[str, int], gen: torch.Generator) -> torch.Tensor:
    dist = spec.distribution
    # Scaled in place: the same float64 operations, in the same order, as `x * std + mean`, without two more arrays
    # of the draw's size (an MLA cache of 75M entries is 600 MB of float64 each).
    if isinstance(dist, Normal):
        return torch.randn(shape, generator=gen, dtype=torch.float64).mul_(dist.std).add_(dist.mean)
    if isinstance(dist, Uniform):
        return torch.rand(shape, generator=gen, dtype=torch.float64).mul_(dist.high - dist.low).add_(dist.low)
    if isinstance(dist, RandInt):
        low, high = evaluate(dist.low, dims), evaluate(dist.high, dims)
        if high < low:
            raise ValueError(f"inputs.{spec.name}: randint bounds [{low}, {high}] are empty for dims {dims}")
        return torch.randint(low, high + 1, shape, generator=gen, dtype=torch.int64)
    if isinstance(dist, RowScaledNormal):
        values = torch.randn(shape, generator=gen, dtype=torch.float64) * dist.std
        if len(shape) >= 2:
            log_lo, log_hi = math.log(dist.min_scale), math.log(dist.max_scale)
            row_shape = shape[:-1] + (1,)
            scales = torch.exp(torch.rand(row_shape, generator=gen, dtype=torch.float64) * (log_hi - log_lo) + log_lo)
            values = values * scales
        return values
    if isinstance(dist, Constant):
        return torch.full(shape, dist.value, dtype=torch.float64)
    raise TypeError(f"unknown distribution {dist!r}")


def _apply_edit(tensor: torch.Tensor, edit: Edit, dims: dict[str, int]) -> torch.Tensor:
    if edit.set == "value":
        value = evaluate(edit.value, dims) if edit.value is not None else 0
        if edit.at:
            for index in edit.at:
                tensor[tuple(index)] = value
        else:
            tensor[...] = value
    elif edit.set == "opposing_halves":
        _opposing_halves(tensor, edit.axis if edit.axis is not None else -1)
    elif edit.set in ("zeros_rows", "rows_of_inf", "rows_of_neg_inf"):
        fill = {"zeros_rows": 0.0, "rows_of_inf": math.inf, "rows_of_neg_inf": -math.inf}[edit.set]
        for row in edit.rows:
            tensor.view(-1, tensor.shape[-1])[row] = fill
    else:
        fill = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[edit.set]
        for index in edit.at:
            tensor[tuple(index)] = fill
    return tensor


def _opposing_halves(tensor: torch.Tensor, axis: int) -> None:
    """Along `axis`: the first half's absolute values, then their negation position by position (an odd
    length's last entry 0). Sums over the axis cancel; partial sums over either half do not."""
    half = tensor.shape[axis] // 2
    first = tensor.narrow(axis, 0, half).abs()
    tensor.narrow(axis, 0, half).copy_(first)
    tensor.narrow(axis, half, half).copy_(-first)
    if tensor.shape[axis] % 2:
        tensor.narrow(axis, 2 * half, 1).zero_()


def draw_inputs(contract: Contract, case: Case, dtype: str, seed: int | None = None) -> dict[str, torch.Tensor]:
    """The inputs of one case variant, on the CPU, in their contract dtypes: each drawn from its distribution, the
    case's edits applied, then the contract's layout (if it has one) arranging what depends on several inputs."""
    seed = case.seed if seed is None else seed
    tensors: dict[str, torch.Tensor] = {}
    quantized: list[tuple[Input, torch.Tensor]] = []
    for spec in contract.inputs:
        shape = evaluate_shape(spec.shape, case.dims)
        gen = torch.Generator(device="cpu").manual_seed(_input_seed(seed, spec.name))
        values = _draw(spec, shape, case.dims, gen)
        for edit in case.edits:
            if edit.input == spec.name:
                values = _apply_edit(values, edit, case.dims)
        if spec.scales is not None:
            quantized.append((spec, values))
            continue
        tensors[spec.name] = values.to(resolve_dtype(spec.dtype, dtype)).contiguous()
    for spec, values in quantized:  # after every input: the scales replace what their own input drew
        assert spec.scales is not None
        tensors[spec.name], tensors[spec.scales.input] = quantize_blocks(values, str(spec.dtype), spec.scales.block)
    if contract.layout is not None:
        arrange = load_entry(contract.layout.entry, contract.source_root)
        arrange(tensors, dict(case.dims), torch.Generator(device="cpu").manual_seed(_input_seed(seed, "$layout")))
    return tensors


def quantize_blocks(values: torch.Tensor, dtype: str, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes in `dtype`, float32 scales): each `block` values along the last axis scaled so that the largest
    magnitude is the format's largest finite value (scale = amax / max in float32; a block of zeros: scale 0,
    codes 0), the codes `values / scale` rounded to the format (through float32, round to nearest even)."""
    blocks = values.to(torch.float64).reshape(*values.shape[:-1], values.shape[-1] // block, block)
    scales = (blocks.abs().amax(dim=-1) / FLOAT8_MAX[dtype]).to(torch.float32)
    divisor = torch.where(scales > 0, scales, torch.ones_like(scales)).to(torch.float64).unsqueeze(-1)
    codes = (blocks / divisor).to(torch.float32).to(TORCH_DTYPES[dtype])
    return codes.reshape(values.shape).contiguous(), scales.contiguous()


def output_specs(contract: Contract, case: Case, dtype: str) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {o.name: (evaluate_shape(o.shape, case.dims), resolve_dtype(o.dtype, dtype)) for o in contract.outputs}


def case_variants(contract: Contract, profile: ProfileName) -> list[tuple[Case, str, PartName]]:
    """(case, dtype, verification part) for every run the gate holds.

    Correctness cases run in every dtype the contract lists (the primary dtype is the `correctness` part,
    the others the `dtypes` part); edge cases run in the primary dtype.
    """
    variants: list[tuple[Case, str, PartName]] = []
    for case in contract.cases_for(profile):
        if case.kind == "edge":
            variants.append((case, contract.primary_dtype, "edge_cases"))
            continue
        for i, dtype in enumerate(contract.dtypes):
            variants.append((case, dtype, "correctness" if i == 0 else "dtypes"))
    return variants


def variant_id(case: Case, dtype: str) -> str:
    return f"{case.name}@{dtype}"


def tensor_content_sha256(tensor: torch.Tensor) -> str:
    """sha256 over a tensor's dtype, shape and bytes: how the gate's manifest pins each input."""
    digest = hashlib.sha256(f"{tensor.dtype}|{list(tensor.shape)}|".encode())
    flat = tensor.detach().contiguous().cpu().reshape(-1)
    if flat.numel():
        digest.update(flat.view(torch.uint8).numpy().data)  # the bytes in place: a copy of a 300 MB input costs ~0.1 s
    return digest.hexdigest()


def inputs_cache_of(gate: Path) -> Path:
    """Where the judge keeps the inputs of a gate's variants that are too large to store in it, once drawn:
    beside the gate (a gate folder holds only locked files), under the gates folder that is hidden from
    every process running candidate code. Each file is checked against the gate's content hashes whenever
    it is used, so the cache is as good as the lock, never trusted by itself."""
    return gate.parent / f"{gate.name}.cache"


CheckedInputs = dict[str, bytes]
"""A check's memo of the gate variants' inputs it read and checked against the lock (variant id -> their safetensors
bytes), in the judge's memory, which no candidate's process sees: the check's other uses of a variant (the timed
cases are wanted by the candidate's folder and by the timing pools, in two threads) take them from here instead of
reading and hashing them again (MLA: 640 MB, a second or more). Made anew for every check, so every check reads
and checks its inputs against the lock at least once."""


def prepare_inputs(
    contract: Contract, gate: Path, record: VariantRecord, target: Path, checked: CheckedInputs | None = None
) -> None:
    """A gate variant's inputs written to `target` (`input_bytes`; an input file the gate stores is copied)."""
    if record.inputs.stored and record.inputs.file is not None:
        shutil.copyfile(gate / record.inputs.file, target)
        return
    target.write_bytes(input_bytes(contract, gate, record, checked))


def input_bytes(contract: Contract, gate: Path, record: VariantRecord, checked: CheckedInputs | None = None) -> bytes:
    """A gate variant's inputs, serialized (safetensors): the gate's own file (covered by its lock), or (too large
    to store) the judge's cache of them, drawn again from their seed the first time and checked against the content
    hashes the manifest holds; a cached file that differs is tampering (GateTampered). `checked`: the check's memo
    (`CheckedInputs`), read from and filled."""
    if record.inputs.stored and record.inputs.file is not None:
        return (gate / record.inputs.file).read_bytes()
    cached = inputs_cache_of(gate) / f"{record.id}.safetensors"
    with _lock_for(cached):  # the check's threads (timing inputs, candidate inputs) may want one variant at once
        data = checked.get(record.id) if checked is not None else None
        if data is None:
            data = _read_cached_inputs(gate, record, cached)
        if data is None:
            data = _draw_checked(contract, record)
            _write_cached_inputs(cached, data)
        if checked is not None:
            checked[record.id] = data
    return data


_CACHE_LOCKS: dict[Path, threading.Lock] = {}
_CACHE_LOCKS_GUARD = threading.Lock()


def _lock_for(cached: Path) -> threading.Lock:
    """One lock per cached file in this process: the first thread draws a large variant, the others wait and
    read it (drawing it twice cost seconds, and both moving a temporary file of one name into place raced)."""
    with _CACHE_LOCKS_GUARD:
        return _CACHE_LOCKS.setdefault(cached, threading.Lock())


def _draw_checked(contract: Contract, record: VariantRecord) -> bytes:
    """The variant's inputs drawn again from their seed, checked against the manifest, serialized."""
    from ferret.errors import JudgeError

    # The gate's own case: a case of the other profile may have the same name, not the same dims and seed.
    case = next(
        c
        for c in contract.cases_for("gpu") + contract.cases_for("cpu")
        if c.name == record.case and c.dims == record.dims and c.seed == record.seed
    )
    inputs = draw_inputs(contract, case, record.dtype)
    for name, tensor in inputs.items():
        if tensor_content_sha256(tensor) != record.inputs.content_sha256[name]:
            raise JudgeError(f"regenerated input {record.id}/{name} differs from the gate's content hash")
    return save(inputs)


def _read_cached_inputs(gate: Path, record: VariantRecord, cached: Path) -> bytes | None:
    """The cached inputs' bytes if present and equal to the lock's content hashes (read once: what was
    checked is what is used); None if absent; GateTampered if they differ or cannot be read."""
    from ferret.errors import GateTampered

    try:
        data = cached.read_bytes()
    except FileNotFoundError:
        return None
    try:
        inputs = load(data)
    except Exception as err:  # noqa: BLE001 - any damage to the file is the finding
        raise GateTampered(
            gate, [f"{cached}: unreadable cached inputs ({type(err).__name__}); remove it to draw them again"]
        ) from None
    wanted = record.inputs.content_sha256
    differ = sorted(set(wanted) ^ set(inputs)) + sorted(
        n for n in set(wanted) & set(inputs) if tensor_content_sha256(inputs[n]) != wanted[n]
    )
    if differ:
        raise GateTampered(
            gate, [f"{cached}: cached inputs {differ} differ from the gate's content hashes; remove it to draw them again"]
        )
    return data


def _write_cached_inputs(cached: Path, data: bytes) -> None:
    """Written whole or not at all (a temporary file moved into place), read-only, by the judge's process
    before any candidate's process of this check starts."""
    cached.parent.mkdir(mode=0o700, exist_ok=True)
    temporary = cached.parent / f".{cached.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    temporary.unlink(missing_ok=True)  # left read-only by an earlier process of this id that was killed
    temporary.write_bytes(data)
    temporary.chmod(0o400)
    os.replace(temporary, cached)
