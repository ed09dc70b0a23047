"""The WebText job: Reddit dumps -> karma-selected links -> fetch or replay -> main text -> Documents.

Every submission ends as exactly one record: the chosen submission of a canonical URL becomes a
Document or a page-level Reject; every other submission is a Reject (self_post, low_karma,
duplicate_url, ...). In offline mode with no dumps, the links are the captures of the WARCs.
With ``lead_from_description``, pages are grouped by (host, description) before a lead is added:
a description that other pages of the host share is the site's, not the article's.
"""

from __future__ import annotations

import html as html_lib
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import apache_beam as beam
from apache_beam.pvalue import PCollection

from corpusforge.core import storage
from corpusforge.core.config import Config, WebTextConfig
from corpusforge.core.layout import Layout
from corpusforge.corpora.document import Document, Reject, make_id
from corpusforge.corpora.extract import description_lead, extract_page, fix_mojibake, folded_words, meta_description
from corpusforge.corpora.fetch import decode_page
from corpusforge.corpora.reddit import SOURCE, Link, check_dump_format, read_submissions, screen, select_link
from corpusforge.corpora.urls import Blocklist, clean_url
from corpusforge.corpora.warc import Capture, iter_captures, warc_files
from corpusforge.pipeline.fetch import FetchDoFn

TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


def warc_dir_of(cfg: Config) -> str:
    """The capture folder: ``webtext.warc_dir``, else ``webtext/warc`` in the output folder."""
    return cfg.webtext.warc_dir or Layout.at(cfg.run.output_dir).captures


def link_reject(link: Link, reason: str, detail: str = "") -> Reject:
    return Reject(id=make_id(SOURCE, link.key), source=SOURCE, reason=reason, detail=detail[:500], key=link.url)


def page_title(html: str) -> str:
    match = TITLE.search(html[:100_000])
    return " ".join(html_lib.unescape(match.group(1)).split()) if match else ""


@dataclass(frozen=True, slots=True)
class Described:
    """A document whose page has a meta description; its lead waits for the host's other pages."""

    document: Document
    key: tuple[str, str]  # (host without "www.", folded description)
    lead: str  # the description as the page's missing lead, or ""


def host_description(url: str, description: str) -> tuple[str, str]:
    host = (urlsplit(url).hostname or "").removeprefix("www.")
    return host, " ".join(folded_words(description))


def lead_once(key: tuple[str, str], group: Iterable[Described]) -> Iterator[Document]:
    """Documents of one (host, description): the lead is added only where the page is the only one."""
    described = list(group)
    for item in described:
        if len(described) == 1 and item.lead:
            yield item.document.replace(text=f"{' '.join(fix_mojibake(item.lead).split())}\n\n{item.document.text}")
        else:
            yield item.document


def to_document(link: Link, capture: Capture, web: WebTextConfig) -> Document | Described | Reject:
    """A fetched or replayed page -> Document (Described when its lead is pending), or a Reject with the
    fetch / decode / extract reason."""
    html, reason = decode_page(capture, web.fetch.max_decoded_bytes, web.fetch.content_types)
    if html is None:
        return link_reject(link, reason, capture.detail)
    url = capture.final_url or link.url
    # decoded once here (header, <meta>, charset-normalizer), handed on as UTF-8
    page = html.encode("utf-8")
    text, reason = extract_page(page, url, content_type="text/html; charset=utf-8", config=web.extract)
    if not text:
        return link_reject(link, reason or "extraction_empty", url)
    meta = {"subreddit": link.subreddit, "warc_record_id": capture.record_id, "timestamp": capture.date}
    if link.submission_ids:
        meta["score"] = str(link.score)
    document = Document(
        id=make_id(SOURCE, link.key),
        source=SOURCE,
        title=link.title or page_title(html),
        text=text,
        url=url,
        meta={k: v for k, v in meta.items() if v},
    )
    description = meta_description(page) if web.extract.lead_from_description else ""
    if not description:
        return document
    return Described(document, host_description(url, description), description_lead(text, page))


def links_from_warc(path: str, blocklist: Blocklist) -> list[tuple[str, Link] | Reject]:
    """Offline without dumps: every capture in a WARC is a candidate link, keyed canonically."""
    out: list[tuple[str, Link] | Reject] = []
    for capture in iter_captures(path, max_bytes=0):
        cleaned = clean_url(capture.url)
        link = Link(key=cleaned.key if cleaned else capture.url, url=capture.url, score=0, subreddit="", title="", submission_ids=())
        if cleaned is None:
            out.append(link_reject(link, "bad_url", capture.url))
        elif blocklist.blocked_domain(cleaned.host):
            out.append(link_reject(link, "blocked_domain", cleaned.host))
        elif blocklist.blocked_extension(cleaned.fetch):
            out.append(link_reject(link, "blocked_extension", capture.url))
        else:
            out.append((cleaned.key, link))
    return out


def first_capture(key: str, links: list[Link]) -> list[Link | Reject]:
    """One link per canonical URL (smallest spelling); every other capture is a counted duplicate."""
    ordered = sorted(links, key=lambda link: link.url)
    duplicates = [
        link_reject(
            Link(key=f"{key}#{n}", url=link.url, score=0, subreddit="", title="", submission_ids=()), "duplicate_url", ordered[0].url
        )
        for n, link in enumerate(ordered[1:], start=1)
    ]
    return [ordered[0], *duplicates]


def split(records: PCollection, label: str) -> tuple[PCollection, PCollection]:
    """(kept, rejects) by type."""
    parts = records | label >> beam.Partition(lambda record, _: int(isinstance(record, Reject)), 2)
    return parts[0], parts[1]


def read_links(pipeline: beam.Pipeline, cfg: Config, blocklist: Blocklist) -> tuple[PCollection, PCollection]:
    web = cfg.webtext
    if not web.dumps:  # offline from WARCs alone
        paths = [str(p) for p in warc_files(warc_dir_of(cfg))]
        keyed, rejects = split(
            pipeline | "WarcPaths" >> beam.Create(paths) | "WarcLinks" >> beam.FlatMap(links_from_warc, blocklist), "SplitWarcLinks"
        )
        grouped = keyed | "GroupWarcUrls" >> beam.GroupByKey() | "FirstCapture" >> beam.FlatMapTuple(first_capture)
        links, duplicates = split(grouped, "SplitDuplicates")
        return links, (rejects, duplicates) | "WarcRejects" >> beam.Flatten()
    for path in web.dumps:  # a wrong file is a one-line error now, not a worker's traceback later
        check_dump_format(path)
    records = (
        pipeline
        | "DumpPaths" >> beam.Create(sorted(str(p) for p in web.dumps))
        | "ReadDumps" >> beam.FlatMap(lambda path: read_submissions(path))
    )
    submissions, malformed = split(records, "SplitMalformed")
    screened, dropped = split(submissions | "Screen" >> beam.Map(screen, blocklist, web.exclude_over_18), "SplitScreened")
    selected = (
        screened
        | "GroupByUrl" >> beam.GroupByKey()
        | "Karma" >> beam.FlatMapTuple(lambda key, subs: select_link(key, subs, karma_mode=web.karma_mode, min_karma=web.min_karma))
    )
    links, unselected = split(selected, "SplitSelected")
    return links, (malformed, dropped, unselected) | "LinkRejects" >> beam.Flatten()


class WebText(beam.PTransform):
    """All WebText steps under one label, so they cannot clash with other sources' steps."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg

    def expand(self, pbegin: beam.pvalue.PBegin) -> tuple[PCollection, PCollection]:
        web = self.cfg.webtext
        blocklist = Blocklist(web.extra_blocked_domains, web.extra_blocked_extensions)
        warc_dir = warc_dir_of(self.cfg)
        storage.makedirs(warc_dir)
        links, link_rejects = read_links(pbegin.pipeline, self.cfg, blocklist)
        pages = (
            links
            | "UrlAndLink" >> beam.Map(lambda link: (link.url, link))
            | "Spread" >> beam.Reshuffle()
            | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=web.fetch.batch_size)
            | "FetchOrReplay" >> beam.ParDo(FetchDoFn(web.fetch, warc_dir, offline=web.offline))
            | "Extract" >> beam.Map(lambda pair, web: to_document(*pair, web), web)
        )
        documents, page_rejects = split(pages, "SplitPages")
        if web.extract.lead_from_description:
            parts = documents | "SplitDescribed" >> beam.Partition(lambda d, _: int(isinstance(d, Described)), 2)
            led = (
                parts[1]
                | "ByHostDescription" >> beam.Map(lambda d: (d.key, d))
                | "GroupHostDescription" >> beam.GroupByKey()
                | "LeadOnce" >> beam.FlatMapTuple(lead_once)
            )
            documents = (parts[0], led) | "Documents" >> beam.Flatten()
        rejects = (link_rejects, page_rejects) | "Rejects" >> beam.Flatten()
        return documents, rejects


def count_inputs(path: str, from_dumps: bool) -> tuple[str, dict[str, int]]:
    """One dump's lines (or, offline without dumps, one WARC's records), counted by their own read: the
    build checks them against the documents + rejects WebText ends with."""
    counts: Counter[str] = Counter()
    for _ in read_submissions(path, counts) if from_dumps else iter_captures(path, 0, counts):
        pass
    return "counters", {f"{SOURCE}.inputs": counts["inputs"]}


def input_paths(cfg: Config) -> list[str]:
    return sorted(str(p) for p in cfg.webtext.dumps) if cfg.webtext.dumps else [str(p) for p in warc_files(warc_dir_of(cfg))]


def build_webtext(pipeline: beam.Pipeline, cfg: Config) -> tuple[PCollection, PCollection]:
    """Composite the build job calls: (PCollection[Document], PCollection[Reject])."""
    return pipeline | "WebText" >> WebText(cfg)
