"""The documents job against a real peer: datatrove (Hugging Face's pipeline library), same input, same cores.

Both tools read the same folder of plain-text books (one file = one document), drop exact duplicates,
drop near-duplicates by MinHash LSH on word 5-grams with the same bands x rows (ours: datasketch's
optimum for threshold 0.8 and 128 permutations, 14 x 9; datatrove: ``num_buckets=14,
hashes_per_bucket=9``) and write Parquet. corpusforge runs as a user runs it: ``corpusforge build``
with the stages books -> clean -> dedup -> near_dedup -> documents at the bundled configuration's
settings (``clean.language = "en"``; Beam's local runner on every core). datatrove runs in its own virtual environment (its pins differ from ours;
made under ``--work`` on first use: ``pip install datatrove[io,processing]==0.10.1 spacy``), as its README
shows: one ``LocalPipelineExecutor`` per stage, ``--workers`` processes each (``bench/peers_datatrove.py``).

The corpus: ``--mb`` of distinct ~1 MB books made from the shared Gutenberg books' paragraphs, plus
planted copies: 10% as many near-duplicates (1 word in 100 replaced: word 5-gram Jaccard ~0.9, above
the 0.8 threshold) and 2% exact copies. Runs interleave (corpusforge, datatrove, corpusforge, ...).
Printed per run: wall, CPU seconds of the whole process tree, peak RSS of the largest process,
documents kept and removed; then how far the removal sets agree, by planted group.

Differences between the two pipelines, by design of each tool (none is tuned here):
- corpusforge also cleans (Unicode repair with ftfy, control characters, language identification,
  length filters); datatrove runs no filter. ``--no-clean`` drops ``clean`` from our stages.
- Shingles: ours are word 5-grams of lower-cased text without punctuation, split on whitespace;
  datatrove's are 5-grams of its English word tokenizer (spaCy) over ``simplify_text`` (lower case,
  punctuation and numbers normalised).
- Verification: corpusforge checks every LSH candidate pair's exact Jaccard >= 0.8 before removing;
  datatrove removes every LSH candidate (no verification), so it may remove pairs below the threshold.
- Which member stays: ours the longest text, then the smallest id; datatrove's the first it met.
- Exact dedup: ours hashes the cleaned text; datatrove's the raw text.
- Output: ours one Parquet part per worker with id/source/title/url/text/meta plus a rejects table
  with a reason per removed document; datatrove's Parquet per task plus exclusion JSONL.

Second row, GPT tokens (``--gpt``): from the documents our last run kept, both tools make GPT training
tokens with the same byte-level BPE ``tokenizer.json`` (ours, trained by an untimed ``vocab`` stage on those
documents). Ours: ``corpusforge build`` with ``run.stages=["gpt"]`` (windows of ``gpt.seq_len`` + 1 tokens,
"<|endoftext|>" between documents, globally shuffled Arrow shards with a manifest and sha256, the report
rewritten). datatrove: ``ParquetReader -> DocumentTokenizer`` (``--workers`` tasks, "<|endoftext|>" after each
document, chunks of ``seq_len`` tokens shuffled per task) then ``DocumentTokenizerMerger`` (one file, chunks
shuffled across tasks), as its training-data recipes do. Both whole commands are timed; tokens are compared.

    .venv/bin/python bench/peers.py --mb 100              # ~1 MB books
    .venv/bin/python bench/peers.py --mb 100 --doc-kb 4   # Wikipedia-shaped: ~4 KB documents
    .venv/bin/python bench/peers.py --mb 50 --doc-kb 4 --repeat 1 --gpt   # and the GPT tokens row
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from corpus_factory import make_books  # noqa: E402
from scale import PeakWatcher, children_cpu  # noqa: E402

from corpusforge.core.config import GptConfig, NearDedupConfig  # noqa: E402
from corpusforge.corpora.document import make_id  # noqa: E402
from corpusforge.pipeline.document_spill import banding  # noqa: E402
from corpusforge.shards.reader import read_manifest  # noqa: E402

SHARED_BOOKS = ROOT.parent / "shared" / "data" / "books"
DATATROVE = "datatrove[io,processing]==0.10.1"
PR_SET_CHILD_SUBREAPER = 36
NEAR_SHARE, EXACT_SHARE, REPLACED = 0.10, 0.02, 0.01  # planted copies per distinct book; words replaced in a near copy


def make_corpus(folder: Path, megabytes: int, doc_bytes: int, seed: int = 7) -> dict[str, str]:
    """Distinct documents of ``doc_bytes`` plus planted copies; returns copy file name -> the one it copies."""
    marker = folder.with_suffix(".planted.json")  # beside the books, not among them
    if marker.exists():
        return json.loads(marker.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    count = make_books(SHARED_BOOKS, folder, megabytes << 20, book_bytes=doc_bytes, seed=seed)
    rng = random.Random(seed)
    planted = {}
    originals = rng.sample(range(count), round(count * (NEAR_SHARE + EXACT_SHARE)))
    for index, original in enumerate(originals):
        source = folder / f"book-{original:05d}.txt"
        text = source.read_text(encoding="utf-8")
        if index < round(count * NEAR_SHARE):
            words = text.split(" ")
            for position in rng.sample(range(len(words)), int(len(words) * REPLACED)):
                words[position] = f"w{rng.randrange(10**6)}"
            name, text = f"near-{index:05d}.txt", " ".join(words)
        else:
            name = f"copy-{index:05d}.txt"
        (folder / name).write_text(text, encoding="utf-8")
        planted[name] = source.name
    marker.write_text(json.dumps(planted, indent=1))
    return planted


def datatrove_python(work: Path) -> Path:
    """datatrove's own virtual environment, made on first use."""
    venv = work / "datatrove-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"making {venv} ({DATATROVE}, spacy) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", DATATROVE, "spacy"], check=True)
    return python


def run(cmd: list[str], log: Path) -> dict:
    """Wall, CPU of the whole process tree and the largest process's peak RSS.

    This process is made the subreaper of the tree (``PR_SET_CHILD_SUBREAPER``): a descendant orphaned
    by its parent (a fork server, a pool worker) is reaped here, so its CPU counts in RUSAGE_CHILDREN.
    """
    cpu0, t0 = children_cpu(), time.perf_counter()
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
        watcher = PeakWatcher([proc.pid])
        proc.wait()
        _reap_orphans()
        watcher.stop()
    if proc.returncode:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): see {log}")
    return {"wall": time.perf_counter() - t0, "cpu": children_cpu() - cpu0, "peak": max(watcher.peaks.values(), default=0)}


def _reap_orphans(timeout_s: float = 60.0) -> None:
    """Wait for every descendant adopted here to exit (killing any still alive after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > deadline:
                for child in psutil.Process().children():
                    child.kill()
            time.sleep(0.05)


def corpusforge(books: Path, out: Path, clean: bool) -> tuple[dict, set[str], int]:
    shutil.rmtree(out, ignore_errors=True)
    stages = '["books","clean","dedup","near_dedup","documents"]' if clean else '["books","dedup","near_dedup","documents"]'
    cmd = [str(Path(sys.executable).parent / "corpusforge"), "build", "--quiet"]
    cmd += ["--set", f'books.paths=["{books}"]', "--set", f'run.output_dir="{out}"', "--set", f"run.stages={stages}"]
    figures = run(cmd, out.with_suffix(".log"))
    names = {make_id("books", path.name): path.name for path in books.glob("*.txt")}  # a book's id is its key's
    rejects = pq.read_table(sorted(out.glob("rejects/*.parquet")), columns=["id", "reason"]).to_pylist()
    removed = {names[r["id"]] for r in rejects if r["reason"] in ("duplicate", "near_duplicate")}
    kept = sum(pq.ParquetFile(path).metadata.num_rows for path in out.glob("documents/*.parquet"))
    return figures, removed, kept


def corpusforge_gpt(books: Path, out: Path) -> tuple[dict, int]:
    """Our GPT shards from the documents in ``out``: the BPE vocabulary first (untimed), then the timed build."""
    cmd = [str(Path(sys.executable).parent / "corpusforge"), "build", "--quiet"]
    cmd += ["--set", f'books.paths=["{books}"]', "--set", f'run.output_dir="{out}"', "--set", 'vocab.kinds=["bpe"]']
    subprocess.run([*cmd, "--set", 'run.stages=["vocab"]'], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # --force: a second run would otherwise reuse the first one's shards (the same fingerprint) and time nothing
    figures = run([*cmd, "--force", "--set", 'run.stages=["gpt"]'], out.with_name(out.name + "-gpt.log"))
    return figures, read_manifest(out / "shards" / "gpt").tokens


def datatrove_gpt(python: Path, documents: Path, tokenizer: Path, out: Path, workers: int, seq_len: int) -> tuple[dict, int]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(python), str(ROOT / "bench" / "peers_datatrove.py"), str(documents), str(out), "--workers", str(workers)]
    cmd += ["--tokens", str(tokenizer), "--seq-len", str(seq_len)]
    figures = run(cmd, out.with_suffix(".log"))
    return figures, sum(path.stat().st_size for path in (out / "merged").glob("*.ds")) // 2  # uint16 tokens


def gpt_rows(python: Path, books: Path, ours: Path, work: Path, workers: int, repeat: int) -> float:
    """The GPT tokens row, runs interleaved; returns datatrove's median CPU over ours."""
    seq_len = GptConfig().seq_len
    cpu: dict[str, list[float]] = {"corpusforge": [], "datatrove": []}
    tokens_of: dict[str, int] = {}
    for attempt in range(repeat):
        for tool in ("corpusforge", "datatrove"):
            if tool == "corpusforge":
                figures, tokens = corpusforge_gpt(books, ours)
            else:
                tokenizer = ours / "vocab" / "bpe" / "tokenizer.json"
                figures, tokens = datatrove_gpt(python, ours / "documents", tokenizer, work / f"datatrove-gpt-{attempt}", workers, seq_len)
            cpu[tool].append(figures["cpu"])
            tokens_of[tool] = tokens
            print(
                f"{tool + f' gpt #{attempt + 1}':18s} {figures['wall']:8.1f} {figures['cpu']:8.1f} {figures['peak'] / 2**20:8.0f} {tokens:>12,d} tokens",
                flush=True,
            )
    print(token_agreement(tokens_of["corpusforge"], tokens_of["datatrove"], seq_len))
    return statistics.median(cpu["datatrove"]) / statistics.median(cpu["corpusforge"])


def token_agreement(ours: int, theirs: int, seq_len: int) -> str:
    """How the two token counts compare: datatrove's merger writes whole ``seq_len``-token chunks only."""
    if theirs == ours - ours % seq_len:
        return f"tokens: the counts agree; datatrove's merged file keeps whole {seq_len}-token chunks, leaving out the last {ours % seq_len} of {ours:,d}"
    return f"tokens: the counts differ by {ours - theirs:+,d} beyond datatrove's whole {seq_len}-token chunks"


def datatrove(python: Path, books: Path, out: Path, workers: int, bands: int, rows: int) -> tuple[dict, set[str], int]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(python), str(ROOT / "bench" / "peers_datatrove.py"), str(books), str(out), "--workers", str(workers)]
    cmd += ["--bands", str(bands), "--rows", str(rows), "--ngram", "5", "--seed", "1"]
    figures = run(cmd, out.with_suffix(".log"))
    removed = set()
    for folder in ("removed-exact", "removed-near"):
        for path in (out / folder).glob("*.jsonl*"):
            removed |= {json.loads(line)["id"] for line in _lines(path)}
    kept = sum(pq.ParquetFile(path).metadata.num_rows for path in (out / "documents").glob("*.parquet"))
    return figures, removed, kept


def _lines(path: Path) -> list[str]:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line for line in handle if line.strip()]


def _collapsed(original: str, removed: set[str], group_of: dict[str, str]) -> bool:
    return sum(1 for name, group in group_of.items() if group == original and name not in removed) == 1


def groups_collapsed(removed: set[str], planted: dict[str, str]) -> int:
    """Planted groups (a book and its copies) of which exactly one member is left."""
    members: dict[str, set[str]] = {}
    for copy, original in planted.items():
        members.setdefault(original, {original}).add(copy)
    return sum(len(group - removed) == 1 for group in members.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=100, help="MB of distinct books (planted copies come on top)")
    parser.add_argument("--doc-kb", type=int, default=1024, help="document size: 1024 ~1 MB books, 4 Wikipedia-shaped articles")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each tool, interleaved")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="datatrove's processes (ours: every core)")
    parser.add_argument("--no-clean", action="store_true", help="leave our clean stage out (datatrove runs none)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/corpusforge-peers"))
    parser.add_argument("--gpt", action="store_true", help="also the GPT tokens row, on the documents our last run kept")
    args = parser.parse_args()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)  # see ``run``
    args.work.mkdir(parents=True, exist_ok=True)
    books = args.work / f"docs-{args.mb}mb-{args.doc_kb}kb"
    planted = make_corpus(books, args.mb, args.doc_kb << 10)
    python = datatrove_python(args.work)
    bands, rows = banding(NearDedupConfig())
    inputs = sorted(books.glob("*.txt"))
    size = sum(path.stat().st_size for path in inputs) / 1e6
    print(f"input: {len(inputs)} books, {size:.0f} MB ({len(planted)} planted copies); {os.cpu_count()} cores; LSH {bands} x {rows}")
    print(f"{'run':14s} {'wall s':>8s} {'CPU s':>8s} {'peak MB':>8s} {'kept':>6s} {'removed':>8s} {'groups':>7s}")
    cpu: dict[str, list[float]] = {"corpusforge": [], "datatrove": []}
    removed_by: dict[str, set[str]] = {}
    for attempt in range(args.repeat):
        for tool in ("corpusforge", "datatrove"):
            out = args.work / f"{tool}-{attempt}"
            if tool == "corpusforge":
                figures, removed, kept = corpusforge(books, out, not args.no_clean)
            else:
                figures, removed, kept = datatrove(python, books, out, args.workers, bands, rows)
            cpu[tool].append(figures["cpu"])
            removed_by[tool] = removed
            print(
                f"{tool + f' #{attempt + 1}':14s} {figures['wall']:8.1f} {figures['cpu']:8.1f} {figures['peak'] / 2**20:8.0f} "
                f"{kept:6d} {len(removed):8d} {groups_collapsed(removed, planted):4d}/{len(set(planted.values()))}"
            )
    ours, theirs = removed_by["corpusforge"], removed_by["datatrove"]
    print(f"removed by both: {len(ours & theirs)}, only by corpusforge: {len(ours - theirs)}, only by datatrove: {len(theirs - ours)}")
    group_of = {name: original for name, original in planted.items()} | {original: original for original in planted.values()}
    both = {g for g in set(planted.values()) if _collapsed(g, ours, group_of) and _collapsed(g, theirs, group_of)}
    kept_differs = {name for name in ours ^ theirs if group_of.get(name) in both}
    print(
        f"  of the differences, {len(kept_differs)} are the member each kept of a group both collapsed (ours: the longest, then the smallest id; datatrove's: the first it read)"
    )
    for name in sorted((ours ^ theirs) - kept_differs)[:10]:
        print(f"  {name}: removed by {'corpusforge' if name in ours else 'datatrove'} only (planted copy of {planted.get(name, '-')})")
    ratio = statistics.median(cpu["datatrove"]) / statistics.median(cpu["corpusforge"])
    if args.gpt:
        print(f"{'GPT tokens':18s} {'wall s':>8s} {'CPU s':>8s} {'peak MB':>8s}")
        gpt_ratio = gpt_rows(python, books, args.work / f"corpusforge-{args.repeat - 1}", args.work, args.workers, args.repeat)
        print(f"gpt tokens: datatrove CPU / corpusforge CPU = {gpt_ratio:.2f}x")
    print(f"documents job: datatrove CPU / corpusforge CPU = {ratio:.2f}x")


if __name__ == "__main__":
    main()
