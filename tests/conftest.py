"""Shared test fixtures: where the real public data lives and the bundled sample."""

from __future__ import annotations

import multiprocessing.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# CI runs on a shared 2-core machine: no per-example deadlines there, and a fixed example sequence so a
# submission is judged on the same inputs every run (locally the search stays random and keeps finding cases).
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SAMPLES = ROOT / "corpusforge" / "samples"
SESSION_TEMP = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """The session's own system temp folder (workers and Dask processes inherit it), so leftovers there are ours."""
    multiprocessing.util.get_temp_dir()  # this process's pymp-* folder (the forkserver's socket) outlives the session's temp: made before it
    session_temp = tempfile.mkdtemp(prefix="corpusforge-tests-")
    os.environ["TMPDIR"] = session_temp
    tempfile.tempdir = None  # re-read TMPDIR
    config.stash[SESSION_TEMP] = Path(session_temp)


@pytest.fixture(autouse=True)
def no_beam_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test whose jobs left Beam temp folders behind (Beam's DirectRunner leaves one per job, an unbuilt graph one)."""
    session_temp = request.config.stash[SESSION_TEMP]
    before = set(session_temp.glob("beam-*"))
    yield
    if request.node.get_closest_marker("kills_launcher"):
        return
    leftovers = sorted(p.name for p in set(session_temp.glob("beam-*")) - before)
    assert not leftovers, f"Beam temp folders left in the system temp: {leftovers[:5]} ({len(leftovers)} in all)"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The session's temp folder goes when every test passed; after a failure it stays, with the tests' tmp_path folders."""
    session_temp = session.config.stash[SESSION_TEMP]
    if exitstatus == 0:
        shutil.rmtree(session_temp, ignore_errors=True)
    else:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write("\n")
            reporter.write_line(f"this session's temp folder (tmp_path folders, worker temp) is kept: {session_temp}")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"shared data not found at {SHARED} (it must sit beside the checkout)")
    return SHARED


@pytest.fixture(scope="session")
def samples() -> Path:
    return SAMPLES


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Two OpenMP threads on a shared 2-core runner spin against each other; one is faster and deterministic."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Name each slow test as it starts: under ``-q`` a Dask or corpus-sized test is otherwise minutes of silence."""
    reporter = item.config.pluginmanager.get_plugin("terminalreporter")
    if item.get_closest_marker("slow") and reporter is not None:
        reporter.write(f"\n[slow test, a minute or more] {item.nodeid} ", flush=True)
