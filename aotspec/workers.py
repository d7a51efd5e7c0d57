"""Worker processes that survive the crashes of what they run.

A backend under test may segfault, abort or hang: `torch.compile(backend="aot_eager")` segfaults
on FSDP's resize pattern (docs/torch-2.13.md section 2.3). So the conformance runner and the
fuzzer run each case or program as a *task* in a worker process, and a crash becomes the task's
result instead of the end of the run:

- `Done(value)`: the task returned `value`;
- `Crashed(signal, log)`: the worker died (a segfault, an abort) while running it; `log` is the
  end of what the worker printed for it, the fault handler's traceback included;
- `TimedOut(seconds, log)`: it ran past the pool's timeout, and the worker was killed.

Workers are reused from task to task, so isolation costs no interpreter start and no import of
torch per task, and a dead or killed worker is replaced by a new one. They fork from a server
process that imported torch once (multiprocessing's forkserver, with torch preloaded), so a
replacement starts in a fraction of a second; the server itself never runs an op.

A task is a module-level function and picklable arguments; its value must be picklable too.
A task that raises is a bug of the task, not of the backend: `Pool.map` raises `TaskError`.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import itertools
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from attrs import define, frozen

#: Imported once by the fork server, so that every worker starts with them. Only modules that
#: run no op on import: a worker forked after torch started its thread pool can hang (the
#: conformance cases compute their expectations on import, so each worker imports them itself).
PRELOAD = ["torch", "torch._dynamo", "aotspec", "hypothesis"]
#: How much of a crashed worker's output a result keeps.
LOG_TAIL = 3_000


@frozen
class Done:
    value: Any


@frozen
class Crashed:
    #: The signal's name (SIGSEGV, SIGABRT, ...) or `exit N` for a worker that exited.
    signal: str
    log: str
    seconds: float = 0.0


@frozen
class TimedOut:
    seconds: float
    log: str


@frozen
class Task:
    function: Callable
    args: tuple


class TaskError(RuntimeError):
    """A task raised in its worker: a bug of the task itself (its traceback is the message)."""


# ---------------------------------------------------------------- the worker's side


def _serve(connection, log_path: str, path: list[str], cwd: str) -> None:
    """A worker's loop: run each task received, send back ("ok", value) or ("raised", text).

    It works in the pool's directory with the pool's import path (the fork server keeps those
    of its own start), so that a task finds what the pool's process finds: a user's backend.
    Its stdout and stderr go to `log_path`, emptied before each task, so that what a crashed
    task printed (and the fault handler's traceback) can be read back."""
    sys.path[:] = path
    os.chdir(cwd)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    faulthandler.enable()
    # What the fork server imported lives as long as the worker: frozen out of the collector's
    # way, its full collections walk only what tasks make (a few ms a fuzz program). So does
    # what the first task imports (the task's modules, the fuzzer's strategies): frozen after it
    # (1.1 ms of a fuzz program's collections).
    gc.collect()
    gc.freeze()
    for served in itertools.count():
        try:
            task = connection.recv()
        except EOFError:  # the pool is gone
            return
        os.ftruncate(log, 0)
        try:
            reply = ("ok", task.function(*task.args))
        except BaseException:  # noqa: BLE001 (reported to the pool, which raises it)
            reply = ("raised", traceback.format_exc())
        connection.send(reply)
        if served == 0:
            gc.collect()
            gc.freeze()


# ---------------------------------------------------------------- the pool's side


def _signal_name(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit {exitcode}"


def _log(path: str) -> str:
    """What a dead worker printed for its task: the fault handler's headline and the frames of
    the thread that crashed (the innermost first) when there is one, else the end."""
    try:
        with open(path, errors="replace") as log:
            text = log.read()
    except OSError:
        return ""
    fault = text.find("Fatal Python error")
    if fault < 0:
        return text[-LOG_TAIL:]
    headline = text[fault:].split("\n", 1)[0]
    # the thread that crashed; the fault handler lists the others (thread pools) first
    current = text.find("Current thread", fault)
    frames = text[current:] if current >= 0 else text[fault + len(headline) :]
    return f"{headline}\n{frames}"[:LOG_TAIL]


@define
class _Worker:
    process: multiprocessing.Process
    connection: multiprocessing.connection.Connection
    log_path: str
    task: Task | None = None
    started: float = 0.0

    def stop(self) -> None:
        self.connection.close()
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _context():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


class Pool:
    """`jobs` reusable workers; `map` runs tasks on them and yields each with its result."""

    def __init__(self, jobs: int = 1, timeout: float = 300.0):
        if jobs < 1:
            raise ValueError(f"a pool needs at least one worker, got jobs={jobs}")
        self.jobs = jobs
        self.timeout = timeout
        self._context = _context()
        self._logs = tempfile.TemporaryDirectory(prefix="aotspec-workers-")
        self._idle: list[_Worker] = []
        self._started = 0

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        for worker in self._idle:
            worker.stop()
        self._idle = []
        self._logs.cleanup()

    def _spawn(self) -> _Worker:
        ours, theirs = self._context.Pipe()
        self._started += 1
        log_path = os.path.join(self._logs.name, f"worker-{self._started}.log")
        where = (list(sys.path), os.getcwd())
        process = self._context.Process(
            target=_serve, args=(theirs, log_path, *where), daemon=True
        )
        process.start()
        theirs.close()
        return _Worker(process, ours, log_path)

    def map(self, tasks: Iterable[Task]) -> Iterator[tuple[Task, Done | Crashed | TimedOut]]:
        """Run `tasks`, at most `jobs` at a time, yielding (task, result) as each finishes."""
        pending = iter(tasks)
        busy: list[_Worker] = []
        try:
            while True:
                while len(busy) < self.jobs:
                    task = next(pending, None)
                    if task is None:
                        break
                    busy.append(self._start(task))
                if not busy:
                    return
                for worker in self._wait(busy):
                    busy.remove(worker)
                    task, result = worker.task, self._finish(worker)
                    yield task, result
        finally:
            for worker in busy:  # abandoned mid-task (the caller stopped iterating)
                worker.process.kill()
                worker.stop()

    def _start(self, task: Task) -> _Worker:
        worker = self._idle.pop() if self._idle else self._spawn()
        try:
            worker.connection.send(task)
        except (BrokenPipeError, OSError):  # it died idle: replace it
            worker.stop()
            worker = self._spawn()
            worker.connection.send(task)
        worker.task, worker.started = task, time.monotonic()
        return worker

    def _wait(self, busy: list[_Worker]) -> list[_Worker]:
        """The workers that answered, died or ran out of time."""
        now = time.monotonic()
        deadline = min(worker.started + self.timeout for worker in busy)
        ready = multiprocessing.connection.wait(
            [worker.connection for worker in busy], timeout=max(deadline - now, 0)
        )
        now = time.monotonic()
        return [
            worker
            for worker in busy
            if worker.connection in ready or now >= worker.started + self.timeout
        ]

    def _finish(self, worker: _Worker) -> Done | Crashed | TimedOut:
        task, worker.task = worker.task, None
        reply = None
        if worker.connection.poll():
            with contextlib.suppress(EOFError, OSError):
                reply = worker.connection.recv()
        if reply is None:
            elapsed = time.monotonic() - worker.started
            if worker.process.is_alive():  # no answer in time: a hang
                worker.process.kill()
            worker.process.join()
            log = _log(worker.log_path)
            worker.stop()
            if elapsed >= self.timeout:
                return TimedOut(self.timeout, log)
            return Crashed(_signal_name(worker.process.exitcode), log, elapsed)
        self._idle.append(worker)
        kind, value = reply
        if kind == "raised":
            raise TaskError(f"task {task.function.__qualname__}{task.args!r} raised:\n{value}")
        return Done(value)
