"""Resume: a fresh build vs a re-run of the finished build vs a re-run after kill -9 at about half way.

Each build is a separate ``corpusforge build`` process (documents -> vocab -> bert -> gpt, Beam's
default mode) on the 25 shared English books and the shared English Wikipedia excerpt. Prints each
wall time beside the fresh build's (a ratio), the stage the kill landed in, the stages the resumed
build reused and their share of the fresh build's stage time, and whether the resumed outputs are
byte-identical to the fresh build's (documents, rejects, BPE, GPT shards; WordPiece and BERT shards
only compared when the WordPiece vocabulary came out identical).

    .venv/bin/python bench/resume.py [--kill-at 0.5] [--mode multi_processing]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
BOOKS = SHARED / "books" / "en"
WIKIPEDIA = SHARED / "wikipedia" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
CLI = str(Path(sys.executable).parent / "corpusforge")
STAGES = '["books","wikipedia","clean","dedup","near_dedup","documents","vocab","bert","gpt"]'


def command(out: Path, mode: str) -> list[str]:
    sets = [
        f"run.output_dir={json.dumps(str(out))}",
        f"run.stages={STAGES}",
        f"books.paths=[{json.dumps(str(BOOKS))}]",
        f"wikipedia.paths=[{json.dumps(str(WIKIPEDIA))}]",
        f'run.direct_running_mode="{mode}"',
    ]
    return [CLI, "build", "--quiet", *[x for s in sets for x in ("--set", s)]]


def timed_build(out: Path, mode: str, kill_after: float | None = None) -> tuple[float, bool]:
    """(wall seconds, killed); with ``kill_after`` the build's whole process group gets SIGKILL then."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command(out, mode), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )  # Beam workers log INFO
    try:
        process.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return time.perf_counter() - started, True
    if process.returncode:
        raise SystemExit(f"build failed ({process.returncode}): rerun `{' '.join(command(out, mode))}` to see why")
    return time.perf_counter() - started, False


def running_stage(out: Path) -> str:
    """The stage a killed build was in: the first one without a marker."""
    for stage in ("documents", "vocab", "bert", "gpt"):
        if not (out / ".stages" / f"{stage}.json").is_file():
            return stage
    return "manifest/report"


def digests(out: Path, folders: list[str]) -> dict[str, str]:
    return {
        p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for folder in folders
        for p in sorted((out / folder).rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kill-at", type=float, default=0.5, help="kill the second build after this share of the fresh build's wall time")
    parser.add_argument("--mode", default="multi_processing", choices=["multi_processing", "multi_threading", "in_memory"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="resume-bench-") as scratch:
        fresh_out, killed_out = Path(scratch) / "fresh", Path(scratch) / "killed"
        fresh, _ = timed_build(fresh_out, args.mode)
        manifest = json.loads((fresh_out / "manifest.json").read_text())
        stage_seconds = {k: v for k, v in manifest["stage_seconds"].items() if k != "total"}
        markers = {p: p.stat().st_mtime_ns for p in (fresh_out / ".stages").glob("*.json")}
        rerun, _ = timed_build(fresh_out, args.mode)
        assert markers == {p: p.stat().st_mtime_ns for p in (fresh_out / ".stages").glob("*.json")}, "the re-run ran a stage"
        first, killed = timed_build(killed_out, args.mode, kill_after=fresh * args.kill_at)
        landed = running_stage(killed_out) if killed else "(finished before the kill)"
        resumed, _ = timed_build(killed_out, args.mode)
        reused = [s for s, how in json.loads((killed_out / "manifest.json").read_text())["stages"].items() if how == "reused"]
        share = sum(stage_seconds[s] for s in reused) / sum(stage_seconds.values())
        stable = ["documents", "rejects", "vocab/bpe", "shards/gpt"]
        if digests(killed_out, ["vocab/wordpiece"]) == digests(fresh_out, ["vocab/wordpiece"]):
            stable += ["vocab/wordpiece", "shards/bert"]
        identical = digests(killed_out, stable) == digests(fresh_out, stable)
        leftovers = [p for p in killed_out.rglob("*") if p.name.startswith((".sort-", ".work")) or ".tmp-" in p.name]
        shutil.rmtree(scratch, ignore_errors=True)
    books = len(list(BOOKS.glob("*.txt")))
    print(
        f"corpus: {books} books ({sum(p.stat().st_size for p in BOOKS.glob('*.txt')) / 1e6:.1f} MB) + {WIKIPEDIA.name} "
        f"({WIKIPEDIA.stat().st_size / 1e6:.1f} MB bz2); mode {args.mode}, {os.cpu_count()} cores"
    )
    print("fresh build stage seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in stage_seconds.items()))
    print(f"{'build':<44}{'wall s':>8}{'x fresh':>9}")
    print(f"{'fresh build (reference)':<44}{fresh:>8.1f}{1.0:>9.2f}")
    print(f"{'re-run of the finished build':<44}{rerun:>8.1f}{rerun / fresh:>9.2f}")
    print(f"{f'killed at {args.kill_at:.0%} of the fresh wall, in {landed}':<44}{first:>8.1f}{first / fresh:>9.2f}")
    print(f"{'re-run after the kill':<44}{resumed:>8.1f}{resumed / fresh:>9.2f}")
    print(f"{'killed + re-run, together':<44}{first + resumed:>8.1f}{(first + resumed) / fresh:>9.2f}")
    print(f"re-run after the kill reused: {', '.join(reused) or 'nothing'} = {share:.0%} of the fresh build's stage time")
    print(f"resumed outputs byte-identical to the fresh build's ({', '.join(stable)}): {identical}; leftovers: {len(leftovers)}")


if __name__ == "__main__":
    main()
