"""Inputs too large to store in a gate: drawn again from their seed once per gate, kept in the judge's
cache beside it, and checked against the gate's content hashes every time they are used. A cache that
differs from the lock is refused as tampering."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import RMSNORM_CONTRACT, TRITON_RMSNORM, copy_gate, flip_byte  # noqa: E402

import ferret.gate.build as build  # noqa: E402
import ferret.gate.inputs as inputs  # noqa: E402
from ferret.contract.task import Task  # noqa: E402
from ferret.errors import GateTampered  # noqa: E402
from ferret.gate.isolation import hidden_from_candidates  # noqa: E402
from ferret.gate.judge import Judge  # noqa: E402
from ferret.gate.models import GateManifest  # noqa: E402


@pytest.fixture(scope="module")
def unstored_gate(tmp_path_factory) -> Path:
    """An rmsnorm gate that stores no inputs (as a GPU gate does for its largest cases)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build, "STORE_INPUTS_MAX_BYTES", 0)
        return build.build_gate(RMSNORM_CONTRACT, gates_dir=tmp_path_factory.mktemp("unstored-gates"), profile="cpu")


@pytest.fixture
def gate(unstored_gate, tmp_path) -> Path:
    """A copy of it with a cache of its own."""
    return copy_gate(unstored_gate, tmp_path / "gates")


def _first(gate: Path):
    manifest = GateManifest.model_validate_json((gate / "manifest.json").read_text())
    record = manifest.variants[0]
    assert not record.inputs.stored and record.inputs.file is None
    return Task.load(RMSNORM_CONTRACT).contract, record


def _cache_of(gate: Path, record) -> Path:
    return inputs.inputs_cache_of(gate) / f"{record.id}.safetensors"


def test_large_inputs_are_drawn_once_per_gate_then_read_from_the_cache(gate, tmp_path, monkeypatch):
    contract, record = _first(gate)
    inputs.prepare_inputs(contract, gate, record, tmp_path / "first.safetensors")
    cached = _cache_of(gate, record)
    assert cached.is_file() and cached.stat().st_mode & 0o777 == 0o400
    assert not (gate / cached.name).exists(), "the cache is beside the gate, never inside its lock"
    drawn = inputs.draw_inputs(contract, next(c for c in contract.cases.cpu if c.name == record.case), record.dtype)
    first = load_file(str(tmp_path / "first.safetensors"))
    assert first.keys() == drawn.keys() and all(first[n].equal(drawn[n]) for n in drawn)

    def no_drawing(*args, **kwargs):
        raise AssertionError("drawn again although the cache holds them")

    monkeypatch.setattr(inputs, "draw_inputs", no_drawing)
    inputs.prepare_inputs(contract, gate, record, tmp_path / "second.safetensors")
    assert (tmp_path / "second.safetensors").read_bytes() == (tmp_path / "first.safetensors").read_bytes()


def test_two_threads_wanting_one_uncached_variant_draw_it_once(gate, tmp_path, monkeypatch):
    """A check prepares the timed inputs in a thread beside the candidate's inputs: on a cold gate both wanted
    one large variant at once, and the second move of a temporary file of the same name into place failed (H200,
    2026-12-01: a cold MLA check exited 2). The first thread draws it; the other waits and reads it."""
    import threading

    contract, record = _first(gate)
    draws, real_draw = [], inputs.draw_inputs
    both_started = threading.Barrier(2, timeout=10)

    def slow_draw(*args, **kwargs):
        draws.append(threading.get_ident())
        return real_draw(*args, **kwargs)

    monkeypatch.setattr(inputs, "draw_inputs", slow_draw)
    failures: list[BaseException] = []

    def prepare(name: str) -> None:
        both_started.wait()
        try:
            inputs.prepare_inputs(contract, gate, record, tmp_path / name)
        except BaseException as err:  # noqa: BLE001 - reported below
            failures.append(err)

    threads = [threading.Thread(target=prepare, args=(f"{k}.safetensors",)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [] and len(draws) == 1
    assert (tmp_path / "0.safetensors").read_bytes() == (tmp_path / "1.safetensors").read_bytes()
    assert not list(_cache_of(gate, record).parent.glob(".*.tmp")), "no temporary file left behind"


def _tampered(gate: Path, tmp_path: Path) -> GateTampered:
    contract, record = _first(gate)
    with pytest.raises(GateTampered) as info:
        inputs.prepare_inputs(contract, gate, record, tmp_path / "target.safetensors")
    assert str(_cache_of(gate, record)) in str(info.value)
    assert not (tmp_path / "target.safetensors").exists(), "nothing is handed on from a refused cache"
    return info.value


def test_a_changed_byte_in_the_cache_is_tampering(gate, tmp_path):
    contract, record = _first(gate)
    inputs.prepare_inputs(contract, gate, record, tmp_path / "first.safetensors")
    cached = _cache_of(gate, record)
    flip_byte(cached, cached.stat().st_size - 1)  # the last byte: tensor data, not the header
    assert "differ from the gate's content hashes" in str(_tampered(gate, tmp_path))


def test_an_unreadable_cache_is_tampering(gate, tmp_path):
    _, record = _first(gate)
    cached = _cache_of(gate, record)
    cached.parent.mkdir()
    cached.write_bytes(b"not a safetensors file")
    assert "unreadable cached inputs" in str(_tampered(gate, tmp_path))


def test_a_cache_with_an_input_missing_or_added_is_tampering(gate, tmp_path):
    contract, record = _first(gate)
    inputs.prepare_inputs(contract, gate, record, tmp_path / "first.safetensors")
    cached = _cache_of(gate, record)
    tensors = load_file(str(cached))
    cached.chmod(0o600)
    save_file({"x": tensors["x"], "extra": tensors["x"].clone()}, str(cached))
    problem = str(_tampered(gate, tmp_path))
    assert "'extra'" in problem and "'weight'" in problem


def test_the_cache_is_hidden_from_candidates_with_the_gates_folder(gate):
    hidden = hidden_from_candidates(gate, RMSNORM_CONTRACT.parents[1])
    assert any(inputs.inputs_cache_of(gate).resolve().is_relative_to(folder) for folder in hidden)


def test_checks_on_a_gate_without_stored_inputs_draw_them_once(gate, monkeypatch):
    judge = Judge(Task.load(RMSNORM_CONTRACT), gate.parent, "cpu")
    assert judge.gate == gate
    assert judge.check(TRITON_RMSNORM, run_stress=False).passed
    cache = inputs.inputs_cache_of(gate)
    assert sorted(p.name for p in cache.iterdir()) == sorted(f"{r.id}.safetensors" for r in judge.manifest.variants)
    # The next check reads them from the cache (the fresh private cases are still drawn anew).
    monkeypatch.setattr(inputs, "draw_inputs", lambda *a, **k: pytest.fail("drawn again"))
    assert judge.check(TRITON_RMSNORM, run_stress=False).passed


def test_a_contracts_layout_arranges_the_drawn_inputs_after_the_edits(tmp_path):
    """`layout` (Contract.layout): a task function called on every drawn case after its edits, with a generator
    seeded from the case's seed: here it writes the permutation that sorts x's rows by their first entry."""
    import torch
    import yaml

    from ferret.contract.load import load_contract
    from ferret.contract.model import Edit

    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "__init__.py").write_text("")
    # a top-level module of its own: the project's `tasks` package may already be imported in this process
    (tmp_path / "layout_probe_task.py").write_text(
        "import torch\n\n"
        "def arrange(inputs, dims, generator):\n"
        "    inputs['order'].copy_(torch.argsort(inputs['x'][:, 0]).to(inputs['order'].dtype))\n"
        "    inputs['noise'].copy_(torch.rand(inputs['noise'].shape, generator=generator))\n"
    )
    data = yaml.safe_load(RMSNORM_CONTRACT.read_text())
    data["inputs"] += [
        {"name": "order", "shape": ["M"], "dtype": "int64", "distribution": {"kind": "constant", "value": 0}},
        {"name": "noise", "shape": [2], "dtype": "float32", "distribution": {"kind": "constant", "value": 0}},
    ]
    data["layout"] = {"entry": "layout_probe_task:arrange"}
    data["tolerances"] = str(RMSNORM_CONTRACT.with_name(data["tolerances"]))
    (tmp_path / "contracts").mkdir()
    path = tmp_path / "contracts" / "probe.yaml"
    path.write_text(yaml.safe_dump(data))
    contract = load_contract(path)
    case = contract.cases_for("cpu")[0].model_copy(update={"edits": []})
    edited = case.model_copy(update={"edits": [Edit(input="x", set="value", at=[[0, 0]], value=99)]})
    drawn, again, moved = (inputs.draw_inputs(contract, c, "float32") for c in (case, case, edited))
    assert torch.equal(drawn["order"], torch.argsort(drawn["x"][:, 0]))
    assert int(moved["order"][-1]) == 0  # the edit came first: row 0's 99 sorts last
    assert torch.equal(drawn["noise"], again["noise"]) and bool((drawn["noise"] > 0).all())
    from ferret.gate.lock import contract_entry_modules

    assert "layout_probe_task" in contract_entry_modules(contract)  # the gate's lock covers the layout's code


def test_opposing_halves_cancel_along_the_axis_while_each_half_stays_large():
    """`set: opposing_halves`: along its axis, the first half's absolute values, then their negation position by
    position, an odd length's last entry 0; other inputs and other axes keep their drawn values."""
    import torch

    from ferret.contract.load import load_contract
    from ferret.contract.model import Edit

    contract = load_contract(RMSNORM_CONTRACT)
    case = contract.cases_for("cpu")[0]
    for axis in (0, -1):
        edited = case.model_copy(update={"edits": [Edit(input="x", set="opposing_halves", axis=axis)]})
        plain, drawn = inputs.draw_inputs(contract, case, "float32"), inputs.draw_inputs(contract, edited, "float32")
        x = drawn["x"].double()
        length = x.shape[axis]
        half = length // 2
        first, second = x.narrow(axis, 0, half), x.narrow(axis, half, half)
        assert torch.equal(first, plain["x"].double().narrow(axis, 0, half).abs())
        assert torch.equal(second, -first)
        if length % 2:
            assert not x.narrow(axis, length - 1, 1).any()
        assert x.sum(dim=axis).abs().max() == 0
        assert first.sum(dim=axis).abs().min() > 0
        assert torch.equal(drawn["weight"], plain["weight"])
    odd = case.model_copy(
        update={
            "dims": {**case.dims, "M": 2 * (case.dims["M"] // 2) + 1},
            "edits": [Edit(input="x", set="opposing_halves", axis=0)],
        }
    )
    x = inputs.draw_inputs(contract, odd, "float32")["x"]
    assert x.shape[0] % 2 == 1 and not x[-1].any() and x.double().sum(dim=0).abs().max() == 0


@pytest.mark.parametrize(
    "tensor",
    [
        torch.randn(3, 5, dtype=torch.float64).to(torch.bfloat16),
        torch.randn(4, 6)[:, ::2],  # not contiguous
        torch.tensor([True, False, True]),
        torch.arange(7, dtype=torch.int64),
        torch.empty(0, 3, dtype=torch.float16),
        torch.tensor(2.5),
    ],
    ids=["bfloat16", "strided", "bool", "int64", "empty", "scalar"],
)
def test_a_tensors_content_hash_is_sha256_of_its_dtype_shape_and_bytes(tensor):
    """The gate's manifest pins every input by this digest: however it is computed, it stays this one."""
    flat = tensor.contiguous().reshape(-1)
    wanted = hashlib.sha256(
        f"{tensor.dtype}|{list(tensor.shape)}|".encode() + (flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    ).hexdigest()
    assert inputs.tensor_content_sha256(tensor) == wanted


def test_a_check_reads_and_checks_a_cached_variant_once_and_every_check_does(gate, tmp_path, monkeypatch):
    """The check's memo (`CheckedInputs`) gives a variant's checked bytes to its second user (the timing pools
    beside the candidate's folder); a new check, with a new memo, reads and checks them against the lock again."""
    contract, record = _first(gate)
    inputs.prepare_inputs(contract, gate, record, tmp_path / "drawn.safetensors")  # the cache drawn
    reads = []
    real_read = inputs._read_cached_inputs
    monkeypatch.setattr(inputs, "_read_cached_inputs", lambda *args: reads.append(1) or real_read(*args))
    check: inputs.CheckedInputs = {}
    inputs.prepare_inputs(contract, gate, record, tmp_path / "candidate.safetensors", check)
    again = inputs.input_bytes(contract, gate, record, check)
    assert len(reads) == 1 and again == (tmp_path / "candidate.safetensors").read_bytes()
    flip_byte(_cache_of(gate, record))
    assert inputs.input_bytes(contract, gate, record, check) == again  # the judge's memory, not the file
    with pytest.raises(GateTampered):
        inputs.input_bytes(contract, gate, record, {})  # the next check reads the file: the change is found


@pytest.mark.parametrize(
    "distribution", [{"kind": "normal", "std": 1.5, "mean": 0.25}, {"kind": "uniform", "low": 0.5, "high": 1.5}]
)
def test_a_draw_is_bitwise_the_scaled_stream_of_its_seed(distribution):
    """The gates' content hashes pin every drawn input: a draw stays `x * scale + offset` over the seed's float64
    stream, however it is computed."""
    from ferret.contract.model import Input

    spec = Input.model_validate({"name": "x", "shape": [64, 33], "dtype": "float32", "distribution": distribution})
    drawn = inputs._draw(spec, (64, 33), {}, torch.Generator().manual_seed(7))
    stream = torch.Generator().manual_seed(7)
    if distribution["kind"] == "normal":
        wanted = torch.randn((64, 33), generator=stream, dtype=torch.float64) * 1.5 + 0.25
    else:
        wanted = torch.rand((64, 33), generator=stream, dtype=torch.float64) * (1.5 - 0.5) + 0.5
    assert torch.equal(drawn.view(torch.int64), wanted.view(torch.int64))
