"""Wikipedia extraction speed and cleanliness per core: our reader + wikitext_to_text vs WikiExtractor.

Both run in this one process, one core, on the same replicated copy of the real enwiki excerpt
(its pages repeated with new page ids), each for whole passes until ``--seconds`` have gone by.
Both parse the XML and convert every namespace-0, non-redirect page (disambiguation pages
included, as WikiExtractor keeps them). WikiExtractor runs its own ``collect_pages`` and
``Extractor.extract`` (what each of its worker processes does), with template expansion on as
in its default command line; the excerpt holds no template pages, so templates expand to nothing.

    .venv/bin/python bench/wikipedia_extract.py --seconds 30
"""

from __future__ import annotations

import argparse
import bz2
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from io import StringIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from corpusforge.corpora.document import Document  # noqa: E402
from corpusforge.corpora.wikipedia import plan_ranges, read_range  # noqa: E402

SHARED = ROOT.parent / "shared" / "data" / "wikipedia"
ENWIKI = SHARED / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
VIWIKI = SHARED / "wikiextractor_viwiki_sample"
MARKUP = ("{{", "}}", "[[", "]]", "<ref", "{|", "|-")
PAGE_ID = re.compile(r"(<page>.*?<id>)(\d+)(</id>)", re.S)


def replicate(src: Path, dst: Path, copies: int) -> None:
    """Write ``copies`` copies of every page of ``src`` into one plain XML dump, new page ids each time."""
    xml = bz2.decompress(src.read_bytes()).decode("utf-8")
    head_end, foot_start = xml.index("  <page>"), xml.rindex("</page>") + len("</page>\n")
    pages = xml[head_end:foot_start]
    with open(dst, "w", encoding="utf-8") as out:
        out.write(xml[:head_end])
        for copy in range(copies):
            out.write(PAGE_ID.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + copy * 100_000_000}{m.group(3)}", pages))
        out.write(xml[foot_start:])


def ours_pass(path: Path) -> list[str]:
    texts = []
    for r in plan_ranges(path):
        for record in read_range(r, drop_disambiguation=False):
            if isinstance(record, Document):
                texts.append(record.text)
    return texts


def wikiextractor_pass(path: Path) -> list[str]:
    from wikiextractor import WikiExtractor
    from wikiextractor.extract import Extractor

    # what its process_dump reads from the siteinfo before starting the workers
    WikiExtractor.templateNamespace = "Template"
    with open(path, encoding="utf-8") as f:
        header = f.read(1 << 16)
    settings = {
        "templatePrefix": "Template:",
        "knownNamespaces": {"Template", *re.findall(r'<namespace key="-?\d+"[^>]*>([^<]+)</namespace>', header)},
    }
    urlbase = "https://en.wikipedia.org/wiki"
    texts = []
    with open(path, encoding="utf-8") as f:
        for page_id, revid, title, page in WikiExtractor.collect_pages(f):
            out = StringIO()
            Extractor(page_id, revid, urlbase, title, page, **settings).extract(out, html_safe=False)
            body = out.getvalue().split("\n", 2)[2]  # drop the <doc ...> header and title lines
            texts.append(body.rsplit("</doc>", 1)[0])
    return texts


def timed(name: str, run_pass: Callable[[Path], list[str]], path: Path, seconds: float) -> tuple[float, float, float, list[str]]:
    """Whole passes over the file until ``seconds`` elapse: (articles/s, MB of XML/s, articles per
    CPU second, first pass output). CPU time is this process's, so the last figure stays honest
    on a machine shared with other jobs, where wall-clock rates drop."""
    size_mb = path.stat().st_size / 1e6
    articles = passes = 0
    first: list[str] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    while True:
        texts = run_pass(path)
        first = first or texts
        articles += len(texts)
        passes += 1
        elapsed = time.perf_counter() - start
        print(f"  {name}: pass {passes} done, {articles} articles, {elapsed:.1f}s", flush=True)
        if elapsed >= seconds:
            return articles / elapsed, passes * size_mb / elapsed, articles / (time.process_time() - cpu_start), first


def leftover(texts: list[str]) -> Counter[str]:
    return Counter({token: sum(t.count(token) for t in texts) for token in MARKUP})


def viwiki_f1() -> float:
    """Mean token-overlap F1 per page against WikiExtractor's published output for the viwiki sample."""
    reference = {
        m.group(1): m.group(2)
        for m in re.finditer(r'<doc id="(\d+)"[^>]*>\n[^\n]*\n(.*?)</doc>', (VIWIKI / "wikiextractor_output_wiki_00.txt").read_text(), re.S)
    }
    scores = []
    for r in plan_ranges(VIWIKI / "viwiki_10pages.xml"):
        for doc in read_range(r):
            if isinstance(doc, Document):
                ours = Counter(re.findall(r"\w+", doc.text.lower()))
                theirs = Counter(re.findall(r"\w+", reference[doc.meta["page_id"]].lower()))
                overlap = sum((ours & theirs).values())
                precision, recall = overlap / sum(ours.values()), overlap / sum(theirs.values())
                scores.append(2 * precision * recall / (precision + recall))
    return sum(scores) / len(scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0, help="minimum run time of each extractor")
    parser.add_argument("--copies", type=int, default=10, help="copies of the excerpt's pages in the test dump")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "enwiki-replicated.xml"
        replicate(ENWIKI, path, args.copies)
        print(f"input: {path.stat().st_size / 1e6:.1f} MB of XML ({args.copies} copies of {ENWIKI.name})")
        ours = timed("corpusforge", ours_pass, path, args.seconds)
        theirs = timed("wikiextractor", wikiextractor_pass, path, args.seconds)

    print()
    print(f"{'per core':<22}{'corpusforge':>14}{'wikiextractor':>15}{'ratio':>9}")
    print(f"{'articles/s':<22}{ours[0]:>14.1f}{theirs[0]:>15.1f}{ours[0] / theirs[0]:>8.2f}x")
    print(f"{'MB of XML/s':<22}{ours[1]:>14.2f}{theirs[1]:>15.2f}{ours[1] / theirs[1]:>8.2f}x")
    print(f"{'articles/CPU-second':<22}{ours[2]:>14.1f}{theirs[2]:>15.1f}{ours[2] / theirs[2]:>8.2f}x")
    print(f"{'articles per pass':<22}{len(ours[3]):>14}{len(theirs[3]):>15}")
    ours_left, theirs_left = leftover(ours[3]), leftover(theirs[3])
    for token in MARKUP:
        print(f"{'leftover ' + repr(token):<22}{ours_left[token]:>14}{theirs_left[token]:>15}")
    print(f"{'leftover total':<22}{sum(ours_left.values()):>14}{sum(theirs_left.values()):>15}")
    print(f"viwiki sample: mean token F1 of our text vs WikiExtractor's published output = {viwiki_f1():.3f}")


if __name__ == "__main__":
    main()
