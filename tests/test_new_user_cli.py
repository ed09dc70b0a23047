"""What a new user meets on the command line (issue 25): a piped build log that is the stage lines and the
summary (no Beam start-up chatter), ``-q`` that still says where the outputs are, a bad input path reported
at once with nothing created, and ``config show`` paths without ``/../``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corpusforge.cli import app

CORPUSFORGE = Path(sys.executable).parent / "corpusforge"  # the installed command, as a user runs it
SAMPLES = Path(__file__).resolve().parents[1] / "corpusforge" / "samples"
# What Beam's worker processes announce at start-up, once per worker and job (relayed by local_job_service).
BEAM_START_UP = ("semi_persistent_directory", "apitools", "Discarding unparseable args", "local_job_service")
# The demo's piped log: 10 stage lines and a 34-line summary (measured: 44; with the chatter it was 56 on 2 cores).
MAX_LOG_LINES = 50
FAST_FAIL_S = 4.0  # measured 1.4-2.0 s (0.6 s of CPU) on a busy 2-core machine: the imports before the check


def corpusforge(*args: str) -> subprocess.CompletedProcess[str]:
    """The command with stdout and stderr into one pipe, as ``corpusforge build > log 2>&1`` sees it."""
    return subprocess.run([str(CORPUSFORGE), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def output_dir(out: Path) -> str:
    return f"run.output_dir={json.dumps(str(out))}"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The bundled demo built once, its log piped: (output folder, log)."""
    out = tmp_path_factory.mktemp("new_user") / "out"
    built = corpusforge("build", "--set", output_dir(out))
    assert built.returncode == 0, built.stdout
    return out, built.stdout


def test_a_piped_build_log_holds_no_beam_start_up_chatter(demo):
    _, log = demo
    assert [line for line in log.splitlines() if any(noise in line for noise in BEAM_START_UP)] == []
    assert len(log.splitlines()) <= MAX_LOG_LINES, log


def test_quiet_prints_only_where_the_outputs_are(demo):
    out, _ = demo
    again = corpusforge("build", "-q", "--set", output_dir(out))  # every stage reused: seconds
    assert again.returncode == 0, again.stdout
    assert again.stdout.splitlines() == [f"outputs in {out.resolve()}", f"report: {out.resolve() / 'report.html'}"]


@pytest.mark.parametrize(
    ("key", "make", "message"),
    [
        ("books.paths", lambda path: None, "books path does not exist"),
        ("books.paths", lambda path: path.mkdir(), "books folder is empty"),
        ("wikipedia.paths", lambda path: None, "wikipedia path does not exist"),
    ],
)
def test_a_bad_input_path_fails_at_once_and_creates_nothing(tmp_path, key, make, message):
    out, bad = tmp_path / "out", tmp_path / "input"
    make(bad)
    started = time.perf_counter()
    failed = corpusforge("build", "--set", output_dir(out), "--set", f"{key}=[{json.dumps(str(bad))}]")
    wall = time.perf_counter() - started
    assert (failed.returncode, failed.stdout) == (2, f"error: {message}: {bad}\n")
    assert not out.exists()
    assert wall < FAST_FAIL_S, f"{wall:.1f}s"


def test_config_show_prints_normalised_paths():
    shown = CliRunner().invoke(app, ["config", "show"])
    assert shown.exit_code == 0, shown.output
    assert "/../" not in shown.output
    assert f"paths = [{json.dumps(str(SAMPLES / 'books'))}]" in shown.output
