"""Warming a Dask cluster of separate processes (scheduler included) before a build's first job."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from distributed import Client
from distributed.deploy.subprocess import SubprocessCluster

from corpusforge import build
from corpusforge.build import WARM_MODULES
from corpusforge.core.config import load_config
from corpusforge.pipeline.cluster_warmup import warm_cluster

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


def test_the_scheduler_and_every_worker_import_the_modules_before_any_job(cluster) -> None:
    cluster, client = cluster
    assert _everywhere(client, WARM_MODULES[0]) == [False] * 3  # fresh processes: nothing of ours imported yet
    warm_cluster({"address": cluster.scheduler_address}, WARM_MODULES).join()
    assert _until(lambda: all(all(_everywhere(client, module)) for module in WARM_MODULES))


def test_a_build_on_the_cluster_warms_it_first(cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``colorsys`` is no module a job's graph names: only the warm-up imports it in the cluster."""
    cluster, client = cluster
    monkeypatch.setattr(build, "WARM_MODULES", (*WARM_MODULES, "colorsys"))
    assert _everywhere(client, "colorsys") == [False] * 3
    address = cluster.scheduler_address
    out = json.dumps(str(tmp_path / "out"))
    overrides = [f"run.output_dir={out}", 'run.stages=["books", "clean", "documents"]', 'run.runner="DaskRunner"']
    build.run_build(load_config(DEMO, [*overrides, f'run.beam_args=["--dask_client_address={address}"]']))
    assert _until(lambda: all(_everywhere(client, "colorsys")))


def test_an_unreachable_cluster_is_left_to_the_job_to_report(caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger="corpusforge.pipeline.cluster_warmup"):
        warm_cluster({"address": "tcp://127.0.0.1:9", "timeout": "1s"}, WARM_MODULES).join(timeout=30)
    assert "was not warmed" in caplog.text
