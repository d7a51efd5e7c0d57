"""Run a function on every rank of a process group made for it: gloo on CPU, one process a rank.

    results = run_on_ranks(train, steps, ranks=2, timeout=60)   # [rank 0's result, rank 1's]

Each rank is a fresh process (multiprocessing's spawn start method, so nothing of the caller's
state leaks in), joins a gloo group of `ranks` processes through a file store in a temporary
folder, calls `fn(*args)` and sends back what it returned. `fn`, its arguments and its results
cross processes by pickle: `fn` is a module-level function.

A run never hangs its caller: a rank that has not answered `timeout` seconds after the start is
killed, and `RanksFailed` says which ranks did not finish; a rank that raised makes
`RanksFailed` carry its traceback. Collectives inside `fn` give up after `group_timeout` seconds
(the group's own timeout), so a rank stuck in one raises rather than waits for the kill.
"""

from __future__ import annotations

import datetime
import multiprocessing
import multiprocessing.connection
import os
import pickle
import sys
import tempfile
import time
import traceback
from collections.abc import Callable


class RanksFailed(AssertionError):
    """A rank raised, or did not finish in time; the message has each failed rank's story."""


def run_on_ranks(
    fn: Callable, *args, ranks: int = 2, timeout: float = 60.0, group_timeout: float = 30.0
) -> list:
    """`fn(*args)` on each of `ranks` processes joined in one gloo group; their results by rank."""
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="aotspec-ranks-") as folder:
        store = os.path.join(folder, "store")
        pipes, processes = [], []
        for rank in range(ranks):
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(
                target=_rank_main,
                args=(rank, ranks, store, group_timeout, fn, args, sender),
                name=f"aotspec-rank-{rank}",
            )
            process.start()
            sender.close()
            pipes.append(receiver)
            processes.append(process)
        try:
            answers = _answers(pipes, time.monotonic() + timeout)
        finally:
            for process in processes:
                if process.is_alive():
                    process.kill()
                process.join()
    failures = [
        _failure(rank, answer, process.exitcode, timeout)
        for rank, (answer, process) in enumerate(zip(answers, processes, strict=True))
        if answer is None or answer[0] != "ok"
    ]
    if failures:
        raise RanksFailed("\n".join(failures))
    return [answer[1] for answer in answers]


def _failure(rank: int, answer, exitcode: int | None, timeout: float) -> str:
    if answer is None:
        return f"rank {rank} did not finish within {timeout:g} s"
    if answer[0] == "died":
        return f"rank {rank} died with exit status {exitcode} (a negative status is a signal)"
    return f"rank {rank} raised:\n{answer[1]}"


def _answers(pipes: list, deadline: float) -> list:
    """What each rank sent, or None for a rank that sent nothing before `deadline`."""
    answers: list = [None] * len(pipes)
    waiting = dict(enumerate(pipes))
    while waiting and time.monotonic() < deadline:
        ready = multiprocessing.connection.wait(
            list(waiting.values()), timeout=deadline - time.monotonic()
        )
        for rank, pipe in list(waiting.items()):
            if pipe in ready:
                try:
                    answers[rank] = pickle.loads(pipe.recv_bytes())
                except EOFError:  # the process died without a word (a segfault, an abort)
                    answers[rank] = ("died", None)
                del waiting[rank]
    return answers


def _rank_main(rank, ranks, store, group_timeout, fn, args, sender) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # the ranks share the machine's cores
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{store}",
            rank=rank,
            world_size=ranks,
            timeout=datetime.timedelta(seconds=group_timeout),
        )
        answer = ("ok", fn(*args))
    except BaseException:  # noqa: BLE001  (the caller judges every error)
        answer = ("error", traceback.format_exc())
    try:
        # A rank that finished stays until the others have: leaving would break the collectives
        # they still run (a rank waiting out a timeout would see its peer gone instead).
        dist.barrier()
    except Exception:  # noqa: BLE001  (a broken group: the answers tell what went wrong)
        pass
    try:
        # Plain pickle copies tensors' bytes (the connection's own pickler would pass shared
        # memory, which dies with this process).
        message = pickle.dumps(answer)
    except Exception:  # noqa: BLE001  (an unpicklable result is the rank's failure)
        message = pickle.dumps(("error", traceback.format_exc()))
    sender.send_bytes(message)
    sender.close()
    sys.stdout.flush()
    sys.stderr.flush()
    # Tearing down an interpreter that loaded torch takes seconds, and the group's other ranks
    # may be gone already: leave at once.
    os._exit(0)
