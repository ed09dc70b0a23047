"""Main-content extraction of one web page, bounded in time, then cleaning and quality filters.

trafilatura extracts the main text with its own evaluated settings (balanced, tables kept, fast: F1
0.920 on its 990-page evaluation set, where favouring precision scored 0.908 and no per-page or
per-paragraph combination of settings passed the slower fallback mode's 0.926). What it misses most is
the article's lead (standfirst), which pages also state as their meta description: putting that back
when the extraction lacks it raises F1 to 0.930 for a regular expression's cost (``bench/extract.py``).

Extraction runs in a persistent worker process so that a pathological page (deep nesting, regex
backtracking) cannot stall the Beam worker: past ``timeout_s`` the worker is killed, a fresh one
started, and the page rejected as ``extraction_timeout``. Then ftfy repairs mojibake, py3langid checks
the language, and the Gopher-style rules in :mod:`corpora.quality` drop what is left.
"""
from __future__ import annotations

import html as html_entities
import multiprocessing
import multiprocessing.connection
import re
import threading
import unicodedata
from collections.abc import Callable

import ftfy
import trafilatura

from corpusforge.corpora.language import detect_language
from corpusforge.corpora.quality import quality_reject
from corpusforge.config import ExtractConfig

# C1 control characters, or a UTF-8 lead byte read as Latin-1 followed by a continuation byte ("Ã©", "â€").
_MOJIBAKE = re.compile("[\x80-\x9f]|[\xc2-\xf4][\x80-\xbf\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192\u02c6\u02dc\u2013-\u203a\u20ac\u2122]")

_TABLE_RULE = re.compile(r"[\s|:-]*")  # the "|---|---|" line under a header row
_META_TAG = re.compile(rb"<meta\s[^<>]*>", re.IGNORECASE)  # no "<" inside: scans never overlap, time stays linear
_DESCRIPTION = re.compile(rb"""(?:name|property)\s*=\s*["'](?:og:)?description["']""", re.IGNORECASE)
_CONTENT = re.compile(rb"""content\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE)

Extractor = Callable[..., "str | None"]  # (html, url, **trafilatura_options(cfg)) -> text


def trafilatura_options(cfg: ExtractConfig) -> dict[str, object]:
    """The picklable extraction settings sent to the worker with each page."""
    return {"favor": cfg.favor, "include_tables": cfg.include_tables, "fast": cfg.fast}


def trafilatura_text(
    html: bytes, url: str, favor: str = "balanced", include_tables: bool = True, fast: bool = True
) -> str | None:
    """trafilatura's main text, one paragraph per line; comments stay out (often off-topic).

    When favouring precision finds nothing (about 2% of the evaluation pages), the balanced settings
    get a second try: an empty page is a certain loss, a balanced extraction usually is not.
    """
    options = {"include_comments": False, "include_formatting": False, "include_tables": include_tables, "fast": fast}
    text = trafilatura.extract(
        html, url=url or None, favor_precision=favor == "precision", favor_recall=favor == "recall", **options
    )
    if not text and favor == "precision":
        text = trafilatura.extract(html, url=url or None, **options)
    return text


def _serve(conn: multiprocessing.connection.Connection, extractor: Extractor) -> None:
    """Worker loop: one (html, url, options) in, one text (or an error string) out, until the pipe closes."""
    conn.send("ready")
    while True:
        try:
            html, url, options = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", extractor(html, url, **options)))
        except Exception as error:  # a broken page must not end the worker
            conn.send(("error", f"{type(error).__name__}: {error}"))


class ExtractorProcess:
    """A persistent extraction subprocess with a per-call time limit; it is replaced after a timeout.

    ``spawn`` (not fork) because the parent is a multi-threaded Beam worker; the start-up cost (importing
    trafilatura, ~1 s) is paid once per worker and once per timed-out page, never per page.
    """

    def __init__(self, timeout_s: float, extractor: Extractor = trafilatura_text) -> None:
        self.timeout_s, self.extractor = timeout_s, extractor
        self._context = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._process: multiprocessing.process.BaseProcess | None = None
        self.restarts = 0

    def _start(self) -> None:
        self._conn, child = self._context.Pipe()
        self._process = self._context.Process(target=_serve, args=(child, self.extractor), daemon=True)
        self._process.start()
        child.close()
        self._conn.recv()  # "ready": start-up time is not charged to the first page

    def _stop(self) -> None:
        if self._process is not None:
            self._conn.close()
            self._process.kill()
            self._process.join()
            self._process = None

    def __call__(self, html: bytes, url: str, options: dict[str, object]) -> tuple[str | None, str]:
        """(text, "") or (None, "extraction_timeout" | "extraction_error"); ``options`` go to the extractor."""
        with self._lock:
            try:
                if self._process is None or not self._process.is_alive():
                    self._start()
                self._conn.send((html, url, options))
                if not self._conn.poll(self.timeout_s):
                    self._stop()
                    self.restarts += 1
                    return None, "extraction_timeout"
                status, text = self._conn.recv()
            except Exception:  # noqa: BLE001 - the worker died (out of memory, a crash in C) or never started
                if self._process is not None and self._process.pid is not None:
                    self._stop()
                self._process = None  # a fresh one is started for the next page
                self.restarts += 1
                return None, "extraction_error"
            return (text, "") if status == "ok" else (None, "extraction_error")

    @property
    def pid(self) -> int | None:
        """The current worker's process id (it changes after a restart), for CPU accounting."""
        return self._process.pid if self._process is not None else None

    def close(self) -> None:
        with self._lock:
            self._stop()


_DEFAULT_PROCESSES: dict[float, ExtractorProcess] = {}


def _process_for(cfg: ExtractConfig) -> ExtractorProcess:
    """One worker process per timeout setting in this Python process (e.g. per Beam worker)."""
    if cfg.timeout_s not in _DEFAULT_PROCESSES:
        _DEFAULT_PROCESSES[cfg.timeout_s] = ExtractorProcess(cfg.timeout_s)
    return _DEFAULT_PROCESSES[cfg.timeout_s]


def meta_description(html: bytes) -> str:
    """The page's own summary (the first ``description`` or ``og:description`` meta tag), "" if none.

    A regular expression on the bytes, not a parse: the worker already parsed the page once.
    """
    for tag in _META_TAG.finditer(html):
        content = _CONTENT.search(tag.group(0)) if _DESCRIPTION.search(tag.group(0)) else None
        if content:
            raw = content.group(1) or content.group(2) or b""
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("latin-1")  # mojibake, if any, is repaired with the rest of the page
            text = " ".join(html_entities.unescape(text).split())
            if text:
                return text
    return ""


def with_lead(text: str, html: bytes) -> str:
    """``text`` led by the page's description when the extraction does not already contain it.

    trafilatura often drops the standfirst (it sits in a teaser block); on its evaluation set a third of
    the missed main-text snippets are in the description, and it adds almost no boilerplate.
    """
    lead = meta_description(html)
    if not lead or lead in " ".join(text.split()):
        return text
    return f"{lead}\n{text}"


def main_text(html: bytes, url: str, cfg: ExtractConfig, extractor: ExtractorProcess) -> tuple[str | None, str]:
    """The extractor's text (one paragraph per line), led by the description it lacks; or (None, reason)."""
    text, reason = extractor(html, url, trafilatura_options(cfg))
    if text and cfg.lead_from_description:
        text = with_lead(text, html)
    return text, reason


def table_row(line: str) -> str:
    """A markdown table row ("| a | b |") as its cells separated by tabs; "" for a rule line.

    The pipes are markup, not text: as words they would also fail the alphabetic-word quality rule
    and drop whole articles that carry one long table.
    """
    if not line.startswith("|"):
        return line
    if _TABLE_RULE.fullmatch(line):
        return ""
    return "\t".join(cell.strip() for cell in line.strip("|").split("|") if cell.strip())


def paragraphs(text: str) -> str:
    """trafilatura's one-paragraph-per-line text as the project's blank-line-separated paragraphs."""
    return "\n\n".join(row for row in (table_row(line.strip()) for line in text.splitlines()) if row)


def fix_mojibake(text: str) -> str:
    """ftfy where the text carries a mojibake signature (UTF-8 read as Latin-1/cp1252, C1 controls).

    ftfy on every page would cost about a fifth of the extraction time; it repairs nothing on clean
    text, and quotes stay curly (``uncurl_quotes=False``): they are text, not damage.
    """
    if text.isascii() or not _MOJIBAKE.search(text):
        return unicodedata.normalize("NFC", text)
    return ftfy.fix_text(text, uncurl_quotes=False)


def clean_page(text: str | None, cfg: ExtractConfig) -> tuple[str | None, str]:
    """Extracted text -> (clean text, "") or (None, reason) after ftfy, quality rules and language."""
    if not text or not text.strip():
        return None, "extraction_empty"
    if cfg.fix_unicode:
        text = fix_mojibake(text)
    text = paragraphs(text)
    reason = quality_reject(text, cfg)  # first: language identification is unreliable on a stub
    if reason:
        return None, reason
    if cfg.languages:
        language, confidence = detect_language(text, windows=2, window_chars=300)  # a page, not a book
        if language not in cfg.languages or confidence < cfg.min_language_confidence:
            return None, "language"
    return text, ""


def extract_page(
    html: bytes,
    url: str,
    content_type: str | None = None,
    config: ExtractConfig | None = None,
    extractor: ExtractorProcess | None = None,
) -> tuple[str | None, str]:
    """(text with paragraphs separated by a blank line, "") or (None, reject reason) for one page."""
    cfg = config or ExtractConfig()
    if content_type and content_type.split(";")[0].strip().lower() not in ("text/html", "application/xhtml+xml", ""):
        return None, "content_type"
    if not html or not html.strip():
        return None, "extraction_empty"
    text, reason = main_text(html, url, cfg, extractor or _process_for(cfg))
    if reason:
        return None, reason
    return clean_page(text, cfg)
