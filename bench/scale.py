"""Corpus-scale build: memory flat in corpus size, every core used, Dask doing the work on its workers.

Makes corpora of distinct ~1 MB books from the shared Gutenberg books' paragraphs (seeded; licence
paragraphs skipped), runs the full default build (books -> clean -> dedup -> near_dedup -> documents
-> vocab -> bert -> gpt) on each as a separate ``corpusforge build`` process, and prints per stage the
wall seconds, then CPU seconds, MB of input per CPU-second and the peak RSS of the launcher and of
every worker process. Then the in-process mode on the corpora up to 400 MB (the default mode's
speed-up, printed with the most it could be: the in-process wall over the default mode's CPU spread
over every core; the vocabulary stage takes the same time in both modes, since HF's trainers are
multi-threaded either way, and its sample is capped, so the speed-up grows with the corpus), and the documents job on a 2-worker and a 1-worker Dask cluster (scheduler and workers in their own
processes, so the launcher's own peak is measured): the wall ratio, and the ratio of cores kept busy
(CPU / wall), which a neighbour slowing one run's CPU does not move. With ``--timeline``, also the seconds in
which no task ran on any worker (the launcher planning and submitting, the scheduler passing a shuffle's small
steps along, the launcher's report): a second worker cannot shorten those, so the 1-worker run's task-less seconds
plus half its task seconds bound the 2-vs-1 ratio (Amdahl's law), whatever the machine; with its task seconds spread at the
pace this machine gave two CPU-bound processes (below one, on a machine whose cores slow each other), they bound it here. With
the 2-worker run's own task seconds instead (the same tasks, two at once: slower where the cores share caches and
memory bandwidth), the bound holds every loss but the schedule's.

With ``--store s3``, instead: the object store's cost. Per size, the full build on a 2-worker Dask
LocalCluster (its own process) twice, interleaved: (A) inputs, temp and output on local disk, (B) all
three on a local S3 server (moto, inputs uploaded first, untimed), the builds reaching it through a
counting TCP proxy (bench/s3_proxy.py) for the bytes read and written on the store. Prints wall, CPU of
the launcher, scheduler and workers (moto's and the proxy's own CPU apart: a real store costs none of
ours), peak RSS per process, store bytes per MB of input, and whether A and B wrote identical data files.

    .venv/bin/python bench/scale.py --sizes 100 400 1000 --dask-size 400
    .venv/bin/python bench/scale.py --store s3 --sizes 400
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
from s3_proxy import CountingProxy

from corpusforge.core import storage

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from corpus_factory import make_books, make_wikipedia  # noqa: E402
from s3_fixture import make_buckets, s3_server, upload  # noqa: E402

SHARED_BOOKS = ROOT.parent / "shared" / "data" / "books"
DOCUMENTS = '["{source}","clean","dedup","near_dedup","documents"]'
FULL = DOCUMENTS.replace('"documents"]', '"documents","vocab","bert","gpt"]')
CLI = [str(Path(sys.executable).parent / "corpusforge"), "build"]
SAMPLE_BOOKS = ROOT / "corpusforge" / "samples" / "books"


class PeakWatcher:
    """Peak RSS of a process and of each of its descendants, sampled every 0.2 s, overall and per stage.

    The stage running is the first of ``stages`` whose marker (``OUT/.stages/<stage>.json``) is not
    written yet; at each marker the CPU seconds of the launcher's tree so far are noted.
    """

    def __init__(self, pids: list[int], out: str | Path | None = None, stages: tuple[str, ...] = ()) -> None:
        self.roots, self.peaks, self.root_of, self._stop = pids, {}, {}, threading.Event()
        self.out, self.stages = out, stages
        self.stage_peaks: dict[str, dict[str, int]] = {s: {"launcher": 0, "workers": 0} for s in stages}
        self.stage_cpu_end: dict[str, float] = {}
        self._dead_cpu: dict[int, float] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _stage(self) -> str | None:
        for stage in self.stages:
            if stage not in self.stage_cpu_end:
                if storage.exists(storage.join(str(self.out), ".stages", f"{stage}.json")):
                    self.stage_cpu_end[stage] = self.tree_cpu()
                    continue
                return stage
        return None

    def tree_cpu(self) -> float:
        """CPU seconds of the launcher and its live descendants, with the children each of them has reaped."""
        if not psutil.pid_exists(self.roots[0]):
            return float("nan")
        return _tree_cpu(self.roots[0], reaped=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            stage = self._stage() if self.out else None
            for root in self.roots:
                for proc in _tree(root):
                    try:
                        rss = proc.memory_info().rss
                    except psutil.Error:
                        continue
                    self.peaks[proc.pid] = max(self.peaks.get(proc.pid, 0), rss)
                    self.root_of[proc.pid] = root
                    if stage and root == self.roots[0]:
                        role = "launcher" if proc.pid == root else "workers"
                        self.stage_peaks[stage][role] = max(self.stage_peaks[stage][role], rss)
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.out:
            self._stage()

    def root_peak(self, root: int) -> int:
        """The largest single process of a root's tree (the root included)."""
        return max((rss for pid, rss in self.peaks.items() if self.root_of[pid] == root), default=0)

    def children_peak(self, root: int) -> int:
        return max((rss for pid, rss in self.peaks.items() if self.root_of[pid] == root and pid != root), default=0)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command(corpus: str | Path, out: str | Path, stages: str, *extra: str) -> list[str]:
    """``corpusforge build`` of one corpus (a books folder or a Wikipedia dump) into ``out``."""
    source = "wikipedia" if str(corpus).endswith(".bz2") else "books"
    return [
        *CLI,
        "--quiet",
        "--set",
        f'{source}.paths=["{corpus}"]',
        "--set",
        f'run.output_dir="{out}"',
        "--set",
        f"run.stages={stages.format(source=source)}",
        *extra,
    ]


def build(corpus: Path, out: Path, stages: str, *extra: str, watch: list[int] | None = None) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = command(corpus, out, stages, *extra)
    cpu0, t0 = children_cpu(), time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(out.with_suffix(".log"), "w"))
    stages_run = tuple(s for s in ("documents", "vocab", "bert", "gpt") if s in stages)
    watcher = PeakWatcher([proc.pid, *(watch or [])], out, stages_run)
    proc.wait()
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    watcher.stop()
    if proc.returncode:
        raise SystemExit(f"build failed ({proc.returncode}): see {out.with_suffix('.log')}")
    manifest = json.loads((out / "manifest.json").read_text())
    return {
        "wall": wall,
        "cpu": cpu,
        "launcher": watcher.peaks.get(proc.pid, 0),
        "workers": watcher.children_peak(proc.pid),
        "others": {pid: watcher.root_peak(pid) for pid in watch or []},
        "stages": manifest["stage_seconds"],
        "stage_peaks": watcher.stage_peaks,
        "stage_cpu": _stage_cpu(watcher, stages_run),
    }


def _stage_cpu(watcher: PeakWatcher, stages: tuple[str, ...]) -> dict[str, float]:
    """CPU seconds per stage from the tree's CPU noted as each stage's marker appeared."""
    out, before = {}, 0.0
    for stage in stages:
        end = watcher.stage_cpu_end.get(stage)
        if end is not None:
            out[stage], before = end - before, end
    return out


def print_stages(r: dict, nbytes: int) -> None:
    for stage, seconds in r["stages"].items():
        if stage == "total":
            continue
        cpu = r["stage_cpu"].get(stage, float("nan"))
        peaks = r["stage_peaks"].get(stage, {"launcher": 0, "workers": 0})
        print(
            f"{'  stage ' + stage:34} {'':8} {seconds:7.1f} {cpu:7.1f} {nbytes / 2**20 / cpu:8.2f} "
            f"{mb(peaks['launcher']):>11} {mb(peaks['workers']):>9}",
            flush=True,
        )


def corpus_of(size_mb: int, work: Path, source: str = "books", page_bytes: int = 4000) -> tuple[Path, int]:
    """(what to build from, its bytes of text): a folder of ~1 MB books, or a Wikipedia multistream
    dump of ~``page_bytes`` articles (the same text as thousands of small documents; at 400 B about
    two thirds of the pages are near-duplicates of another, as web corpora are)."""
    if source == "books":
        corpus = work / f"books-{size_mb}mb"
        if not corpus.is_dir():
            make_books(SHARED_BOOKS, corpus, size_mb << 20, seed=size_mb)
        return corpus, sum(p.stat().st_size for p in corpus.iterdir())
    folder = work / (f"wikipedia-{size_mb}mb" if page_bytes == 4000 else f"wikipedia-{size_mb}mb-{page_bytes}b")
    if not (folder / "text_bytes").is_file():
        _, written = make_wikipedia(SHARED_BOOKS, folder, size_mb << 20, page_bytes=page_bytes, seed=size_mb)
        (folder / "text_bytes").write_text(str(written))
    return folder / "enwiki-multistream.xml.bz2", int((folder / "text_bytes").read_text())


# One CPU-bound job, Python and numpy as the build's work is: about 3 s alone on the development machine.
SPIN = "x = 0\nfor i in range(12_000_000): x += i * i\nimport numpy as np\na = np.random.default_rng(0).random(3_000_000)\nfor _ in range(30): np.sort(a)"


def cpu_model() -> str:
    """The processor as /proc/cpuinfo names it, with its family and model and whether it has AVX-512: the same code
    took 2.0-2.4x the CPU-seconds in every stage on a Zen 3 machine (family 25, no AVX-512) as on a Zen 5 one (26), a
    difference the reference job (pure Python) shows only in part, so a figure is quoted with the processor it ran on."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines() if ":" in line)
    except OSError:
        return platform.processor() or platform.machine()
    info = {key.strip(): value.strip() for key, value in fields.items()}
    avx512 = "yes" if "avx512f" in info.get("flags", "").split() else "no"
    return f"{info.get('model name', '?')}, family {info.get('cpu family', '?')} model {info.get('model', '?')}, AVX-512 {avx512}"


def reference_seconds(runs: int = 5) -> float:
    """CPU seconds of a run of ``SPIN`` alone, the median of ``runs`` (it swings by a fifth within a minute here)."""
    seconds = []
    for _ in range(runs):
        before = children_cpu()
        subprocess.run([sys.executable, "-c", SPIN], check=True)
        seconds.append(children_cpu() - before)
    return statistics.median(seconds)


def machine_speedup(processes: int = 2) -> float:
    """Throughput of ``processes`` copies of one CPU-bound job at once against one alone: on this machine, the most a
    cluster of that many one-thread workers can reach over one worker (neighbours, shared caches, clocks take their share)."""

    def wall(n: int) -> float:
        start = time.perf_counter()
        for job in [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]:
            job.wait()
        return time.perf_counter() - start

    return processes * wall(1) / wall(processes)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def compute_spans(stream: list[dict], start: float) -> list[tuple[float, float]]:
    """(begin, end) of every task's computing in Dask's task stream, in seconds from ``start``."""
    return [(part["start"] - start, part["stop"] - start) for task in stream for part in task["startstops"] if part["action"] == "compute"]


def busy_cores(stream: list[dict], start: float, wall: float, bins: int = 10) -> list[float]:
    """Cores kept busy by tasks in each of ``bins`` equal slices of a run, from Dask's task stream."""
    busy = [0.0] * bins
    width = wall / bins
    for begin, end in compute_spans(stream, start):
        for b in range(max(0, int(begin // width)), min(bins, int(end // width) + 1)):
            busy[b] += max(0.0, min(end, (b + 1) * width) - max(begin, b * width))
    return [seconds / width for seconds in busy]


def taskless_seconds(stream: list[dict], start: float, wall: float) -> tuple[float, float, float]:
    """Seconds of a run in which no task ran on any worker, from Dask's task stream: before the first, between
    tasks, after the last. A second worker cannot shorten these (the launcher plans and submits, the scheduler
    hands on a shuffle's next step, the launcher writes the report): Amdahl's serial part of the run."""
    spans = sorted(compute_spans(stream, start))
    if not spans:
        return wall, 0.0, 0.0
    between, reached = 0.0, spans[0][1]
    for begin, end in spans[1:]:
        between += max(0.0, begin - reached)
        reached = max(reached, end)
    return spans[0][0], between, max(0.0, wall - reached)


def task_seconds(stream: list[dict]) -> float:
    """Seconds the run's tasks computed, summed over workers: the same work on two workers of a machine whose
    cores share caches and memory takes more of them than on one (the slowdown no schedule removes)."""
    return sum(end - begin for begin, end in compute_spans(stream, 0.0))


def _wait_for_workers(address: str, workers: int) -> None:
    from dask.distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(workers, timeout=120)


@contextlib.contextmanager
def _task_stream(address: str) -> Iterator[Any]:
    """The scheduler's task stream while the block runs (its ``data`` after), through a client closed at the end."""
    from dask.distributed import Client, get_task_stream

    with Client(address) as client, get_task_stream(client=client) as stream:
        yield stream


def dask_build(corpus: Path, out: Path, workers: int, timeline: bool = False) -> dict:
    """The documents job on a Dask cluster whose scheduler and workers are their own processes (``timeline``: the
    cores its tasks kept busy in each tenth of the run, from the scheduler's task stream)."""
    port = free_port()
    bin_dir = Path(sys.executable).parent
    scheduler = subprocess.Popen(
        [str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    worker_procs = [  # they wait for the scheduler to listen
        subprocess.Popen(
            [
                str(bin_dir / "dask"),
                "worker",
                f"127.0.0.1:{port}",
                "--nthreads",
                "1",
                "--nworkers",
                "1",
                "--no-dashboard",
                "--memory-limit",
                "0",
                "--preload",  # as the README starts a cluster's workers: the job's modules imported as each starts
                "corpusforge.pipeline.cluster_warmup",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    try:
        _wait_for_workers(f"127.0.0.1:{port}", workers)  # each registers once it has imported Beam and the steps (preload)
        cpu_cluster0 = sum(_tree_cpu(p.pid) for p in [scheduler, *worker_procs])
        start = time.time()
        with _task_stream(f"127.0.0.1:{port}") if timeline else contextlib.nullcontext() as tasks:
            result = build(
                corpus,
                out,
                DOCUMENTS,
                "--set",
                'run.runner="DaskRunner"',
                "--set",
                f'run.beam_args=["--dask_client_address=127.0.0.1:{port}"]',
                watch=[scheduler.pid, *(p.pid for p in worker_procs)],
            )
        if tasks is not None:
            elapsed = time.time() - start
            result["busy"] = busy_cores(tasks.data, start, elapsed)
            result["taskless"] = taskless_seconds(tasks.data, start, elapsed)
            result["task_seconds"] = task_seconds(tasks.data)
        result["cluster_cpu"] = sum(_tree_cpu(p.pid) for p in [scheduler, *worker_procs]) - cpu_cluster0
        result["scheduler"] = result["others"].get(scheduler.pid, 0)
        result["dask_workers"] = max((v for k, v in result["others"].items() if k != scheduler.pid), default=0)
        return result
    finally:
        for proc in [*worker_procs, scheduler]:
            proc.terminate()
        for proc in [*worker_procs, scheduler]:
            proc.wait()


def _tree_cpu(pid: int, reaped: bool = False) -> float:
    """CPU seconds of a process and its live descendants; ``reaped``: with the exited children each one waited
    for (a forkserver reaps the workers it forked: their time is then its, not the launcher's)."""
    total = 0.0
    for proc in _tree(pid):
        try:
            times = proc.cpu_times()
            total += times.user + times.system + (times.children_user + times.children_system if reaped else 0.0)
        except psutil.Error:
            pass
    return total


def _tree(pid: int) -> list[psutil.Process]:
    """A process and its live descendants (none once it has exited)."""
    try:
        return [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


# --- --store s3: the same build on local disk and on an object store ------------------------------

BUCKETS = ("bench-in", "bench-out")
STORE_STAGES = ("documents", "vocab", "bert", "gpt")
DATA = ("documents", "rejects", "vocab", "shards")  # what a build makes from its inputs (manifests also record paths and times)
CLUSTER_SCRIPT = """
import json, os, sys
import dask
from distributed import Client, LocalCluster
dask.config.set({"distributed.worker.daemon": False})  # the workers may start processes, as on a real cluster
with (
    LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None, memory_limit=0) as cluster,
    Client(cluster) as client,
):
    pids = sorted(client.run(os.getpid).values())
    print(json.dumps({"address": cluster.scheduler_address, "workers": pids}), flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
"""


class Cluster:
    """A 2-worker Dask LocalCluster in its own process (scheduler and nannies there, a process per worker),
    so the launcher's, the scheduler's and each worker's CPU and memory are measured apart."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log

    def __enter__(self) -> Cluster:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CLUSTER_SCRIPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.log, "w"),
            env=self.env,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the Dask cluster did not start: see {self.log}")
        started = json.loads(line)
        self.address, self.workers = started["address"], started["workers"]
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of the scheduler's process (nannies included) and of the workers."""
        return {"scheduler": _own_cpu(self.proc.pid), "workers": sum(_live_cpu(pid) for pid in self.workers)}


def _own_cpu(pid: int) -> float:
    """CPU seconds of one process and of its children it has reaped."""
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system + t.children_user + t.children_system


def _live_cpu(pid: int) -> float:
    """CPU seconds of a process, its live descendants and every child any of them has reaped."""
    return sum(_own_cpu(proc.pid) for proc in _tree(pid))


def store_build(corpus: str, out: str, temp: str, env: dict[str, str], log: Path, moto: int, proxy: CountingProxy) -> dict:
    """The full build on a fresh 2-worker cluster; CPU per process group, peak RSS per process, store bytes."""
    cache = log.with_suffix(".shard-cache")  # the report reads shards behind a URI through this cache: empty, as on a fresh launcher
    for path in (out, temp, str(cache)):
        storage.remove_tree(path)
    env = {**env, "CORPUSFORGE_CACHE": str(cache)}
    extra = ["--set", f'run.temp_location="{temp}"', "--set", 'run.runner="DaskRunner"']
    with Cluster(env, log.with_suffix(".cluster.log")) as cluster:
        cmd = command(corpus, out, FULL, *extra, "--set", f'run.beam_args=["--dask_client_address={cluster.address}"]')
        cluster0, moto0, proxy0, bytes0, kinds0 = cluster.cpu(), _live_cpu(moto), proxy.cpu_seconds(), proxy.counts(), proxy.breakdown()
        cpu0, t0 = children_cpu(), time.perf_counter()
        launcher = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "w"), env=env)
        watcher = PeakWatcher([launcher.pid, cluster.proc.pid], out, STORE_STAGES)
        launcher.wait()
        wall, launcher_cpu = time.perf_counter() - t0, children_cpu() - cpu0
        cluster1, moto1, proxy1, bytes1, kinds1 = cluster.cpu(), _live_cpu(moto), proxy.cpu_seconds(), proxy.counts(), proxy.breakdown()
        watcher.stop()
    if launcher.returncode:
        raise SystemExit(f"build failed ({launcher.returncode}): see {log}")
    return {
        "wall": wall,
        "cpu": {"launcher": launcher_cpu, **{k: cluster1[k] - cluster0[k] for k in cluster0}},
        "moto_cpu": moto1 - moto0,
        "proxy_cpu": proxy1 - proxy0,
        "written": bytes1["to_store"] - bytes0["to_store"],
        "read": bytes1["from_store"] - bytes0["from_store"],
        "kinds": {kind: {k: v - kinds0.get(kind, {}).get(k, 0) for k, v in counts.items()} for kind, counts in kinds1.items()},
        "launcher": watcher.peaks.get(launcher.pid, 0),
        "launcher_children": watcher.children_peak(launcher.pid),
        "scheduler": watcher.peaks.get(cluster.proc.pid, 0),
        "workers": [watcher.peaks.get(pid, 0) for pid in cluster.workers],
        "stages": storage.read_json(storage.join(out, "manifest.json"))["stage_seconds"],
        "stage_launcher": {stage: peaks["launcher"] for stage, peaks in watcher.stage_peaks.items()},
    }


def data_digests(out: str) -> dict[str, str]:
    """sha256 of every data file a build wrote, by path relative to its output folder."""
    return {
        storage.relative(path, out): storage.sha256(path)
        for folder in DATA
        for path in storage.files_under(storage.join(out, folder))
        if storage.name(path) != "manifest.json"
    }


def _moto_pid() -> int:
    """The moto server that ``s3_server`` started as our child."""
    for child in psutil.Process().children():
        if any("moto_server" in part for part in child.cmdline()):
            return child.pid
    raise RuntimeError("no moto_server child found")


def store_mode(sizes: list[int], work: Path, source: str, repeat: int) -> None:
    """Per size, the full build with everything on local disk and with everything on S3, interleaved."""
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"machine: {os.cpu_count()} cores ({cpu_model()}), load average {load} at start; source: {source}; each run: a fresh 2-worker Dask LocalCluster (1 thread a worker)"
    )
    print(
        "S3: moto_server on 127.0.0.1 behind a counting TCP proxy; store MB counts HTTP bodies and headers (requests ~ written, responses ~ read)"
    )
    print("CPU s = launcher + scheduler (with nannies) + workers; moto's and the proxy's CPU apart (a real store costs none of ours)\n")
    header = (
        f"{'run':14} {'input MB':>8} {'wall s':>7} {'CPU s':>7} {'launcher':>8} {'sched':>6} {'workers':>7} {'moto':>6} {'proxy':>6}"
        f" {'launcher MB':>11} {'sched MB':>8} {'worker MB':>11} {'read MB/MB':>10} {'written MB/MB':>13}"
    )
    summary = {}
    with s3_server() as env:  # the benchmark reaches moto directly (uploads, checks: not counted); builds through the proxy
        moto = _moto_pid()
        make_buckets(*BUCKETS)
        host, port = env["AWS_ENDPOINT_URL"].removeprefix("http://").rsplit(":", 1)
        with CountingProxy(host, int(port)) as proxy:
            build_env = {**os.environ, "AWS_ENDPOINT_URL": proxy.endpoint, "AWS_ENDPOINT_URL_S3": proxy.endpoint}
            for size in sizes:
                corpus, nbytes = corpus_of(size, work, source)
                remote = f"s3://{BUCKETS[0]}/{corpus.name}"
                upload(corpus, remote)
                print(header, flush=True)
                runs = []
                for i in range(1, repeat + 1):
                    local_out = work / f"store-local-{size}"
                    a = store_build(
                        str(corpus),
                        str(local_out / "out"),
                        str(local_out / "tmp"),
                        build_env,
                        work / f"store-local-{size}.log",
                        moto,
                        proxy,
                    )
                    print_store_row(f"local disk #{i}", a, nbytes)
                    b_out, b_tmp = f"s3://{BUCKETS[1]}/run-{size}", f"s3://{BUCKETS[1]}/tmp-{size}"
                    b = store_build(remote, b_out, b_tmp, build_env, work / f"store-s3-{size}.log", moto, proxy)
                    print_store_row(f"S3 (moto) #{i}", b, nbytes)
                    print_identity(data_digests(str(local_out / "out")), data_digests(b_out))
                    print_kinds(b["kinds"], nbytes)
                    print_stage_seconds(a, b)
                    runs.append((a, b))
                    for path in (b_out, b_tmp):
                        storage.remove_tree(path)
                storage.remove_tree(remote)
                summary[size] = print_ratios(size, runs)
                print(flush=True)
    print_store_targets(summary, max(sizes))


def print_store_row(label: str, r: dict, nbytes: int) -> None:
    mb_in = nbytes / 2**20
    cpu = r["cpu"]
    children = f"  (launcher's children: {mb(r['launcher_children'])} MB)" if r["launcher_children"] else ""
    print(
        f"{label:14} {mb_in:8.0f} {r['wall']:7.1f} {sum(cpu.values()):7.1f} {cpu['launcher']:8.1f} {cpu['scheduler']:6.1f} {cpu['workers']:7.1f}"
        f" {r['moto_cpu']:6.1f} {r['proxy_cpu']:6.1f} {mb(r['launcher']):>11} {mb(r['scheduler']):>8} {'/'.join(mb(w) for w in r['workers']):>11}"
        f" {r['read'] / 2**20 / mb_in:10.2f} {r['written'] / 2**20 / mb_in:13.2f}{children}",
        flush=True,
    )


def print_identity(local: dict[str, str], remote: dict[str, str]) -> None:
    differ = sorted(p for p in local.keys() | remote.keys() if local.get(p) != remote.get(p))
    folders = ", ".join(DATA)
    if differ:
        print(f"  data files ({folders}): {len(differ)} DIFFER: {', '.join(differ[:10])}", flush=True)
    else:
        print(f"  data files ({folders}): {len(local)} files, byte-identical on local disk and on S3", flush=True)


def print_kinds(kinds: dict[str, dict[str, int]], nbytes: int, top: int = 8) -> None:
    """Where the store traffic goes: the kinds of request that moved the most bytes (numbers in names as #)."""
    heavy = sorted(kinds.items(), key=lambda item: -(item[1].get("from_store", 0) + item[1].get("to_store", 0)))
    print("  heaviest requests on S3 (count; MB read and MB written per MB of input):", flush=True)
    for kind, c in heavy[:top]:
        read, written = (c.get(k, 0) / nbytes for k in ("from_store", "to_store"))
        print(f"    {c.get('requests', 0):7d} {read:7.2f} {written:7.2f}  {kind}", flush=True)


def print_stage_seconds(a: dict, b: dict) -> None:
    stages = ", ".join(f"{s} {a['stages'][s]:.1f}/{b['stages'].get(s, float('nan')):.1f}" for s in a["stages"] if s != "total")
    print(f"  stage seconds, local/S3: {stages}", flush=True)
    peaks = ", ".join(f"{s} {mb(a['stage_launcher'][s])}/{mb(b['stage_launcher'][s])}" for s in STORE_STAGES)
    print(f"  launcher peak MB per stage, local/S3: {peaks}", flush=True)


def print_ratios(size: int, runs: list[tuple[dict, dict]]) -> dict[str, float]:
    """S3 over local at one size, from the medians of the runs (interleaved, so load drifts hit both)."""
    med = lambda f, side: statistics.median(f(run[side]) for run in runs)  # noqa: E731
    cpu = lambda r: sum(r["cpu"].values())  # noqa: E731
    ratios = {
        "wall": med(lambda r: r["wall"], 1) / med(lambda r: r["wall"], 0),
        "cpu": med(cpu, 1) / med(cpu, 0),
        "cpu_moto": med(lambda r: cpu(r) + r["moto_cpu"], 1) / med(lambda r: cpu(r) + r["moto_cpu"], 0),
        "launcher": max(max(a["launcher"], b["launcher"]) for a, b in runs),
        "workers": max(max(a["workers"] + b["workers"]) for a, b in runs),
        "read": med(lambda r: r["read"], 1),
        "written": med(lambda r: r["written"], 1),
        "proxy_cpu": med(lambda r: r["proxy_cpu"], 1),
    }
    print(
        f"  at {size} MB, S3 / local (medians of {len(runs)}): wall {ratios['wall']:.2f}x, CPU {ratios['cpu']:.2f}x without moto's CPU, "
        f"{ratios['cpu_moto']:.2f}x with it",
        flush=True,
    )
    return ratios


def print_store_targets(summary: dict[int, dict[str, float]], size: int) -> None:
    r = summary[size]
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"targets at {size} MB (load average {load} at the end):")
    print(f"  launcher peak RSS: {mb(r['launcher'])} MB, the larger of local and S3 (target <= 500); largest worker: {mb(r['workers'])} MB")
    print(
        f"  on the store per MB of input: read {r['read'] / 2**20 / size:.2f} MB, written {r['written'] / 2**20 / size:.2f} MB (nominal MB)"
    )
    print(f"  CPU with moto's own CPU counted: {r['cpu_moto']:.2f}x; the proxy's own CPU on S3 (in neither): {r['proxy_cpu']:.1f} s")
    print(f"object store / local: wall {r['wall']:.2f}x, CPU {r['cpu']:.2f}x (moto's own CPU excluded)")


def mb(value: float) -> str:
    return f"{value / 2**20:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=None, help="corpus sizes in MB (default: 100 400 1000; with --store s3: 400)"
    )
    parser.add_argument("--source", choices=["books", "wikipedia"], default="books", help="~1 MB books or ~4 KB Wikipedia articles")
    parser.add_argument("--page-bytes", type=int, default=4000, help="with --source wikipedia: wikitext bytes per page")
    parser.add_argument(
        "--inproc-sizes",
        type=int,
        nargs="*",
        default=None,
        help="sizes also built in_memory for the speed-up (default: those up to 400 MB)",
    )
    parser.add_argument(
        "--plus-books",
        action="store_true",
        help="the full builds also read the bundled books: two sources, as a BERT build of books and Wikipedia reads",
    )
    parser.add_argument("--dask-size", type=int, default=400, help="corpus for the Dask comparison (0: skip)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/corpusforge-scale"))
    parser.add_argument("--store", choices=["local", "s3"], default="local", help="s3: the same build on local disk and on S3, compared")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each, interleaved: with --store s3, local and S3; else Dask 2 and 1 workers"
    )
    parser.add_argument(
        "--timeline", action="store_true", help="Dask runs: the cores their tasks kept busy in each tenth of the run (Dask's task stream)"
    )
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.store == "s3":
        store_mode(args.sizes or [400], args.work, args.source, args.repeat)
        return
    args.sizes = args.sizes or [100, 400, 1000]
    inproc_sizes = [s for s in args.sizes if s <= 400] if args.inproc_sizes is None else args.inproc_sizes
    # "default mode": a worker process per core, set explicitly (the auto default runs stages under
    # run.in_process_bytes in this process, and these rows measure the worker processes at every size)
    print(f"machine: {os.cpu_count()} cores ({cpu_model()}); default mode = multi_processing, one worker per core; source: {args.source}")
    # This shared machine's speed drifts by a quarter between days: a fixed job's time lets figures of two runs be compared.
    print(f"machine speed: the reference job (bench/scale.py SPIN) alone takes {reference_seconds():.2f} CPU-s (median of 5)", flush=True)
    print(f"{'run':34} {'input MB':>8} {'wall s':>7} {'CPU s':>7} {'MB/CPU-s':>8} {'launcher MB':>11} {'worker MB':>9}")
    full, more = FULL, ()
    if args.plus_books:  # a second source: a Flatten of several inputs is where the in-process runners hold elements
        full, more = FULL.replace('"{source}"', '"books","{source}"'), ("--set", f"books.paths={json.dumps([str(SAMPLE_BOOKS)])}")
        print(f"plus the bundled books ({SAMPLE_BOOKS}) as a second source in the full builds")
    rows, inproc = {}, {}
    for size in args.sizes:
        corpus, nbytes = corpus_of(size, args.work, args.source, args.page_bytes)
        r = build(corpus, args.work / f"out-{size}", full, *more, "--set", 'run.direct_running_mode="multi_processing"')
        rows[size] = r
        print(
            f"{'full build, default mode':34} {nbytes / 2**20:8.0f} {r['wall']:7.1f} {r['cpu']:7.1f} {nbytes / 2**20 / r['cpu']:8.2f} "
            f"{mb(r['launcher']):>11} {mb(r['workers']):>9}",
            flush=True,
        )
        print_stages(r, nbytes)
    for size in inproc_sizes:
        corpus, nbytes = corpus_of(size, args.work, args.source, args.page_bytes)
        r = inproc[size] = build(corpus, args.work / f"out-{size}-inproc", full, *more, "--set", 'run.direct_running_mode="in_memory"')
        print(
            f"{'full build, in_memory (1 process)':34} {nbytes / 2**20:8.0f} {r['wall']:7.1f} {r['cpu']:7.1f} "
            f"{nbytes / 2**20 / r['cpu']:8.2f} {mb(r['launcher']):>11} {'-':>9}",
            flush=True,
        )
        print_stages(r, nbytes)
    if args.dask_size:
        corpus, nbytes = corpus_of(args.dask_size, args.work, args.source, args.page_bytes)
        ratios, equal_cpu, ceiling, bounds, amdahl, amdahl_here, slowdown, amdahl_tasks = [], [], [], [], [], [], [], []
        for _ in range(args.repeat):  # interleaved: 2, 1, 2, 1, ... (one run pair swung from 1.75x to 2.31x here)
            ceiling.append(machine_speedup(2))
            dask = {n: dask_build(corpus, args.work / f"out-dask{n}", n, args.timeline) for n in (2, 1)}
            ratios.append(dask[1]["wall"] / dask[2]["wall"])
            # The same job's CPU swings by up to 30% between runs on a shared machine, and the wall with it:
            # cores kept busy (CPU / wall) is what the second worker changes, whatever the neighbours do.
            equal_cpu.append((dask[2]["cluster_cpu"] / dask[2]["wall"]) / (dask[1]["cluster_cpu"] / dask[1]["wall"]))
            # No schedule beats the 2-worker run's CPU (cluster and launcher) spread over every core of this machine.
            bounds.append(dask[1]["wall"] / ((dask[2]["cluster_cpu"] + dask[2]["cpu"]) / (os.cpu_count() or 1)))
            for n, r in dask.items():
                print(
                    f"{f'documents job, Dask {n} worker(s)':34} {nbytes / 2**20:8.0f} {r['wall']:7.1f} {r['cluster_cpu']:7.1f} "
                    f"{nbytes / 2**20 / max(r['cluster_cpu'], 1e-9):8.2f} {mb(r['launcher']):>11} {mb(r['dask_workers']):>9}  "
                    f"scheduler {mb(r['scheduler'])} MB",
                    flush=True,
                )
                if "busy" in r:
                    print(f"  cores its tasks kept busy, by tenth of the run: {' '.join(f'{b:.2f}' for b in r['busy'])}", flush=True)
                    first, between, last = r["taskless"]
                    print(
                        f"  no task running for {first + between + last:.1f} s of {r['wall']:.1f}: {first:.1f} s before the first, "
                        f"{between:.1f} s between tasks, {last:.1f} s after the last; its tasks computed for {r['task_seconds']:.1f} s in all",
                        flush=True,
                    )
            if args.timeline:
                # The 1-worker run's task-less seconds as they are, its task seconds split evenly over 2 workers.
                serial = sum(dask[1]["taskless"])
                amdahl.append(dask[1]["wall"] / (serial + (dask[1]["wall"] - serial) / 2))
                # ... and spread at the pace this machine gave two CPU-bound processes in that pair, not halved.
                amdahl_here.append(dask[1]["wall"] / (serial + (dask[1]["wall"] - serial) / ceiling[-1]))
                # ... and the 2-worker run's own task seconds (its tasks as slow as they were), split evenly over 2 workers.
                slowdown.append(dask[2]["task_seconds"] / dask[1]["task_seconds"])
                amdahl_tasks.append(dask[1]["wall"] / (serial + dask[2]["task_seconds"] / 2))
    print("\ntargets:")
    small, big = min(args.sizes), max(args.sizes)
    peak = lambda r: max(r["launcher"], r["workers"])  # noqa: E731
    if big != small:
        print(f"  peak RSS at {big} MB / at {small} MB: {peak(rows[big]) / peak(rows[small]):.2f} (target <= 1.25)")
    print(f"  largest process: {mb(max(peak(r) for r in rows.values()))} MB (target <= 1024)")
    total_mb = sum(corpus_of(s, args.work, args.source, args.page_bytes)[1] for s in args.sizes) / 2**20
    speed = 1.5 if args.source == "books" else 1.0  # issue 24: books at 1 GB, Wikipedia-shaped articles at 100 MB
    print(f"  end to end: {total_mb / sum(r['cpu'] for r in rows.values()):.2f} MB of input per CPU-second (target >= {speed})")
    for size, r in inproc.items():
        if size in rows:
            # No schedule beats the default mode's CPU spread over every core: the most its speed-up can be.
            bound = r["wall"] / (rows[size]["cpu"] / (os.cpu_count() or 1))
            print(
                f"  default mode vs in_memory, wall at {size} MB: {r['wall'] / rows[size]['wall']:.2f}x (target >= 1.6 on 2 cores; "
                f"at most {bound:.2f}x with its CPU on every core)"
            )
    if args.dask_size:
        print(
            f"  Dask launcher peak: {mb(dask[2]['launcher'])} MB (target <= 500); 2 workers vs 1: "
            f"{statistics.median(ratios):.2f}x (target >= 1.8{'; median of ' + ', '.join(f'{r:.2f}' for r in ratios) if len(ratios) > 1 else ''}; "
            f"at most {statistics.median(bounds):.2f}x with the 2-worker run's CPU on every core)"
        )
        print(
            f"  at equal CPU (cores busy, 2 workers / 1): {statistics.median(equal_cpu):.2f}x"
            f"{' (median of ' + ', '.join(f'{r:.2f}' for r in equal_cpu) + ')' if len(equal_cpu) > 1 else ''}"
        )
        if amdahl:
            print(
                f"  with the 1-worker run's seconds without a task as they are and its task seconds halved: at most "
                f"{statistics.median(amdahl):.2f}x{' (median of ' + ', '.join(f'{r:.2f}' for r in amdahl) + ')' if len(amdahl) > 1 else ''}"
            )
            print(
                f"  ... and its task seconds spread at this machine's own 2-vs-1 below instead: at most "
                f"{statistics.median(amdahl_here):.2f}x{' (median of ' + ', '.join(f'{r:.2f}' for r in amdahl_here) + ')' if len(amdahl_here) > 1 else ''}"
            )
            print(
                f"  ... and the 2-worker run's own task seconds split evenly instead ({statistics.median(slowdown):.2f}x the 1-worker "
                f"run's: the same tasks, two at once): at most {statistics.median(amdahl_tasks):.2f}x"
                f"{' (median of ' + ', '.join(f'{r:.2f}' for r in amdahl_tasks) + ')' if len(amdahl_tasks) > 1 else ''}"
            )
        print(
            f"  this machine, 2 CPU-bound processes at once vs 1 alone (the most 2 workers can reach): {statistics.median(ceiling):.2f}x"
            f"{' (median of ' + ', '.join(f'{r:.2f}' for r in ceiling) + ')' if len(ceiling) > 1 else ''}"
        )


if __name__ == "__main__":
    main()
