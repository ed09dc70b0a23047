"""multi_processing jobs run on workers forked from one forkserver per build, not on freshly started interpreters."""

from __future__ import annotations

import gc
import os
import resource
import time
from pathlib import Path

import apache_beam as beam
import psutil
import pytest

from corpusforge.core.config import RunConfig
from corpusforge.pipeline.forked_workers import forkserver, forkserver_scope
from corpusforge.pipeline.options import pipeline_options
from corpusforge.processes import MALLOC_TUNABLES, in_fresh_process


def _where(x: int, out: str) -> int:
    """Record the element, the worker's parent and that parent's command line."""
    parent = psutil.Process(os.getppid())
    with open(f"{out}.{os.getpid()}", "a") as f:
        f.write(f"{x}\t{parent.pid}\t{' '.join(parent.cmdline())}\n")
    return x


def _burn(x: int) -> int:
    """About 0.3 CPU-seconds of work in the worker."""
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    return x


def _pipeline(fn, items: int = 12) -> beam.Pipeline:  # noqa: ANN001
    pipeline = beam.Pipeline(options=pipeline_options(RunConfig(direct_running_mode="multi_processing", direct_num_workers=2)))
    _ = pipeline | beam.Create(range(items)) | beam.Reshuffle() | beam.Map(fn)
    return pipeline


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_workers_are_forked_from_one_forkserver_across_jobs_and_it_stops_after(tmp_path: Path) -> None:
    out = tmp_path / "where"
    with forkserver_scope():
        for _ in range(2):  # two jobs: both fork their workers from the same server
            _pipeline(lambda x, out=str(out): _where(x, out)).run().wait_until_finish()
    lines = [line.split("\t") for path in tmp_path.glob("where.*") for line in path.read_text().splitlines()]
    assert sorted(int(x) for x, _, _ in lines) == sorted(list(range(12)) * 2)  # every element, once per job
    assert len({pid for _, pid, _ in lines}) == 1 and all("multiprocessing.forkserver" in command for _, _, command in lines)
    server = int(lines[0][1])
    assert not psutil.pid_exists(server) or psutil.Process(server).status() == psutil.STATUS_ZOMBIE  # stopped with the scope


def test_forked_workers_cpu_counts_in_this_process_children() -> None:
    """The bench and farm-bench read a build's CPU from its reaped children: forked workers must be among them."""
    before = _children_cpu()
    with forkserver_scope():
        _pipeline(_burn).run().wait_until_finish()
    assert _children_cpu() - before > 12 * 0.3 * 0.8


def test_a_failing_worker_step_fails_the_job() -> None:
    def fail(x: int) -> int:
        raise ValueError(f"bad element {x}")

    with forkserver_scope(), pytest.raises(Exception, match="bad element"):
        _pipeline(fail, items=3).run().wait_until_finish()


def _tunables_at_start() -> str:
    """The GLIBC_TUNABLES this process was started with, which glibc read then (a forked one keeps its server's).

    From /proc/self/environ, where glibc has put a NUL after each tunable it parsed: they come back ":"-joined."""
    items = Path("/proc/self/environ").read_text().split("\0")
    first = next((i for i, item in enumerate(items) if item.startswith("GLIBC_TUNABLES=")), None)
    if first is None:
        return "-"
    rest = [items[first].partition("=")[2]] + [item for item in items[first + 1 :] if item.startswith("glibc.")]
    return ":".join(rest)


def _started_with(x: int, out: str) -> int:
    with open(f"{out}.{os.getpid()}", "a") as f:
        f.write(_tunables_at_start() + "\n")
    return x


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc (Linux), where glibc's tunables apply")
def test_the_fresh_process_gets_the_allocator_settings_before_the_users_own_and_workers_only_the_users(
    tmp_path: Path,
    monkeypatch,  # noqa: ANN001
) -> None:
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    out = tmp_path / "tunables"
    with forkserver_scope():
        _pipeline(lambda x, out=str(out): _started_with(x, out), items=4).run().wait_until_finish()
    assert in_fresh_process(_tunables_at_start) == f"{MALLOC_TUNABLES}:glibc.malloc.arena_max=2"  # the user's last: theirs win
    assert {line for path in tmp_path.glob("tunables.*") for line in path.read_text().splitlines()} == {"glibc.malloc.arena_max=2"}
    assert os.environ["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2"  # this process's own, as before


def _frozen(x: int, out: str) -> int:
    with open(f"{out}.{os.getpid()}", "a") as f:
        f.write(f"{gc.get_freeze_count()}\n")
    return x


def test_a_worker_keeps_what_it_inherits_out_of_the_collectors_walks(tmp_path: Path) -> None:
    """Beam and our steps, imported by the server, are frozen in each worker: its full collections skip them."""
    out = tmp_path / "frozen"
    with forkserver_scope():
        _pipeline(lambda x, out=str(out): _frozen(x, out), items=4).run().wait_until_finish()
    counts = [int(line) for path in tmp_path.glob("frozen.*") for line in path.read_text().splitlines()]
    assert len(counts) == 4 and min(counts) > 100_000  # Beam's modules alone are well over that


def _freeze_count(out: str) -> None:
    with open(out, "w") as f:
        f.write(str(gc.get_freeze_count()))


def test_the_forkserver_freezes_what_it_preloaded(tmp_path: Path) -> None:
    """Any process it forks starts with the server's imports frozen, and the server's exit when the scope ends no
    longer walks them (0.7 s the launcher waited for)."""
    out = tmp_path / "count"
    with forkserver_scope():
        process = forkserver().Process(target=_freeze_count, args=(str(out),))
        process.start()
        process.join()
    assert process.exitcode == 0 and int(out.read_text()) > 100_000
