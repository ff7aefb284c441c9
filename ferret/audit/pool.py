"""Where checks run (an audit's mutants, a dispatch's round with `--gpus` or `--ray`): an `Executor` serves items (a
candidate file each) to workers set up alike (`WorkerSetup`), one typed `Outcome` per item. `LocalPool`, the
default, is `--jobs` processes of `python -m ferret.audit.worker` on this machine (or one per GPU), fed over stdin,
answering through one result file per item; `ferret/audit/ray_pool.py` sends them to a Ray cluster instead (and is
imported only when asked for).

A worker imports torch (and Triton, or builds a Judge) once and then serves many items: a process per mutant paid
that start every time. An item that runs past its time-box, or a worker that dies, ends that worker's whole process
group; the item is reported as such, with the independent cases it had finished (a classifying worker says each as it
ends: `CASE`), and a fresh worker takes the next one. A result is reported the moment it comes
(`on_result`), so the caller can write it down before the next one starts.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ferret.audit.models import CaseError, Judgement
from ferret.errors import UsageError
from ferret.gate.models import Verdict
from ferret.sandbox.children import kill_group, start_group

DONE = "FERRET_AUDIT_DONE "  # a worker's line when an item's result file is written; other lines are the item's own prints
CASE = "FERRET_AUDIT_CASE "  # a classifying worker's line as each case ends: the item id, then that case's CaseError


@dataclass(frozen=True)
class Item:
    id: str
    path: Path


class CheckResult(BaseModel):
    """`verdict` mode: the whole verdict, or why there is none (`tampered` and `machine_fault` stop a dispatch, as
    the same errors raised by its own judge would)."""

    model_config = ConfigDict(extra="forbid")

    verdict: Verdict | None = None
    error: str | None = None
    error_kind: Literal["tampered", "machine_fault", "error"] | None = None


ItemResult = list[CaseError] | Judgement | CheckResult
"""`classify`: the item's error on each independent case; `judge`: what the gate said of it; `verdict`: a dispatch's
check of a candidate."""


class WorkerSetup(BaseModel):
    """What every worker of one step is given (the same for each item it serves)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["classify", "judge", "verdict"]
    contract: str = Field(description="The contract's path.")
    device: str
    cases: str | None = Field(default=None, description="classify: the independent cases' folder.")
    early_exit: bool = False
    gates_dir: str | None = None
    profile: str | None = None
    gate_hash: str | None = Field(
        default=None,
        description="judge, verdict: the gate the caller verified against its own trust registry; no other is used.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Added to the worker's environment.")


@dataclass(frozen=True)
class Outcome:
    """An item's result or, with `result` None, why there is none; `worker` names where it ran. `finished`: with no
    result, the independent cases a classifying worker had finished before it died or ran out of time."""

    item: Item
    result: ItemResult | None
    failure: str = ""
    timed_out: bool = False
    worker: str = ""
    finished: tuple[CaseError, ...] = ()


def result_json(result: ItemResult) -> str:
    if isinstance(result, (Judgement, CheckResult)):
        return result.model_dump_json()
    return json.dumps([e.model_dump(mode="json") for e in result])


def parse_result(mode: str, text: str) -> ItemResult:
    if mode == "judge":
        return Judgement.model_validate_json(text)
    if mode == "verdict":
        return CheckResult.model_validate_json(text)
    return [CaseError.model_validate(e) for e in json.loads(text)]


class Executor(Protocol):
    """Where checks run. `serve` calls `on_result` in the calling thread as each outcome comes, so that the caller
    writes it down before the next one; `close` gives back what the executor started."""

    def serve(
        self, setup: WorkerSetup, items: list[Item], timeout_s: float, results: Path, on_result: Callable[[Outcome], None]
    ) -> None: ...

    def close(self) -> None: ...


class _Worker:
    def __init__(self, argv: list[str], env: dict[str, str] | None, results: Path, device: str | None = None):
        self.device = device
        if device is not None:  # the worker and every process it starts see this GPU alone, as their device 0
            env = {**(env if env is not None else os.environ), "CUDA_VISIBLE_DEVICES": device}
        self.process = start_group(
            [sys.executable, "-m", "ferret.audit.worker", *argv, str(results)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, args=(self.process.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._keep_tail, daemon=True).start()

    @staticmethod
    def _read(stream, lines: queue.Queue[str | None]) -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    def _keep_tail(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr = (self.stderr + [line.rstrip("\n")])[-20:]

    def serve(self, item: Item, timeout_s: float, results: Path, mode: str) -> Outcome:
        assert self.process.stdin is not None
        name = f"local {socket.gethostname()} pid {self.process.pid}" + (f" gpu {self.device}" if self.device else "")
        try:
            self.process.stdin.write(json.dumps({"id": item.id, "path": str(item.path)}) + "\n")
            self.process.stdin.flush()
        except OSError:
            return Outcome(item, None, f"the worker had ended: {' | '.join(self.stderr[-5:])}", worker=name)
        deadline = time.monotonic() + timeout_s
        finished: list[CaseError] = []
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                failure = f"no answer within {timeout_s:.0f} s"
                return Outcome(item, None, failure, timed_out=True, worker=name, finished=tuple(finished))
            if line is None:
                time.sleep(0.2)  # its stderr's last lines
                failure = f"the worker died: {' | '.join(self.stderr[-5:])}"
                return Outcome(item, None, failure, worker=name, finished=tuple(finished))
            if line == DONE + item.id:
                return Outcome(item, parse_result(mode, (results / f"{item.id}.json").read_text()), worker=name)
            if line.startswith(CASE + item.id + " "):
                finished.append(CaseError.model_validate_json(line.removeprefix(CASE + item.id + " ")))

    def stop(self) -> None:
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        kill_group(self.process, grace_s=2.0)


def serve_all(
    setup: Path,
    items: list[Item],
    jobs: int,
    timeout_s: float,
    results: Path,
    on_result: Callable[[Outcome], None],
    env: dict[str, str] | None = None,
    devices: tuple[str, ...] = (),
) -> None:
    """Every item served by `jobs` workers (`python -m ferret.audit.worker SETUP RESULTS`, `setup` a `WorkerSetup`'s
    JSON), or with `devices` by one worker per GPU, each seeing that GPU alone; `on_result` is called for each
    outcome, in the calling thread, as each comes."""
    results.mkdir(parents=True, exist_ok=True)
    mode = WorkerSetup.model_validate_json(setup.read_text()).mode
    todo: queue.Queue[Item] = queue.Queue()
    for item in items:
        todo.put(item)
    done: queue.Queue[Outcome | None] = queue.Queue()

    def work(device: str | None) -> None:
        worker: _Worker | None = None
        try:
            while True:
                try:
                    item = todo.get_nowait()
                except queue.Empty:
                    return
                worker = worker or _Worker([str(setup)], env, results, device)
                outcome = worker.serve(item, timeout_s, results, mode)
                if outcome.result is None:  # a worker that timed out or died serves nothing more
                    worker.stop()
                    worker = None
                done.put(outcome)
        finally:
            if worker is not None:
                worker.stop()
            done.put(None)

    slots: list[str | None] = list(devices) if devices else [None] * jobs
    threads = [threading.Thread(target=work, args=(d,), daemon=True) for d in slots[: max(1, min(len(slots), len(items)))]]
    for thread in threads:
        thread.start()
    running = len(threads)
    while running:
        outcome = done.get()
        if outcome is None:
            running -= 1
        else:
            on_result(outcome)


@dataclass(frozen=True)
class LocalPool:
    """`jobs` worker processes on this machine (`serve_all`), or one per GPU of `devices`: the default executor, no
    cluster, no Ray."""

    jobs: int = 1
    devices: tuple[str, ...] = ()

    def serve(
        self, setup: WorkerSetup, items: list[Item], timeout_s: float, results: Path, on_result: Callable[[Outcome], None]
    ) -> None:
        results.mkdir(parents=True, exist_ok=True)
        path = results / "setup.json"
        path.write_text(setup.model_dump_json())
        serve_all(path, items, self.jobs, timeout_s, results, on_result, {**os.environ, **setup.env}, self.devices)

    def close(self) -> None:
        pass


def choose_gpus(spec: str, count: int, visible: str | None = None) -> tuple[str, ...]:
    """`--gpus`: `all`, the first `N`, or indices `0,1` of the `count` GPUs this process sees, as the values a worker's
    CUDA_VISIBLE_DEVICES takes (`visible`, this process's own CUDA_VISIBLE_DEVICES, maps them: index 0 of "2,3" is 2)."""
    spec = spec.strip()
    if spec == "all":
        chosen = list(range(count))
    elif spec.isdigit():
        chosen = list(range(int(spec)))
    else:
        try:
            chosen = [int(part) for part in spec.split(",")]
        except ValueError:
            raise UsageError(f"--gpus {spec}: give all, a number of GPUs, or their indices (0,1)") from None
    if not chosen or len(set(chosen)) != len(chosen) or any(i < 0 or i >= count for i in chosen):
        raise UsageError(f"--gpus {spec}: this process sees {count} GPU(s); each index once, below {count}")
    names = [v.strip() for v in visible.split(",")] if visible else [str(i) for i in range(count)]
    return tuple(names[i] for i in chosen)
