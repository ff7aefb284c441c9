"""The audit's checks on a local Ray cluster of 2 CPUs (`ferret gate audit --ray auto`): the same classes and
verdicts as the local pool, each judgement naming the Ray worker that gave it; a worker killed mid-check has its
check retried on a fresh worker; a worker holding a gate that is not the trusted one is refused, naming the hash."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from ferret_testkit import copy_gate, flip_byte, ray_alone  # noqa: E402

from ferret.audit.classify import plan_independent, write_cases  # noqa: E402
from ferret.audit.models import MutantResult  # noqa: E402
from ferret.audit.pool import Item, WorkerSetup  # noqa: E402
from ferret.audit.ray_pool import RayPool  # noqa: E402
from ferret.audit.remote_gate import accept_gate, gate_files  # noqa: E402
from ferret.audit.run import AuditOptions, run_audit  # noqa: E402
from ferret.contract.task import Task  # noqa: E402
from ferret.errors import GateTampered  # noqa: E402
from ferret.gate.lock import MANIFEST_FILE, canonical_json, gate_hash, sha256_file, verify_gate  # noqa: E402
from ferret.gate.trust import is_trusted  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RMSNORM = REPO / "contracts" / "rmsnorm.yaml"
HONEST = REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py"


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for the module: `--ray auto` joins it (and so leaves it running)."""
    with ray_alone():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        yield
        ray.shutdown()


def _results(gates: Path, record) -> dict[str, MutantResult]:
    (folder,) = (gates / record.gate_hash / "audit").iterdir()
    lines = (folder / "results.jsonl").read_text().splitlines()
    return {r.mutant.id: r for r in (MutantResult.model_validate_json(line) for line in lines)}


@pytest.fixture(scope="module")
def both(cluster, tmp_path_factory):
    """The same reduced audit (one gate), once on the local pool and once on the cluster."""
    gates = tmp_path_factory.mktemp("ray-gates")
    options = AuditOptions(
        gates_dir=gates, profile="cpu", budget=4, jobs=2, rounds=1, honest_checks=1, operators=("drop_term", "cast16")
    )
    serial = run_audit(RMSNORM, options)
    serial_results = _results(gates, serial)
    on_ray = run_audit(RMSNORM, replace(options, ray="auto"))
    return (serial, serial_results), (on_ray, _results(gates, on_ray)), gates


def test_ray_workers_class_and_judge_as_the_local_pool_and_are_named(both):
    (serial, serial_results), (on_ray, ray_results), _ = both
    assert ray.is_initialized()  # joined the module's cluster, did not end it

    def said(results: dict[str, MutantResult]) -> dict[str, tuple]:
        return {
            k: (
                r.classification.kind,
                r.judgement and (r.judgement.killed, r.judgement.caught_by, r.judgement.first_failing_stage),
            )
            for k, r in results.items()
        }

    assert said(ray_results) == said(serial_results)
    assert on_ray.harmful >= 1 and on_ray.killed == serial.killed and on_ray.benign == serial.benign
    assert (on_ray.mutation_score, on_ray.caught) == (serial.mutation_score, serial.caught)
    harmful = {k for k, r in ray_results.items() if r.classification.kind == "harmful"}
    assert set(on_ray.judged_by) == harmful == set(serial.judged_by)
    assert all(w.startswith("ray node ") and " worker " in w and " pid " in w for w in on_ray.judged_by.values())
    assert all(w.startswith("local ") for w in serial.judged_by.values())


def test_a_worker_killed_mid_check_has_its_check_retried_on_a_fresh_worker(cluster, tmp_path):
    task = Task.load(RMSNORM)
    write_cases(task, plan_independent(task, "cpu", seed=3, rounds=1)[:1], tmp_path / "cases", "cpu")
    marker = tmp_path / "first-attempt"
    dies_once = tmp_path / "dies_once.py"
    # A stand-in item: its first attempt ends the worker's process (as a crash or the OOM killer would); the retry
    # finds the marker and is the honest candidate.
    dies_once.write_text(
        "import importlib.util, os\n"
        f"if not os.path.exists({str(marker)!r}):\n"
        f"    open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
        "    os._exit(1)\n"
        f"spec = importlib.util.spec_from_file_location('honest_rmsnorm', {str(HONEST)!r})\n"
        "honest = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(honest)\n"
        "run = honest.run\n"
    )
    setup = WorkerSetup(
        mode="classify", contract=str(RMSNORM), device="cpu", cases=str(tmp_path / "cases"), env={"TRITON_INTERPRET": "1"}
    )
    outcomes = []
    RayPool(gpu=False, gate=tmp_path).serve(setup, [Item("dies-once", dies_once)], 300.0, tmp_path / "out", outcomes.append)
    (outcome,) = outcomes
    assert isinstance(outcome.result, list), outcome.failure
    assert outcome.result[0].raised is None and all(s.passed for s in outcome.result[0].stages)
    assert marker.is_file() and f" pid {marker.read_text()}" not in outcome.worker and outcome.worker.startswith("ray node ")


def _forged_whole(gate: Path, into: Path) -> Path:
    """A copy of `gate` under its own name with one golden file changed and the manifest rewritten to match: consistent
    with itself, but its manifest no longer hashes to the name."""
    forged = copy_gate(gate, into)
    manifest = json.loads((forged / MANIFEST_FILE).read_text())
    golden = next(name for name in manifest["files"] if name.endswith(".safetensors"))
    flip_byte(forged / golden)
    manifest["files"][golden] = sha256_file(forged / golden)
    (forged / MANIFEST_FILE).chmod(0o644)
    (forged / MANIFEST_FILE).write_bytes(canonical_json(manifest))
    verify_gate(forged, expected_hash=gate_hash((forged / MANIFEST_FILE).read_bytes()))  # self-verification: passes
    return forged


def test_a_worker_holding_a_gate_forged_whole_is_refused_naming_the_trusted_hash(both, tmp_path):
    (serial, _), _, gates = both
    trusted = serial.gate_hash
    _forged_whole(gates / trusted, tmp_path / "worker-gates")
    setup = WorkerSetup(
        mode="judge",
        contract=str(RMSNORM),
        device="cpu",
        gates_dir=str(tmp_path / "worker-gates"),
        profile="cpu",
        gate_hash=trusted,
        env={"TRITON_INTERPRET": "1"},
    )
    outcomes = []
    with pytest.raises(GateTampered) as refused:
        RayPool(gpu=False, gate=gates / trusted).serve(setup, [Item("honest", HONEST)], 300.0, tmp_path / "out", outcomes.append)
    said = str(refused.value)
    assert f"the auditor trusts gate {trusted}" in said and "on Ray worker ray node " in said
    assert "does not match the gate's hash" in said and outcomes == []


def test_a_host_without_the_gate_writes_the_shipped_files_and_trusts_only_the_auditors_hash(both, tmp_path, monkeypatch):
    (serial, _), _, gates = both
    trusted = serial.gate_hash
    monkeypatch.setenv("FERRET_TRUST_DIR", str(tmp_path / "worker-trust"))  # another host's registry: empty
    assert not is_trusted(trusted)
    accepted = accept_gate(tmp_path / "worker-gates", trusted, lambda: gate_files(gates / trusted))
    assert accepted == tmp_path / "worker-gates" / trusted and is_trusted(trusted)
    verify_gate(accepted, require_trusted=True)
    forged = _forged_whole(gates / trusted, tmp_path / "forged-gates")
    with pytest.raises(GateTampered, match=f"the auditor trusts gate {trusted}"):
        accept_gate(tmp_path / "forged-gates", trusted, lambda: gate_files(forged))


def test_a_hanging_item_on_ray_is_time_boxed_and_the_other_still_judged(cluster, tmp_path):
    task = Task.load(RMSNORM)
    write_cases(task, plan_independent(task, "cpu", seed=3, rounds=1)[:1], tmp_path / "cases", "cpu")
    hang = tmp_path / "hang.py"
    hang.write_text("def run(inputs, outputs, params, trace=None):\n    while True:\n        pass\n")
    setup = WorkerSetup(
        mode="classify", contract=str(RMSNORM), device="cpu", cases=str(tmp_path / "cases"), env={"TRITON_INTERPRET": "1"}
    )
    outcomes = []
    items = [Item("hang", hang), Item("honest", HONEST)]
    RayPool(gpu=False, gate=tmp_path).serve(setup, items, 20.0, tmp_path / "out", outcomes.append)
    by_id = {o.item.id: o for o in outcomes}
    assert by_id["hang"].result is None and by_id["hang"].timed_out and "no answer within 20 s" in by_id["hang"].failure
    honest = by_id["honest"].result
    assert isinstance(honest, list) and honest[0].raised is None and all(s.passed for s in honest[0].stages)


@pytest.mark.parametrize(
    "address,running,started,called",
    [
        ("auto", False, True, [{"address": "auto"}, {"num_cpus": 3}]),  # none running: one started here, --jobs CPUs
        ("auto", True, False, [{"address": "auto"}]),
        ("ray://head:10001", True, False, [{"address": "ray://head:10001"}]),
    ],
)
def test_auto_joins_a_running_cluster_or_starts_one_with_the_jobs_cpus(monkeypatch, address, running, started, called):
    from ferret.audit import ray_pool

    calls = []

    def init(**kwargs):
        calls.append({k: v for k, v in kwargs.items() if k in ("address", "num_cpus")})
        if kwargs.get("address") == "auto" and not running:
            raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray_pool.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_pool.ray, "init", init)
    assert ray_pool.connect(address, cpus=3) is started
    assert calls == called
