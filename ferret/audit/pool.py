"""Worker processes that take items one at a time, each item time-boxed: `--jobs` processes of
`python -m ferret.audit.worker`, fed over stdin, answering through one result file per item.

A worker imports torch (and Triton, or builds a Judge) once and then serves many items: a process per mutant paid
that start every time. An item that runs past its time-box, or a worker that dies, ends that worker's whole process
group; the item is reported as such and a fresh worker takes the next one. A result is reported the moment it comes
(`on_result`), so the caller can write it down before the next one starts.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ferret.sandbox.children import kill_group, start_group

DONE = "FERRET_AUDIT_DONE "  # a worker's line when an item's result file is written; other lines are the item's own prints


@dataclass(frozen=True)
class Item:
    id: str
    path: Path


@dataclass(frozen=True)
class Outcome:
    """An item's result (the worker's JSON) or, with `result` None, why there is none."""

    item: Item
    result: dict | None
    failure: str = ""
    timed_out: bool = False


class _Worker:
    def __init__(self, argv: list[str], env: dict[str, str] | None, results: Path):
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

    def serve(self, item: Item, timeout_s: float, results: Path) -> Outcome:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps({"id": item.id, "path": str(item.path)}) + "\n")
            self.process.stdin.flush()
        except OSError:
            return Outcome(item, None, f"the worker had ended: {' | '.join(self.stderr[-5:])}")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return Outcome(item, None, f"no answer within {timeout_s:.0f} s", timed_out=True)
            if line is None:
                time.sleep(0.2)  # its stderr's last lines
                return Outcome(item, None, f"the worker died: {' | '.join(self.stderr[-5:])}")
            if line == DONE + item.id:
                return Outcome(item, json.loads((results / f"{item.id}.json").read_text()))

    def stop(self) -> None:
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        kill_group(self.process, grace_s=2.0)


def serve_all(
    argv: list[str],
    items: list[Item],
    jobs: int,
    timeout_s: float,
    results: Path,
    on_result: Callable[[Outcome], None],
    env: dict[str, str] | None = None,
) -> None:
    """Every item served by `jobs` workers (`python -m ferret.audit.worker *argv results`); `on_result` is called
    for each outcome, in the calling thread, as each comes."""
    results.mkdir(parents=True, exist_ok=True)
    todo: queue.Queue[Item] = queue.Queue()
    for item in items:
        todo.put(item)
    done: queue.Queue[Outcome | None] = queue.Queue()

    def work() -> None:
        worker: _Worker | None = None
        try:
            while True:
                try:
                    item = todo.get_nowait()
                except queue.Empty:
                    return
                worker = worker or _Worker(argv, env, results)
                outcome = worker.serve(item, timeout_s, results)
                if outcome.result is None:  # a worker that timed out or died serves nothing more
                    worker.stop()
                    worker = None
                done.put(outcome)
        finally:
            if worker is not None:
                worker.stop()
            done.put(None)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(max(1, min(jobs, len(items))))]
    for thread in threads:
        thread.start()
    running = len(threads)
    while running:
        outcome = done.get()
        if outcome is None:
            running -= 1
        else:
            on_result(outcome)
