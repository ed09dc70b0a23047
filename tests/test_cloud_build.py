"""A build as it runs on a cloud cluster: inputs, temp and output on an object store (a real S3 server on
127.0.0.1), the jobs on a 2-worker Dask cluster whose workers share no folder with each other or with the
launcher. Its documents, vocabularies and shards are byte-identical to a local in-process build; a killed
launcher resumes; a second build on the same folder is refused; a stale lock is taken over; a killed worker
costs nothing but time."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_fixture import make_buckets, s3_server, upload

from corpusforge.build import run_build
from corpusforge.core import storage
from corpusforge.core.config import Config
from corpusforge.markers import describe_inputs, identity

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "corpusforge" / "samples"
STAGES = ["books", "wikipedia", "webtext", "clean", "dedup", "near_dedup", "documents", "vocab", "bert", "gpt"]
DATA = ("documents", "rejects", "vocab", "shards")  # what a build makes from its inputs (manifests also record paths and times)


@pytest.fixture(scope="module")
def inputs(shared_data: Path) -> Iterator[dict[str, Any]]:
    """The bundled sample plus a real Reddit dump and two real WARC captures, uploaded to s3://corpus-in."""
    with s3_server() as env:
        make_buckets("corpus-in", "corpus-out")
        upload(SAMPLES / "books", "s3://corpus-in/books")
        upload(SAMPLES / "wikipedia", "s3://corpus-in/wikipedia")
        upload(shared_data / "reddit" / "RS_v2_2005-06.xz", "s3://corpus-in/reddit/RS_v2_2005-06.xz")
        upload(shared_data / "html" / "warc", "s3://corpus-in/warc")
        local = {
            "books": str(SAMPLES / "books"),
            "wikipedia": str(SAMPLES / "wikipedia" / "sample-pages-articles.xml"),
            "dump": str(shared_data / "reddit" / "RS_v2_2005-06.xz"),
            "warc": str(shared_data / "html" / "warc"),
        }
        remote = {
            "books": "s3://corpus-in/books",
            "wikipedia": "s3://corpus-in/wikipedia/sample-pages-articles.xml",
            "dump": "s3://corpus-in/reddit/RS_v2_2005-06.xz",
            "warc": "s3://corpus-in/warc",
        }
        yield {"env": env, "local": local, "remote": remote}


def config(paths: dict[str, str], out: str, temp: str | None = None, **run: Any) -> Config:
    return Config.model_validate(
        {
            "run": {"output_dir": out, "temp_location": temp, "stages": STAGES, **run},
            "books": {"paths": [paths["books"]]},
            "wikipedia": {"paths": [paths["wikipedia"]]},
            "webtext": {"dumps": [paths["dump"]], "warc_dir": paths["warc"], "offline": True},
            "clean": {"min_words": 20, "language": "en"},
            "bert": {"max_seq_length": 128, "max_predictions_per_seq": 20, "dupe_factor": 2},
            "gpt": {"seq_len": 128},
        }
    )


def data_digests(out: str) -> dict[str, str]:
    return {
        storage.relative(path, out): hashlib.sha256(storage.read_bytes(path)).hexdigest()
        for folder in DATA
        for path in storage.files_under(storage.join(out, folder))
        if storage.name(path) != "manifest.json"
    }


@pytest.fixture(scope="module")
def reference(inputs: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The same build on local disk with the in-process runner."""
    out = str(tmp_path_factory.mktemp("local") / "out")
    run_build(config(inputs["local"], out, direct_running_mode="in_memory"))
    digests = data_digests(out)
    assert {p.split("/")[0] for p in digests} == set(DATA) and any(p.startswith("shards/gpt/train-") for p in digests)
    return digests


def test_inputs_on_s3_are_never_read_by_the_launcher(inputs: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """An object's ETag identifies its content: hashing it meant pulling every input byte through the launcher
    before the job began (the whole corpus, on a first build), and S3 keeps no mtime to skip it by later."""
    books = [f"s3://corpus-in/tagged/{name}.txt" for name in ("a", "b")]
    for book in books:
        storage.write_text(book, f"the text of {book}\n")
    monkeypatch.setattr(storage, "sha256", lambda path: pytest.fail(f"the launcher read {path}"))
    first = describe_inputs(books, [])
    assert all(entry["content_tag"] and "sha256" not in entry for entry in first)
    assert describe_inputs(books, first) == first
    storage.write_text(books[1], storage.read_text(books[1]).upper())  # the same size, other bytes
    second = describe_inputs(books, first)
    assert second[0] == first[0] and second[1]["bytes"] == first[1]["bytes"]
    assert identity(second[1]) != identity(first[1])  # so the documents stage's fingerprint changes


@pytest.mark.slow
def test_full_build_on_s3_and_dask_without_a_shared_folder(inputs: dict[str, Any], reference: dict[str, str], tmp_path: Path) -> None:
    import dask
    from distributed import Client, Nanny, Scheduler, SpecCluster

    private = {name: tmp_path / f"worker-{name}" for name in ("a", "b")}
    workers = {}
    for name, folder in private.items():
        (folder / "tmp").mkdir(parents=True)
        env = {**inputs["env"], "TMPDIR": str(folder / "tmp")}
        workers[name] = {"cls": Nanny, "options": {"nthreads": 1, "local_directory": str(folder), "env": env}}
    launcher_tmp = tmp_path / "launcher-tmp"
    launcher_tmp.mkdir()
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": None}}
    with (
        dask.config.set({"distributed.worker.daemon": False}),
        SpecCluster(workers=workers, scheduler=scheduler) as cluster,
        Client(cluster) as client,
    ):
        killer = WorkerKiller(client, "s3://corpus-out/run-tmp/documents/completions")
        saved, tempfile.tempdir = tempfile.tempdir, str(launcher_tmp)
        try:
            cfg = config(
                inputs["remote"],
                "s3://corpus-out/run",
                "s3://corpus-out/run-tmp",
                runner="DaskRunner",
                beam_args=[f"--dask_client_address={cluster.scheduler_address}"],
            )
            with killer:
                result = run_build(cfg)
        finally:
            tempfile.tempdir = saved
    assert killer.killed, "a worker was killed while the documents job ran"
    assert result.ran.keys() == {"documents", "vocab", "bert", "gpt"}
    assert data_digests("s3://corpus-out/run") == reference
    assert storage.walk("s3://corpus-out/run-tmp") == []
    assert list(launcher_tmp.iterdir()) == []
    for folder in private.values():  # nothing of ours: Dask's own scratch locks at most
        left = [p for p in folder.rglob("*") if p.is_file() and "dask-scratch-space" not in p.parts]
        if str(folder / "tmp") == killer.tmpdir:  # a write cut by the SIGKILL leaves its private scratch folder
            left = [p for p in left if not p.relative_to(folder / "tmp").parts[0].startswith("corpusforge-")]
        assert left == [], left
    manifest = storage.read_json("s3://corpus-out/run/manifest.json")
    assert manifest["counters"]["webtext"]["inputs"] > 0 and manifest["stages"] == dict.fromkeys(
        ["documents", "vocab", "bert", "gpt"], "ran"
    )


class WorkerKiller:
    """SIGKILLs one Dask worker process once the documents job has finished a read task: the scheduler
    must run its tasks again elsewhere (each rewrites its own spill file)."""

    def __init__(self, client: Any, watch: str) -> None:
        self.client, self.watch, self.killed = client, watch, False
        self.tmpdir: str | None = None  # the killed worker's TMPDIR
        self._stop = False

    def __enter__(self) -> WorkerKiller:
        import threading

        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._thread.join()

    def _run(self) -> None:
        while not self._stop and not self.killed:
            if storage.listdir(self.watch):
                pids = self.client.run(os.getpid)
                address, pid = min(pids.items(), key=lambda item: item[1])
                self.tmpdir = self.client.run(lambda: os.environ["TMPDIR"], workers=[address])[address]
                os.kill(pid, signal.SIGKILL)
                self.killed = True
            time.sleep(0.2)


BUILD_SCRIPT = """
import json, sys
from corpusforge.build import run_build
from corpusforge.core.config import Config
run_build(Config.model_validate(json.loads(sys.argv[1])))
"""


@pytest.mark.slow
@pytest.mark.kills_launcher
def test_killed_launcher_resumes_and_the_lock_holds(inputs: dict[str, Any], reference: dict[str, str]) -> None:
    out, temp = "s3://corpus-out/killed", "s3://corpus-out/killed-tmp"
    cfg = config(inputs["remote"], out, temp, direct_running_mode="in_memory", lock_lease_s=4.0)
    launcher = subprocess.Popen([sys.executable, "-c", BUILD_SCRIPT, cfg.model_dump_json()], cwd=ROOT, env={**os.environ, **inputs["env"]})
    completions = f"{temp}/documents/completions"
    deadline = time.monotonic() + 300
    while not storage.listdir(completions):
        assert launcher.poll() is None and time.monotonic() < deadline, "the build ended before any read task finished"
        time.sleep(0.1)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    finished = len(storage.listdir(completions))
    assert not storage.exists(f"{out}/manifest.json") and storage.exists(f"{out}/.stages/build.lock")

    with pytest.raises(ValueError, match=r"another corpusforge build is writing s3://corpus-out/killed"):
        run_build(cfg)  # the killed launcher's lease is still fresh: as for a live build, refused
    time.sleep(4.5)  # not renewed for lock_lease_s: left by a killed launcher, taken over
    result = run_build(cfg)
    assert result.ran["documents"].startswith("no earlier result; resumed: ")
    assert int(result.ran["documents"].split("resumed: ")[1].split()[0].replace(",", "")) == finished >= 1
    assert data_digests(out) == reference
    assert storage.walk(temp) == [] and not storage.exists(f"{out}/.stages/build.lock")
    assert json.loads(storage.read_bytes(f"{out}/manifest.json"))["stages"]["documents"] == "ran"
    again = run_build(cfg)  # the inputs known by their ETags: a build run again finds every stage unchanged
    assert again.ran == {} and set(again.reused) == set(result.ran)
