"""The audit's checks on a Ray cluster (`ferret gate audit --ray auto|ADDRESS`; the optional extra `ferret[ray]`).

Each slot is a Ray actor holding one CPU (CPU profile) or one GPU (GPU profile) that serves items one at a time, as a
local worker process does (`ferret/audit/pool.py`), and time-boxes them the same way: an item past its time-box
ends its actor and a fresh one takes the next. What crosses to a worker: the `WorkerSetup`, each candidate's source
(`Candidate`), and, only where the worker's host lacks them, the gate's locked files and the independent cases
(`ferret.audit.remote_gate.Files`); what comes back is a `Checked` record naming the worker. A worker verifies the
gate against the hash the auditor trusts before it judges anything (`accept_gate`). An actor that dies mid-check is
restarted, on any node with room, and the check retried (`RETRIES`); results are written by the caller as they come,
so a run whose workers all went away continues with `--resume`.

Only this module imports Ray, and only `--ray` imports this module.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ray
from ray.actor import ActorHandle
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from ferret.audit.pool import Item, ItemResult, Outcome, WorkerSetup
from ferret.audit.remote_gate import Files, accept_gate, files_of, gate_files, write_files
from ferret.errors import GateTampered, JudgeError
from ferret.progress import ProgressLike, as_reporter

RETRIES = 2  # restarts of an actor that died, each retrying the check it was running
SETUP_TIMEOUT_S = 900.0  # a worker's start: importing torch, writing and verifying the gate, building the judge


@dataclass(frozen=True)
class Candidate:
    """A file to check, by value: the worker may be on a host that cannot see the auditor's folder."""

    id: str
    name: str
    source: str


@dataclass(frozen=True)
class Refusal:
    """Why a worker will not check anything: its gate is not the trusted one (`gate_dir` set), or its setup failed."""

    problems: list[str]
    gate_dir: str | None = None

    def error(self, worker: str) -> Exception:
        if self.gate_dir is not None:
            return GateTampered(Path(self.gate_dir), [f"on Ray worker {worker}", *self.problems])
        return JudgeError(f"Ray worker {worker} could not set up: {'; '.join(self.problems)}")


@dataclass(frozen=True)
class Checked:
    """A worker's answer: its name, and the item's result, or why it refused."""

    worker: str
    result: ItemResult | None = None
    refusal: Refusal | None = None


def worker_name() -> str:
    context = ray.get_runtime_context()
    return (
        f"ray node {context.get_node_id()[:12]} worker {context.get_worker_id()[:12]} on {socket.gethostname()} pid {os.getpid()}"
    )


def _local_setup(setup: WorkerSetup, shipped: Callable[[], Files], folder: Path) -> WorkerSetup:
    """The setup as this host can run it: the cases written here if it lacks them, the trusted gate accepted."""
    if setup.mode == "classify" and setup.cases is not None and not Path(setup.cases).is_dir():
        write_files(shipped(), folder / "cases")
        return setup.model_copy(update={"cases": str(folder / "cases")})
    if setup.mode != "classify" and setup.gate_hash is not None:
        accept_gate(Path(setup.gates_dir or "gates"), setup.gate_hash, shipped)
    return setup


class _Checker:
    """One Ray worker's state: the handler of `ferret/audit/worker.py`, made once; constructed again (and so the gate
    verified again) whenever Ray restarts the actor."""

    def __init__(self, setup: WorkerSetup, shipped: list):
        from ferret.audit.worker import handler  # torch and the judge, in the worker's process only

        os.environ.update(setup.env)
        self.name = worker_name()
        self.folder = Path(tempfile.mkdtemp(prefix="ferret-ray-"))
        self.refusal: Refusal | None = None
        try:
            self.handle = handler(_local_setup(setup, lambda: ray.get(shipped[0]), self.folder))
        except GateTampered as err:
            self.refusal = Refusal(err.problems, str(err.gate_dir))
        except Exception as err:  # noqa: BLE001 - said to the auditor, which stops: no check could run here
            self.refusal = Refusal([f"{type(err).__name__}: {err}"])

    def open(self) -> Checked:
        return Checked(self.name, refusal=self.refusal)

    def check(self, candidate: Candidate) -> Checked:
        if self.refusal is not None:
            return Checked(self.name, refusal=self.refusal)
        path = self.folder / candidate.id / candidate.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(candidate.source)
        try:
            return Checked(self.name, result=self.handle(candidate.id, path))
        finally:
            shutil.rmtree(path.parent, ignore_errors=True)  # hundreds of mutants: none is kept on the worker's disk


def connect(address: str, cpus: int) -> bool:
    """Ray, connected: `auto` joins a running cluster, or starts one here with `cpus` CPUs when there is none;
    otherwise the cluster at `address`. Returns whether this process started it (and so ends it)."""
    if ray.is_initialized():
        return False
    if address != "auto":
        ray.init(address=address, log_to_driver=False)
        return False
    try:
        ray.init(address="auto", log_to_driver=False)
        return False
    except ConnectionError:
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        return True


@dataclass(frozen=True)
class RayPool:
    """An `Executor` whose workers are Ray actors. `gate`: the auditor's verified gate (its files travel to hosts
    that lack it)."""

    gpu: bool
    gate: Path
    started: bool = False
    retries: int = RETRIES

    @classmethod
    def connect(cls, address: str, cpus: int, gpu: bool, gate: Path, progress: ProgressLike = None) -> RayPool:
        started = connect(address, cpus)
        pool = cls(gpu, gate, started)
        as_reporter(progress)(
            f"Ray: {pool.capacity()} {'GPU' if gpu else 'CPU'} workers ({'started here' if started else address})"
        )
        return pool

    @property
    def resource(self) -> str:
        return "GPU" if self.gpu else "CPU"

    def capacity(self) -> int:
        return max(1, int(ray.cluster_resources().get(self.resource, 1)))

    def close(self) -> None:
        if self.started:
            ray.shutdown()

    def _actor(self, setup: WorkerSetup, shipped: list) -> ActorHandle:
        options: dict = {"num_cpus": 1, "num_gpus": 1 if self.gpu else 0, "max_restarts": self.retries}
        options["max_task_retries"] = self.retries
        if setup.env:
            options["runtime_env"] = {"env_vars": dict(setup.env)}
        return ray.remote(_Checker).options(**options).remote(setup, shipped)  # pyright: ignore[reportReturnType]

    def _shipped(self, setup: WorkerSetup) -> list:
        """The files a worker needs and its host may lack, put in Ray's object store once; inside a list, so that a
        worker fetches them only if it needs them."""
        if setup.mode != "classify":
            return [ray.put(gate_files(self.gate))]
        return [ray.put(files_of(Path(setup.cases)) if setup.cases else Files({}))]

    def serve(
        self, setup: WorkerSetup, items: list[Item], timeout_s: float, results: Path, on_result: Callable[[Outcome], None]
    ) -> None:
        """Every item on a slot of the cluster; `on_result` in the calling thread as each outcome comes. A refused
        gate stops the whole step: GateTampered, naming the trusted hash and the worker."""
        if not items:
            return
        shipped = self._shipped(setup)
        todo: queue.Queue[Item] = queue.Queue()
        for item in items:
            todo.put(item)
        done: queue.Queue[Outcome | BaseException | None] = queue.Queue()
        stop = threading.Event()
        slots = min(len(items), self.capacity())
        for _ in range(slots):
            threading.Thread(target=self._work, args=(setup, shipped, todo, done, stop, timeout_s), daemon=True).start()
        running = slots
        while running:
            got = done.get()
            if got is None:
                running -= 1
            elif isinstance(got, BaseException):
                stop.set()
                raise got
            else:
                on_result(got)

    def _work(self, setup, shipped, todo: queue.Queue[Item], done: queue.Queue, stop: threading.Event, timeout_s) -> None:
        actor, name = None, ""
        try:
            while not stop.is_set():
                try:
                    item = todo.get_nowait()
                except queue.Empty:
                    return
                if actor is None:
                    actor, name = self._opened(self._actor(setup, shipped))
                outcome = self._serve_one(actor, name, item, timeout_s)
                if outcome.result is None:  # an actor that timed out or died for good serves nothing more
                    ray.kill(actor, no_restart=True)
                    actor = None
                done.put(outcome)
        except BaseException as err:  # noqa: BLE001 - handed to the calling thread, which raises it
            done.put(err)
        finally:
            if actor is not None:
                ray.kill(actor, no_restart=True)
            done.put(None)

    def _opened(self, actor: ActorHandle) -> tuple[ActorHandle, str]:
        """The actor and its worker's name, once it is set up; its refusal raised."""
        try:
            opened: Checked = ray.get(actor.open.remote(), timeout=SETUP_TIMEOUT_S)
        except GetTimeoutError:
            ray.kill(actor, no_restart=True)
            raise JudgeError(
                f"no Ray worker with a {self.resource} was set up within {SETUP_TIMEOUT_S:.0f} s "
                f"(the cluster has {ray.available_resources().get(self.resource, 0)} free)"
            ) from None
        if opened.refusal is not None:
            ray.kill(actor, no_restart=True)
            raise opened.refusal.error(opened.worker)
        return actor, opened.worker

    def _serve_one(self, actor, name: str, item: Item, timeout_s: float) -> Outcome:
        candidate = Candidate(item.id, item.path.name, item.path.read_text())
        try:
            checked: Checked = ray.get(actor.check.remote(candidate), timeout=timeout_s)
        except GetTimeoutError:
            return Outcome(item, None, f"no answer within {timeout_s:.0f} s", timed_out=True, worker=name)
        except RayActorError as err:
            if ray.cluster_resources().get(self.resource, 0) < 1:
                # No result, so none is written: a resumed run checks this item again.
                raise JudgeError(
                    f"every Ray worker with a {self.resource} went away while {item.id} was checked; the results so far "
                    "are written: continue with --resume"
                ) from err
            tries = self.retries + 1
            return Outcome(
                item, None, f"the Ray worker died, {tries} times (restarted and retried): {str(err)[:300]}", worker=name
            )
        except RayTaskError as err:
            return Outcome(item, None, f"the Ray worker failed: {str(err)[-500:]}", worker=name)
        if checked.refusal is not None:  # a restarted actor whose gate no longer matches
            raise checked.refusal.error(checked.worker)
        return Outcome(item, checked.result, worker=checked.worker)
