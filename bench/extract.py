"""Extraction stage speed and quality on trafilatura's evaluation set (1,033 real pages, 990 annotated).

    .venv/bin/python bench/extract.py [--pages 990] [--no-fallback] [--favor precision] [--no-tables] [--no-fast] [--no-lead]

Speed: pages/s (wall, and per CPU-second of parent + worker: the per-core figure) of our whole stage
(worker process with a time limit, ftfy, language id, quality rules) vs trafilatura alone (its default
settings of the upstream evaluation gate, called in-process), on the same pages, interleaved in blocks so
machine load hits both alike; one worker = one core busy at a time.
Quality: trafilatura's own scoring (tests/eval_common.py upstream): whitespace-normalised substring
match; a "with" snippet found is a true positive, missed a false negative; a "without" snippet found
is a false positive. Ours = our extraction stage's text before the page-level filters (those drop whole
pages for language or length, which is no extraction error); references = the upstream gate's settings.
Settings were chosen on the even-indexed pages; the odd-indexed half is reported as held out.
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

from corpusforge.corpora.extract import ExtractorProcess, extract_page, fix_mojibake, main_text, paragraphs, trafilatura_options  # noqa: E402
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


def score(results: list[str | None], pages: list[tuple[str, bytes, dict]], start: int = 0, step: int = 1) -> tuple[float, float, float]:
    """Precision, recall, F1 over pages[start::step] (step 2: one half of the set)."""
    tp = fp = fn = 0
    for text, (_, _, item) in zip(results[start::step], pages[start::step]):
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
    parser.add_argument("--favor", choices=("precision", "balanced", "recall"), default=ExtractConfig().favor)
    parser.add_argument("--no-tables", action="store_true", help="our stage drops tables")
    parser.add_argument("--no-fast", action="store_true", help="our stage adds trafilatura's readability/jusText fallback")
    parser.add_argument("--no-lead", action="store_true", help="our stage does not restore the lead from the meta description")
    args = parser.parse_args()
    pages = load_pages(args.pages)
    cfg = ExtractConfig(
        favor=args.favor, include_tables=not args.no_tables, fast=not args.no_fast, lead_from_description=not args.no_lead
    )
    process = ExtractorProcess(cfg.timeout_s)
    options = trafilatura_options(cfg)

    def direct(url: str, html: bytes) -> str | None:  # trafilatura alone, as its evaluation gate runs it
        return trafilatura.extract(html, fast=True, **GATE)

    def stage(url: str, html: bytes) -> tuple[str | None, str]:
        return extract_page(html, url, "text/html", cfg, extractor=process)

    def stage_text(url: str, html: bytes) -> str | None:  # our extraction before page-level filters
        text, _ = main_text(html, url, cfg, process)
        return paragraphs(fix_mojibake(text)) if text else None

    for url, html, _ in pages[:BLOCK]:  # warm-up, untimed: worker start, lazy imports, language model
        direct(url, html), stage(url, html)
    direct_out, stage_out, texts = [], [], []
    wall = {"direct": 0.0, "stage": 0.0}
    cpu = {"direct": 0.0, "stage": 0.0}
    for i in tqdm(range(0, len(pages), BLOCK), desc="pages", unit_scale=BLOCK, disable=None):  # no bar in logs
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
    rows = [("ours (extraction stage)", texts), ("trafilatura defaults, fast", direct_out)]
    if not args.no_fallback:  # timed alone, after the interleaved run: a cost reference, not a race
        fallback_out, wall["fallback"], cpu["fallback"] = timed(
            safe(lambda u, h: trafilatura.extract(h, fast=False, **GATE)), tqdm(pages, desc="fallback", disable=None)
        )
        rows.append(("trafilatura defaults, fallback", fallback_out))

    print(f"extraction: {n} pages of trafilatura's evaluation set, ours {options} lead={cfg.lead_from_description}, 1 worker")
    print(f"  {'':34} {'pages/s (wall)':>15} {'pages/s per CPU-second':>23}")
    names = {"direct": "trafilatura alone (fast)", "stage": "our stage", "fallback": "trafilatura fallback"}
    for side in wall:
        print(f"  {names[side]:34} {n / wall[side]:15.1f} {n / cpu[side]:23.1f}")
    print(f"  our stage / trafilatura alone: {wall['direct'] / wall['stage']:.2f}x wall, {cpu['direct'] / cpu['stage']:.2f}x per CPU-second "
          f"(overhead {cpu['stage'] / cpu['direct'] - 1:+.1%} CPU: worker process, time limit, mojibake repair, quality rules, language id)")
    reasons = Counter(reason or "kept" for _, reason in stage_out)
    print("  page outcomes (default filters, English only):", dict(sorted(reasons.items())))

    print(f"quality (upstream scoring)                precision  recall     F1   F1 even half (chosen on)   F1 odd half (held out)")
    for name, results in rows:
        p, r, f1 = score(results, pages)
        print(f"  {name:34} {p:9.4f} {r:7.4f} {f1:7.4f} {score(results, pages, 0, 2)[2]:12.4f} {score(results, pages, 1, 2)[2]:26.4f}")
    floors = json.loads((EVAL / "eval_baseline.json").read_text())["floors"]
    print(f"  pinned upstream floors: F1 fast {floors['fast']}, fallback {floors['fallback']}")


if __name__ == "__main__":
    main()
