"""A fuzz campaign: programs of `aotspec.fuzz.judge` run in worker processes, failures written
out as standalone repros, all of it safe to kill and resume.

- Programs: index `i` of campaign `seed` is always the same program (`judge.draw_at`). Shard
  `I/N` takes the indices `I-1`, `I-1+N`, `I-1+2N`, ..., so N machines split one campaign
  without overlap.
- Stopping: after `programs` programs of this shard, or when `budget` seconds are spent (two
  thirds of it finding, the rest shrinking).
- Failures: a crash (signal), a hang, an error or a disagreement with the oracles, each with a
  *signature* (`judge.signature`); the first program of each signature is written at once as
  `repro_<slug>.py` in the campaign's directory, then shrunk (fewer of hypothesis's choices, or
  smaller ones, with the same signature) and written again.
- Crash safety: `campaign.json` says what the campaign is; `results.jsonl` gets a line per
  program judged and `failures.jsonl` a line per failure found or shrunk, each flushed as it
  comes, so `kill -9` loses nothing already found; `resume` skips what `results.jsonl` holds
  and shrinks what is not shrunk yet.
"""

from __future__ import annotations

import base64
import hashlib
import json
import pickle
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from attrs import define, field, frozen

from aotspec.workers import Crashed, Done, Pool, Task

from .judge import (
    Verdict,
    check_choices,
    check_index,
    draw_at,
    from_choices,
    kinds_for,
    subject_source,
)

#: Candidates the shrinker tries at most per failure.
SHRINK_ATTEMPTS = 300


@frozen
class Shard:
    index: int  # 1-based
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        match = re.fullmatch(r"(\d+)/(\d+)", text)
        if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
            raise ValueError(f"--shard takes I/N with 1 <= I <= N, like 2/4; got {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    def indices(self) -> Iterator[int]:
        index = self.index - 1
        while True:
            yield index
            index += self.count


@frozen
class Failure:
    signature: str
    index: int
    kind: str
    choices: list = field(eq=False)
    found: tuple[str, ...]
    shrunk: bool = False


@define
class Campaign:
    backend: str
    directory: Path
    seed: int = 0
    shard: Shard = Shard(1, 1)
    jobs: int = 1
    timeout: float = 120.0
    #: Called with (index, kind, verdict) for each program judged.
    on_result: Callable | None = None
    done: set[int] = field(factory=set)
    failures: dict[str, Failure] = field(factory=dict)
    counts: dict[str, int] = field(factory=dict)
    #: Programs judged, by the signature of their failure.
    failing: dict[str, int] = field(factory=dict)
    #: This run's programs judged, the seconds it spent judging them, and in all (shrinking).
    judged: int = 0
    finding_seconds: float = 0.0
    seconds: float = 0.0

    # -------------------------------------------------------- files

    def _describe(self) -> dict:
        return {
            "backend": self.backend,
            "seed": self.seed,
            "shard": f"{self.shard.index}/{self.shard.count}",
        }

    def start(self, resume: bool) -> None:
        """Write `campaign.json`; with `resume`, read back what an earlier run did."""
        self.directory.mkdir(parents=True, exist_ok=True)
        described = self.directory / "campaign.json"
        if resume and described.exists():
            before = json.loads(described.read_text())
            if before != self._describe():
                raise ValueError(
                    f"{self.directory} holds another campaign ({before}); resume it with those "
                    "options, or give --out another directory"
                )
            self._read_back()
        elif (self.directory / "results.jsonl").exists() and not resume:
            raise ValueError(
                f"{self.directory} holds a campaign already: pass --resume to go on with it, or "
                "give --out another directory"
            )
        described.write_text(json.dumps(self._describe()) + "\n")

    def _read_back(self) -> None:
        results = self.directory / "results.jsonl"
        if results.exists():
            for line in _lines(results):
                self._count(line["index"], line["status"], line.get("signature"))
        failures = self.directory / "failures.jsonl"
        if failures.exists():
            for line in _lines(failures):
                failure = Failure(
                    line["signature"],
                    line["index"],
                    line["kind"],
                    _decode(line["choices"]),
                    tuple(line["found"]),
                    line["shrunk"],
                )
                self.failures[failure.signature] = failure

    def _append(self, name: str, record: dict) -> None:
        with open(self.directory / name, "a") as file:
            file.write(json.dumps(record) + "\n")
            file.flush()

    def _record_failure(self, failure: Failure) -> None:
        self.failures[failure.signature] = failure
        self.write_repro(failure)
        self._append(
            "failures.jsonl",
            {
                "signature": failure.signature,
                "index": failure.index,
                "kind": failure.kind,
                "choices": _encode(failure.choices),
                "found": list(failure.found),
                "shrunk": failure.shrunk,
            },
        )

    def repro_path(self, failure: Failure) -> Path:
        """`repro_<the signature's first words>_<a hash of all of it>.py`: signatures that
        begin alike get files of their own."""
        slug = re.sub(r"[^a-z0-9]+", "_", failure.signature.lower()).strip("_")[:40].strip("_")
        digest = hashlib.sha1(failure.signature.encode()).hexdigest()[:6]
        return self.directory / f"repro_{slug}_{digest}.py"

    def write_repro(self, failure: Failure) -> Path:
        subject = from_choices(failure.kind, failure.choices)
        path = self.repro_path(failure)
        path.write_text(repro_source(subject, failure, self.backend, self.seed, path.name))
        return path

    # -------------------------------------------------------- running

    def run(
        self, *, programs: int | None, budget: float | None, shrinking: float | None = None
    ) -> None:
        """Judge programs until `programs` of them ran (this run and earlier ones) or
        `budget` seconds are spent, then shrink the failures not shrunk yet, for at most
        `shrinking` seconds (and within the budget)."""
        start = time.monotonic()
        finding = None if budget is None else start + budget * 2 / 3
        with Pool(self.jobs, self.timeout) as pool:
            tasks = self._tasks(programs, finding)
            for task, result in pool.map(tasks):
                self._judged(task.args[2], _verdict(result))
            self.finding_seconds = time.monotonic() - start
            ends = [start + budget] if budget is not None else []
            ends += [time.monotonic() + shrinking] if shrinking is not None else []
            deadline = min(ends, default=None)
            for failure in list(self.failures.values()):
                if not failure.shrunk:
                    self._shrink(pool, failure, deadline)
        self.seconds = time.monotonic() - start

    def _tasks(self, programs: int | None, finding: float | None) -> Iterator[Task]:
        count = len(self.done)
        for index in self.shard.indices():
            if programs is not None and count >= programs:
                return
            if finding is not None and time.monotonic() >= finding:
                return
            if index in self.done:
                continue
            count += 1
            yield Task(check_index, (self.backend, self.seed, index))

    def _judged(self, index: int, result: tuple[str | None, Verdict]) -> None:
        kind, verdict = result
        if kind is None:  # the worker died: draw the program here to know its kind
            kind, _, _ = draw_at(self.seed, index, kinds_for(self.backend))
        status = verdict.status
        self._count(index, status, verdict.signature)
        self.judged += 1
        record = {"index": index, "kind": kind, "status": status}
        if verdict.signature:
            record["signature"] = verdict.signature
        self._append("results.jsonl", record)
        if status == "fail" and verdict.signature not in self.failures:
            _, _, choices = draw_at(self.seed, index, kinds_for(self.backend))
            self._record_failure(Failure(verdict.signature, index, kind, choices, verdict.found))
        if self.on_result is not None:
            self.on_result(index, kind, verdict)

    def _count(self, index: int, status: str, signature: str | None) -> None:
        self.done.add(index)
        self.counts[status] = self.counts.get(status, 0) + 1
        if status == "fail":
            self.failing[signature] = self.failing.get(signature, 0) + 1

    def _shrink(self, pool: Pool, failure: Failure, deadline: float | None) -> None:
        """Greedy passes over hypothesis's choices, judged in parallel: drop a run of choices,
        or make one smaller; go on from the first candidate that fails with the same
        signature (and any judged alongside it, the smallest), until none does, the attempts
        are spent or the deadline has passed."""
        best, found, attempts = list(failure.choices), failure.found, 0

        def out_of_time() -> bool:
            return deadline is not None and time.monotonic() >= deadline

        improved = True
        while improved and attempts < SHRINK_ATTEMPTS and not out_of_time():
            improved = False
            for batch in _candidate_batches(best):
                winners = []

                def tasks(batch=batch, winners=winners) -> Iterator[Task]:
                    for choices in batch:
                        if winners or out_of_time() or attempts >= SHRINK_ATTEMPTS:
                            return  # what is running finishes; nothing new starts
                        yield Task(check_choices, (self.backend, failure.kind, choices))

                for task, result in pool.map(tasks()):
                    attempts += 1
                    verdict = _verdict_of_check(result)
                    if verdict is not None and verdict.signature == failure.signature:
                        winners.append((task.args[2], verdict))
                if winners:
                    best, verdict = min(winners, key=lambda w: _sort_key(w[0]))
                    found, improved = verdict.found, True
                    break
        self._record_failure(
            Failure(failure.signature, failure.index, failure.kind, best, found, shrunk=True)
        )


def _verdict(result) -> tuple[str | None, Verdict]:
    """A task's result as (kind, verdict): a dead worker is a failure named by its signal."""
    if isinstance(result, Done):
        return result.value
    if isinstance(result, Crashed):
        message = f"the backend crashed the worker with {result.signal}"
        return None, Verdict(
            "fail", (message, *_fault_lines(result.log)), f"crash {result.signal}"
        )
    message = f"the backend ran past {result.seconds:g} s; the worker was killed"
    return None, Verdict("fail", (message,), "timeout")


def _verdict_of_check(result) -> Verdict | None:
    if isinstance(result, Done):
        return result.value
    return _verdict(result)[1]


def _fault_lines(log: str) -> tuple[str, ...]:
    """The fault handler's report, without the thread's address (it differs at every run)."""
    lines = [line for line in log.splitlines() if line.strip()]
    return tuple(line for line in lines if not line.startswith("Current thread 0x"))[:8]


def _sort_key(choices: list) -> tuple:
    """hypothesis's order: fewer choices first, then smaller ones."""
    return (len(choices), [_magnitude(c) for c in choices])


def _magnitude(choice) -> float:
    if isinstance(choice, bool):
        return float(choice)
    if isinstance(choice, (int, float)):
        return abs(choice)
    return len(choice)


def _candidate_batches(choices: list) -> Iterator[list[list]]:
    """Smaller choice sequences: runs of 8, 4, 2 and 1 choices removed, then each choice made
    simpler (an integer toward 0, a boolean to False)."""
    for size in (8, 4, 2, 1):
        starts = range(0, max(len(choices) - size + 1, 0))
        yield [choices[:i] + choices[i + size :] for i in starts]
    simpler = []
    for i, choice in enumerate(choices):
        for smaller in _smaller(choice):
            simpler.append(choices[:i] + [smaller] + choices[i + 1 :])
    yield simpler


def _smaller(choice) -> list:
    if isinstance(choice, bool):
        return [False] if choice else []
    if isinstance(choice, int):
        return sorted({0, choice // 2, choice - 1} - {choice}, key=abs) if choice > 0 else []
    return []


def _encode(choices: list) -> list:
    """Choices as JSON: bytes and floats that JSON cannot hold are tagged."""
    return [
        {"bytes": base64.b64encode(c).decode()}
        if isinstance(c, bytes)
        else {"float": repr(c)}
        if isinstance(c, float)
        else c
        for c in choices
    ]


def _decode(choices: list) -> list:
    decoded = []
    for c in choices:
        if isinstance(c, dict) and "bytes" in c:
            decoded.append(base64.b64decode(c["bytes"]))
        elif isinstance(c, dict):
            decoded.append(float(c["float"]))
        else:
            decoded.append(c)
    return decoded


def _lines(path: Path) -> Iterator[dict]:
    """The records of a JSON-lines file; a last line cut short by a kill is skipped."""
    for line in path.read_text().splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


# ---------------------------------------------------------------- standalone repros

_REPRO = '''\
"""aotspec fuzz repro: {backend} disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend {backend} --seed {seed}` (program {index}, a {kind} program).
Signature: {signature}
Run alone, from anywhere aotspec is installed:
    python {name}                  fails: {backend} is wrong here
    python {name} torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than rounding moves them), the
reference for memory facts (aotspec/fuzz/judge.py). When found:
{found}
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = {backend!r}
SUBJECT = pickle.loads(base64.b64decode({blob!r}))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
{source}

if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else BACKEND
    verdict = judge(SUBJECT, backend)
    assert verdict.status == "pass", f"{{backend}}: " + "\\n".join(verdict.found)
    print(f"{{backend}} agrees with the oracles")
'''


def repro_source(subject, failure: Failure, backend: str, seed: int, name: str) -> str:
    commented = "\n".join(f"# {line}".rstrip() for line in subject_source(subject).splitlines())
    return _REPRO.format(
        backend=backend,
        seed=seed,
        index=failure.index,
        kind=failure.kind,
        signature=failure.signature,
        name=name,
        found="\n".join(f"    {line}" for line in failure.found),
        blob=base64.b64encode(pickle.dumps(subject)).decode(),
        source=commented,
    )
