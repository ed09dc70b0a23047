"""Extraction stage quality and speed on trafilatura's evaluation set (1,033 real pages, 990 annotated).

    .venv/bin/python bench/extract.py [--pages 990]

One run prints, side by side, for our stage, our stage with each rule switched off or on, and
trafilatura alone (fast and fallback, default and favor_precision settings):

- snippet P/R/F1, trafilatura's own scoring (tests/eval_common.py upstream): whitespace-normalised
  substring match; a "with" snippet found is a true positive, missed a false negative, a "without"
  snippet found a false positive. Blind to duplication: text repeated costs nothing.
- duplication: ``runs`` = repeated 10-word runs in the output beyond the count the page's visible text
  (trafilatura.html2txt) has, i.e. repetition introduced by extraction (``pages`` = pages with one);
  ``host par.`` = paragraphs (8+ words) that recur on other pages of the same host in this build.
- 4-gram P/R/F1 with counts: the best full-text measure this data allows. The shared data has no
  full-text ground truth (only snippets), so recall is the share of the "with" snippets' token 4-grams
  found (clipped counts), and precision is the share of the output's 4-grams (with counts) that are
  neither in a "without" snippet nor repeated beyond their count in the page's visible text: repeated
  text costs precision, unannotated text counts as right. Summed over pages (micro).
- pages per CPU-second (this process plus the extraction worker, from /proc): the per-core cost.
  Timed runs go block by block, each side in turn, so machine load hits all alike. Rows marked
  "derived" reuse a timed run's extraction and add the measured cost of their extra step.

Our stage's text is taken before the page-level filters (those drop whole pages for language or
length, which is no extraction error). Settings were chosen on the even-indexed pages; the odd half
is reported as held out.
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
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import trafilatura
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corpusforge.core.config import ExtractConfig  # noqa: E402
from corpusforge.corpora.extract import (  # noqa: E402
    ExtractorProcess,
    clean_page,
    description_lead,
    fix_mojibake,
    folded_words,
    looks_like_navigation,
    main_text,
    meta_description,
    paragraphs,
    table_row,
    with_lead,
)

EVAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "html" / "trafilatura_eval"
GATE = {"include_comments": False, "include_tables": True, "include_formatting": False}
BLOCK = 20
RUN = 10  # words in a duplicated run
HOST_PARAGRAPH_WORDS = 8

Page = tuple[str, bytes, dict]


def load_pages(limit: int) -> list[Page]:
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


def snippet_score(results: list[str | None], pages: list[Page], start: int = 0, step: int = 1) -> tuple[float, float, float]:
    """Upstream snippet precision, recall, F1 over pages[start::step] (step 2: one half of the set)."""
    tp = fp = fn = 0
    for text, (_, _, item) in zip(results[start::step], pages[start::step]):
        found = norm(text) if isinstance(text, str) else ""
        hits = sum(1 for s in item["with"] if found and norm(s) in found)
        false = sum(1 for s in item["without"] if found and norm(s) in found)
        tp, fp, fn = tp + hits, fp + false, fn + len(item["with"]) - hits
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return precision, recall, 2 * tp / (2 * tp + fp + fn)


def grams(words: list[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


class Reference:
    """What each page's measures compare against: visible-text n-gram counts and snippet 4-grams."""

    def __init__(self, html: bytes, item: dict) -> None:
        visible = folded_words(trafilatura.html2txt(html) or "")
        self.visible_runs, self.visible_4 = grams(visible, RUN), grams(visible, 4)
        self.main = sum((grams(folded_words(s), 4) for s in item["with"]), Counter())
        self.boilerplate = {g for s in item["without"] for g in grams(folded_words(s), 4)} - set(self.main)


def introduced_runs(text: str | None, ref: Reference) -> int:
    """10-word runs our output repeats more often than the page shows them."""
    counts = grams(folded_words(text or ""), RUN)
    return sum(max(0, c - max(ref.visible_runs[g], 1)) for g, c in counts.items())


def gram_counts(text: str | None, ref: Reference) -> tuple[int, int, int, int]:
    """(main 4-grams found, main 4-grams, wrong output 4-grams, output 4-grams) of one page, with counts."""
    out = grams(folded_words(text or ""), 4)
    found = sum(min(out[g], c) for g, c in ref.main.items())
    wrong = sum(out[g] for g in ref.boilerplate)
    repeated = sum(max(0, c - max(ref.visible_4[g], 1)) for g, c in out.items() if g not in ref.boilerplate)
    return found, sum(ref.main.values()), wrong + repeated, sum(out.values())


def host_of(url: str) -> str:
    host = urlsplit(url).hostname or ""
    return host[4:] if host.startswith("www.") else host


def host_repeats(results: list[str | None], pages: list[Page]) -> int:
    """Paragraph occurrences beyond the first page of their host (site-wide text in the build)."""
    seen: Counter[tuple[str, str]] = Counter()
    for text, (url, _, _) in zip(results, pages):
        paragraphs_ = {" ".join(w) for line in (text or "").splitlines() if len(w := folded_words(line)) >= HOST_PARAGRAPH_WORDS}
        for paragraph in paragraphs_:
            seen[host_of(url), paragraph] += 1
    return sum(n - 1 for n in seen.values())


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time of this process, plus the extraction worker's (from /proc) when ``pid`` is given."""
    own = time.process_time()
    if pid is None:
        return own
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return own + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class Side:
    """One timed extractor: ``run(url, html)`` -> text before page filters; CPU includes its worker."""

    def __init__(self, name: str, run: Callable[[str, bytes], str | None], process: ExtractorProcess | None = None) -> None:
        self.name, self.run, self.process = name, run, process
        self.texts: list[str | None] = []
        self.cpu = 0.0

    def block(self, pages: list[Page]) -> None:
        pid = self.process.pid if self.process else None
        start = cpu_seconds(pid)
        for url, html, _ in pages:
            try:
                self.texts.append(self.run(url, html))
            except Exception:  # noqa: BLE001 (a reference extractor's crash is a miss, not the end of the bench)
                self.texts.append(None)
        self.cpu += cpu_seconds(pid) - start


def stage(cfg: ExtractConfig, process: ExtractorProcess, raw: list[str | None]) -> Callable[[str, bytes], str | None]:
    """Our whole stage (worker, ftfy, quality rules, language id); returns its text before page filters
    and keeps the worker's text in ``raw``."""

    def run(url: str, html: bytes) -> str | None:
        text, _ = main_text(html, url, cfg, process)
        raw.append(text)
        if not text:
            return None
        clean_page(text, cfg)  # the page filters' cost is part of the stage
        return paragraphs(fix_mojibake(text))

    return run


def all_paragraphs(text: str | None) -> str | None:
    """``paragraphs`` without its removal of repeated paragraphs."""
    return "\n\n".join(r for r in (table_row(line.strip()) for line in fix_mojibake(text).splitlines()) if r) if text else None


def trafilatura_alone(**options: object) -> Callable[[str, bytes], str | None]:
    return lambda url, html: trafilatura.extract(html, **GATE, **options)


def leads(texts: list[str | None], pages: list[Page], rule: str) -> tuple[list[str | None], float, int]:
    """Texts with the description lead (``fixed`` rule with the host check, or the ``old`` rule), its CPU
    seconds, and how many pages got one."""
    start = time.process_time()
    per_host = Counter((host_of(url), " ".join(folded_words(meta_description(html)))) for url, html, _ in pages)
    out, added = [], 0
    for text, (url, html, _) in zip(texts, pages):
        if not text:
            out.append(text)
            continue
        if rule == "fixed":
            lead = description_lead(text, html)
            lead = lead if per_host[host_of(url), " ".join(folded_words(lead))] == 1 else ""
        else:  # the rule as it was: exact containment, no visibility or host check
            lead = meta_description(html)
            lead = "" if lead in norm(text) else lead
        added += bool(lead)
        out.append(paragraphs(with_lead(text, lead)))
    return out, time.process_time() - start, added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=990)
    args = parser.parse_args()
    pages = load_pages(args.pages)
    default = ExtractConfig()
    configs = {
        "ours (defaults)": default,
        "ours, navigation fallback off": default.model_copy(update={"navigation_fallback": False}),
        "ours, favor precision": default.model_copy(update={"favor": "precision"}),
    }
    processes = {name: ExtractorProcess(cfg.timeout_s) for name, cfg in configs.items()}
    raw: dict[str, list[str | None]] = {name: [] for name in configs}
    sides = [Side(name, stage(cfg, processes[name], raw[name]), processes[name]) for name, cfg in configs.items()]
    sides += [
        Side("trafilatura alone, fast", trafilatura_alone(fast=True)),
        Side("trafilatura alone, fallback", trafilatura_alone(fast=False)),
        Side("trafilatura favor_precision, fast", trafilatura_alone(fast=True, favor_precision=True)),
        Side("trafilatura favor_precision, fallback", trafilatura_alone(fast=False, favor_precision=True)),
    ]
    for side in sides:  # warm-up, untimed: worker start, lazy imports, language model
        for url, html, _ in pages[:3]:
            side.run(url, html)
    for texts in raw.values():
        texts.clear()
    for i in tqdm(range(0, len(pages), BLOCK), desc="pages", unit_scale=BLOCK, disable=None):
        shift = i // BLOCK % len(sides)
        for side in sides[shift:] + sides[:shift]:  # each side goes first in turn
            side.block(pages[i : i + BLOCK])
    for process in processes.values():
        process.close()

    by_name = {side.name: side for side in sides}
    ours, fast = by_name["ours (defaults)"], by_name["trafilatura alone, fast"]
    fired = sum(bool(t) and looks_like_navigation(t, html) for t, (_, html, _) in zip(fast.texts, pages))
    rows: list[tuple[str, list[str | None], float]] = [(side.name, side.texts, side.cpu) for side in sides]
    for rule in ("fixed", "old"):
        texts, cpu, added = leads(ours.texts, pages, rule)
        rows.insert(1 + (rule == "old"), (f"ours + {rule} description lead ({added} pages) [derived]", texts, ours.cpu + cpu))
    rows.insert(3, ("ours, repeated paragraphs kept [derived]", [all_paragraphs(t) for t in raw["ours (defaults)"]], ours.cpu))

    refs = [Reference(html, item) for _, html, item in tqdm(pages, desc="references")]
    n = len(pages)
    print(f"extraction: {n} annotated pages of trafilatura's evaluation set; ours = {trafilatura_options_line(default)}")
    print(
        f"  navigation fallback fired on {fired} pages ({fired / n:.1%}); its CPU: 'ours (defaults)' vs "
        f"'ours, navigation fallback off' below"
    )
    header = (
        f"  {'extractor':54} {'snippet P':>9} {'R':>6} {'F1':>6} {'F1 odd':>6} | {'runs':>5} {'pages':>5} "
        f"{'host par.':>9} | {'4-gram P':>8} {'R':>6} {'F1':>6} | {'pages/CPU-s':>11} {'vs traf.':>8}"
    )
    print(header)
    for name, texts, cpu in rows:
        p, r, f1 = snippet_score(texts, pages)
        odd = snippet_score(texts, pages, 1, 2)[2]
        runs = [introduced_runs(t, ref) for t, ref in zip(texts, refs)]
        found, main_grams, wrong, output = map(sum, zip(*(gram_counts(t, ref) for t, ref in zip(texts, refs))))
        gp, gr = 1 - wrong / output, found / main_grams
        print(
            f"  {name:54} {p:9.4f} {r:6.4f} {f1:6.4f} {odd:6.4f} | {sum(runs):5d} {sum(map(bool, runs)):5d} "
            f"{host_repeats(texts, pages):9d} | {gp:8.4f} {gr:6.4f} {2 * gp * gr / (gp + gr):6.4f} | "
            f"{n / cpu:11.1f} {fast.cpu / cpu:7.2f}x"
        )
    floors = json.loads((EVAL / "eval_baseline.json").read_text())["floors"]
    print(f"  pinned upstream snippet floors: F1 fast {floors['fast']}, fallback {floors['fallback']}")


def trafilatura_options_line(cfg: ExtractConfig) -> str:
    return (
        f"favor={cfg.favor} tables={cfg.include_tables} fast={cfg.fast} navigation_fallback={cfg.navigation_fallback} "
        f"lead_from_description={cfg.lead_from_description}"
    )


if __name__ == "__main__":
    main()
