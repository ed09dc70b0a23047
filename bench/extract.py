"""Extraction stage speed and quality on trafilatura's evaluation set (1,033 real pages, 990 annotated).

    .venv/bin/python bench/extract.py [--pages 990] [--no-fallback]

Speed: pages/s (wall, and per CPU-second of parent + worker: the per-core figure) of our whole stage (worker process with a time limit, ftfy, language id, quality rules)
vs calling trafilatura directly in-process with the same settings, on the same pages, interleaved in
blocks so machine load hits both alike; one worker = one core busy at a time.
Quality: trafilatura's own scoring (tests/eval_common.py upstream): whitespace-normalised substring
match; a "with" snippet found is a true positive, missed a false negative; a "without" snippet found
is a false positive. Ours = our extraction stage's text before the page-level filters (those drop whole
pages for language or length, which is no extraction error); references = the upstream gate's settings.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import trafilatura
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corpora.extract import ExtractorProcess, extract_page, fix_mojibake, paragraphs, trafilatura_text  # noqa: E402
from corpusforge.config import ExtractConfig  # noqa: E402

EVAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "html" / "trafilatura_eval"
GATE = {"include_comments": False, "include_tables": True, "include_formatting": False}
BLOCK = 20


def load_pages(limit: int) -> list[tuple[str, bytes, dict]]:
    """(url, html, annotation) for annotated pages; cache/ wins over eval/ as in the upstream scorer."""
    annotations = json.loads((EVAL / "evaldata.json").read_text(encoding="utf-8"))
    files: dict[str, bytes] = {}
    with tarfile.open(EVAL / "html_eval_and_cache.tar.xz", "r|xz") as archive:
        for member in archive:
            if member.isfile():
                folder, _, name = member.name.rpartition("/")
                if folder.endswith("cache") or name not in files:
                    files[name] = archive.extractfile(member).read()
    pages = [(url, files[item["file"]], item) for url, item in annotations.items() if item["file"] in files]
    return pages[:limit]


def norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def score(results: list[str | None], pages: list[tuple[str, bytes, dict]]) -> tuple[float, float, float]:
    tp = fp = fn = 0
    for text, (_, _, item) in zip(results, pages):
        found = norm(text) if isinstance(text, str) else ""
        hits = sum(1 for s in item["with"] if found and norm(s) in found)
        false = sum(1 for s in item["without"] if found and norm(s) in found)
        tp, fp, fn = tp + hits, fp + false, fn + len(item["with"]) - hits
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return precision, recall, 2 * tp / (2 * tp + fp + fn)


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time of this process, plus the extraction worker's (from /proc) when ``pid`` is given."""
    own = time.process_time()
    if pid is None:
        return own
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return own + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def timed(function, pages, pid: int | None = None) -> tuple[list, float, float]:
    """Results, wall seconds, CPU seconds (wall time on a loaded machine includes waiting for a core)."""
    start, start_cpu = time.perf_counter(), cpu_seconds(pid)
    out = [function(url, html) for url, html, _ in pages]
    return out, time.perf_counter() - start, cpu_seconds(pid) - start_cpu


def safe(function):
    def run(url: str, html: bytes):
        try:
            return function(url, html)
        except Exception:
            return None

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=990)
    parser.add_argument("--no-fallback", action="store_true", help="skip the slow fallback reference run")
    args = parser.parse_args()
    pages = load_pages(args.pages)
    cfg = ExtractConfig()
    process = ExtractorProcess(cfg.timeout_s)

    def direct(url: str, html: bytes) -> str | None:
        return trafilatura_text(html, url, cfg.favor)

    def stage(url: str, html: bytes) -> tuple[str | None, str]:
        return extract_page(html, url, "text/html", cfg, extractor=process)

    def stage_text(url: str, html: bytes) -> str | None:  # our extraction before page-level filters
        text, _ = process(html, url, cfg.favor)
        return paragraphs(fix_mojibake(text)) if text else None

    for url, html, _ in pages[:BLOCK]:  # warm-up, untimed: worker start, lazy imports, language model
        direct(url, html), stage(url, html)
    direct_out, stage_out, texts = [], [], []
    wall = {"direct": 0.0, "stage": 0.0}
    cpu = {"direct": 0.0, "stage": 0.0}
    for i in tqdm(range(0, len(pages), BLOCK), desc="pages", unit_scale=BLOCK):
        block = pages[i : i + BLOCK]
        for side in (("direct", "stage") if i // BLOCK % 2 else ("stage", "direct")):  # alternate who goes first
            if side == "direct":
                out, seconds, cpu_s = timed(safe(direct), block)
                direct_out += out
            else:
                out, seconds, cpu_s = timed(stage, block, process.pid)
                stage_out += out
            wall[side] += seconds
            cpu[side] += cpu_s
        texts += [stage_text(url, html) for url, html, _ in block]
    process.close()

    n = len(pages)
    print(f"extraction: {n} pages of trafilatura's evaluation set, favor={cfg.favor}, 1 worker")
    print(f"  {'':20} {'pages/s (wall)':>15} {'pages/s per CPU-second':>23}")
    for side, name in (("direct", "trafilatura direct"), ("stage", "our stage")):
        print(f"  {name:20} {n / wall[side]:15.1f} {n / cpu[side]:23.1f}")
    print(f"  overhead of our stage: {wall['stage'] / wall['direct'] - 1:+.1%} wall, {cpu['stage'] / cpu['direct'] - 1:+.1%} CPU "
          "(worker process, time limit, mojibake repair, quality rules, language id)")
    reasons = Counter(reason or "kept" for _, reason in stage_out)
    print("  page outcomes (default filters, English only):", dict(sorted(reasons.items())))

    print(f"quality (upstream scoring, {n} pages)   precision  recall     F1")
    rows = [("ours (extraction stage)", texts), (f"trafilatura favor={cfg.favor}", direct_out)]
    rows.append(("trafilatura gate fast", timed(safe(lambda u, h: trafilatura.extract(h, fast=True, **GATE)), tqdm(pages, desc="gate fast"))[0]))
    if not args.no_fallback:
        rows.append(("trafilatura gate fallback", timed(safe(lambda u, h: trafilatura.extract(h, fast=False, **GATE)), tqdm(pages, desc="gate fallback"))[0]))
    for name, results in rows:
        p, r, f1 = score(results, pages)
        print(f"  {name:34} {p:9.4f} {r:7.4f} {f1:7.4f}")
    floors = json.loads((EVAL / "eval_baseline.json").read_text())["floors"]
    print(f"  pinned upstream floors: F1 fast {floors['fast']}, fallback {floors['fallback']}")


if __name__ == "__main__":
    main()
