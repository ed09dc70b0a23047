"""The WebText build under Dask (2 worker processes): live fetches from the local server, then the
in-process runner replays the WARCs Dask wrote and must produce byte-identical documents and rejects."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from http_fixture import LocalServer, extract_pages
from test_webtext_job import FETCH, write_dumps

from corpusforge.build import run_build
from corpusforge.core.config import Config
from corpusforge.pipeline.documents_io import output_files


def _config(out: Path, dumps: list[Path], warc_dir: Path, **run: object) -> Config:
    return Config.model_validate(
        {
            "run": {"output_dir": str(out), "stages": ["webtext", "documents"], **run},
            "webtext": {
                "dumps": [str(p) for p in dumps],
                "exclude_over_18": True,
                "warc_dir": str(warc_dir),
                "fetch": FETCH,
                "extract": {"languages": [], "timeout_s": 20, "min_words": 30},
            },
        }
    )


def _digests(out: Path) -> dict[str, str]:
    files = output_files(out / "documents") + output_files(out / "rejects")
    return {f"{f.parent.name}/{f.name}": hashlib.sha256(f.read_bytes()).hexdigest() for f in map(Path, files)}


@pytest.mark.slow
def test_webtext_build_on_dask_matches_in_process_replay(shared_data: Path, tmp_path: Path) -> None:
    import dask
    from dask.distributed import Client, LocalCluster

    pages = extract_pages(shared_data, tmp_path, count=6)
    warc_dir = tmp_path / "warc"
    with LocalServer(pages) as server:
        dumps, fault_reasons, submitted = write_dumps(server, pages, tmp_path)
        # Extraction runs in a guarded child process (a hung page cannot stall the worker): Dask workers
        # must be allowed children, as with `distributed.worker.daemon: false` on a real cluster.
        with (
            dask.config.set({"distributed.worker.daemon": False}),
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None) as cluster,
            Client(cluster),
        ):
            dask_cfg = _config(
                tmp_path / "dask", dumps, warc_dir, runner="DaskRunner", beam_args=[f"--dask_client_address={cluster.scheduler_address}"]
            )
            result = run_build(dask_cfg)
    stats = result.stats["webtext"]
    assert stats.inputs == submitted, "every submission ends as a document or a reject"
    assert stats.documents >= 6
    rejects = pq.read_table(output_files(tmp_path / "dask" / "rejects")).to_pylist()
    by_key = {r["key"]: r["reason"] for r in rejects}
    assert {url: by_key.get(url) for url in fault_reasons} == fault_reasons

    offline = _config(tmp_path / "replay", dumps, warc_dir).model_copy(deep=True)
    offline.webtext.offline = True
    run_build(offline)
    assert _digests(tmp_path / "replay") == _digests(tmp_path / "dask")
    manifest = json.loads((tmp_path / "dask" / "manifest.json").read_text())
    assert manifest["counters"]["webtext"]["inputs"] == submitted
