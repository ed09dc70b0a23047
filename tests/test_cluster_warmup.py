"""Warming a Dask cluster of separate processes before a build's first job; its scheduler left without the job's code."""

from __future__ import annotations

import gc
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from distributed import Client
from distributed.deploy.subprocess import SubprocessCluster

from corpusforge import build
from corpusforge.core.config import RunConfig, load_config
from corpusforge.pipeline.cluster_warmup import MODULES as WARM_MODULES
from corpusforge.pipeline.cluster_warmup import client_keywords, warm_cluster, warm_runner

sys.path.insert(0, str(Path(__file__).parent))
from s3_fixture import free_port  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # SubprocessCluster's own
DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.toml"


def _imported(module: str) -> bool:  # runs in the cluster's processes, its code sent along (below)
    import sys

    return module in sys.modules


_imported.__module__ = "__main__"  # so cloudpickle sends the code, not a reference to this test module


def _everywhere(client: Client, module: str) -> list[bool]:
    """Whether the scheduler, then each worker, has imported ``module``."""
    return [client.run_on_scheduler(_imported, module), *client.run(_imported, module).values()]


def _until(check, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def cluster():
    with (
        SubprocessCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(2)
        yield cluster, client


def test_every_worker_imports_the_modules_before_any_job(cluster) -> None:
    cluster, client = cluster
    assert _everywhere(client, WARM_MODULES[0]) == [False] * 3  # fresh processes: nothing of ours imported yet
    warm_cluster({"address": cluster.scheduler_address}, WARM_MODULES).join()
    assert _until(lambda: all(all(_everywhere(client, module)[1:]) for module in WARM_MODULES))
    assert _until(lambda: min(client.run(gc.get_freeze_count).values()) > 100_000)  # out of the workers' collections
    assert [_everywhere(client, module)[0] for module in WARM_MODULES] == [False] * len(WARM_MODULES)  # not the scheduler


def test_a_build_on_the_cluster_warms_it_first_and_leaves_the_scheduler_without_beam(
    cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``colorsys`` is no module a job's graph names: only the warm-up imports it, on the workers. The scheduler
    forwards the job's sealed tasks unread: Beam and the job's steps never load there."""
    cluster, client = cluster
    monkeypatch.setattr(build, "warm_runner", lambda run: warm_runner(run, (*WARM_MODULES, "colorsys")))
    assert _everywhere(client, "colorsys") == [False] * 3
    address = cluster.scheduler_address
    out = json.dumps(str(tmp_path / "out"))
    overrides = [f"run.output_dir={out}", 'run.stages=["books", "clean", "documents"]', 'run.runner="DaskRunner"']
    build.run_build(load_config(DEMO, [*overrides, f'run.beam_args=["--dask_client_address={address}"]']))
    assert _until(lambda: all(_everywhere(client, "colorsys")[1:]))
    assert (tmp_path / "out" / "documents").is_dir()
    for module in ("apache_beam", "corpusforge.pipeline.steps", "corpusforge.corpora.books", "colorsys"):
        assert not _everywhere(client, module)[0], module


def test_an_unreachable_cluster_is_left_to_the_job_to_report(caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger="corpusforge.pipeline.cluster_warmup"):
        warm_cluster({"address": "tcp://127.0.0.1:9", "timeout": "1s"}, WARM_MODULES).join(timeout=30)
    assert "was not warmed" in caplog.text


def test_a_process_warms_a_cluster_once_and_only_one_it_names(cluster) -> None:
    """The command line warms before the build does; without an address Beam's runner starts a cluster of its own."""
    cluster, _ = cluster
    assert warm_runner(RunConfig(runner="DaskRunner")) is None  # no address: warming would start a LocalCluster
    assert warm_runner(RunConfig(beam_args=[f"--dask_client_address={cluster.scheduler_address}"])) is None  # not Dask
    on_cluster = RunConfig(runner="DaskRunner", beam_args=[f"--dask_client_address={cluster.scheduler_address}"])
    first = warm_runner(on_cluster)
    assert first is not None and warm_runner(on_cluster) is None
    first.join()


@pytest.mark.parametrize(
    "flags",
    [
        ["--dask_client_address=tcp://10.0.0.1:8786"],
        ["--dask_scheduler_file=/shared/scheduler.json", "--dask_connection_timeout=30"],
        ["--dask_client_address", "127.0.0.1:8786", "--dask_connection_timeout=1s", "--dask_npartitions=8", "--other=1"],
        [],
    ],
)
def test_the_warm_up_reads_the_address_as_beams_dask_options_do(flags: list[str]) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions

    from corpusforge.pipeline.dask_runner import client_options

    beams = client_options(PipelineOptions(flags))[0]
    wanted = {
        key: value for key, value in beams.items() if key in ("address", "scheduler_file", "timeout") and isinstance(value, (str, int))
    }
    assert client_keywords(flags) == wanted


def test_the_command_line_warms_the_cluster_before_it_imports_beam(tmp_path: Path) -> None:
    """The stage names are checked after Beam's import: an unknown one fails the build after the warm-up was sent."""
    probe = (
        "import sys\n"
        "from corpusforge.pipeline import cluster_warmup\n"
        "cluster_warmup.warm_cluster = lambda keywords, modules: print('warmed', keywords, 'apache_beam' in sys.modules)\n"
        "from corpusforge.cli import console_script\n"
        "sys.argv = ['corpusforge', 'build', '--set', 'run.runner=\"DaskRunner\"', '--set',\n"
        "            'run.beam_args=[\"--dask_client_address=127.0.0.1:9\"]', '--set', 'run.stages=[\"nonsense\"]']\n"
        "console_script()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and "unknown stage(s)" in done.stderr + done.stdout
    assert "warmed {'address': '127.0.0.1:9'} False" in done.stdout


def test_a_worker_started_with_the_preload_imports_the_modules_as_it_starts(tmp_path: Path) -> None:
    """``dask worker ADDRESS --preload corpusforge.pipeline.cluster_warmup``, as the README starts a cluster's workers:
    the job's modules are imported before any build connects (no warm-up sent, no job), out of the worker's
    collections; the scheduler imports none of them."""
    port = free_port()
    dask, address = str(Path(sys.executable).parent / "dask"), f"127.0.0.1:{port}"
    processes = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"], cwd=tmp_path)]
    try:
        preload = ["--preload", "corpusforge.pipeline.cluster_warmup"]
        processes.append(subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-dashboard", *preload], cwd=tmp_path))
        with Client(address, timeout=60) as client:
            client.wait_for_workers(1, timeout=120)
            assert [_everywhere(client, module) for module in WARM_MODULES] == [[False, True]] * len(WARM_MODULES)
            assert min(client.run(gc.get_freeze_count).values()) > 100_000
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=60)
