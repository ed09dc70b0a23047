"""Main-content extraction of one web page, bounded in time, then cleaning and quality filters.

trafilatura extracts the main text with its own evaluated settings (balanced, tables kept, fast).
Where the fast path returns the site's navigation instead of the article (many short lines that are
link texts), the page is extracted again with trafilatura's full fallback (readability/jusText).

The article's lead (standfirst) can be restored from the meta description (``lead_from_description``,
off by default): only when the description is visible in the page body, is not already in the
extraction (compared on folded words, so quotes, dashes, punctuation, line breaks and a truncating
ellipsis do not matter) and is not shared by other pages of the host (``pipeline.webtext``). Figures
in ``bench/extract.py``.

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

from corpusforge.core.config import ExtractConfig
from corpusforge.corpora.language import detect_language
from corpusforge.corpora.quality import quality_reject

# C1 control characters, or a UTF-8 lead byte read as Latin-1 followed by a continuation byte ("Ã©", "â€").
_MOJIBAKE = re.compile(
    "[\x80-\x9f]|[\xc2-\xf4][\x80-\xbf\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192\u02c6\u02dc\u2013-\u203a\u20ac\u2122]"
)

_TABLE_RULE = re.compile(r"[\s|:-]*")  # the "|---|---|" line under a header row
_META_TAG = re.compile(rb"<meta\s[^<>]*>", re.IGNORECASE)  # no "<" inside: scans never overlap, time stays linear
_DESCRIPTION = re.compile(rb"""(?:name|property)\s*=\s*["'](?:og:)?description["']""", re.IGNORECASE)
_CONTENT = re.compile(rb"""content\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE)
_HIDDEN = re.compile(r"<(script|style|noscript|template|svg|head)\b|<!--", re.IGNORECASE)
_TAG = re.compile(r"<[^<>]*>")
_ANCHOR = re.compile(r"<a\b[^<>]*>((?:[^<]|<(?!/?a\b)){0,300}?)</a\s*>", re.IGNORECASE)  # bounded: linear time
_WORD = re.compile(r"\w+")
_ELLIPSIS = re.compile(r"\s*(?:\.\.\.|\u2026)\s*$")
NAVIGATION_MIN_LINES = 8  # fewer lines are too little to judge
NAVIGATION_SHARE = 0.5  # of lines that are short link texts
LEAD_RUN = 6  # a lead sharing a run of this many words with the text would repeat it
REPEATED_PARAGRAPH_WORDS = 8  # a paragraph this long seen again in a page is an extraction echo

Extractor = Callable[..., "str | None"]  # (html, url, **trafilatura_options(cfg)) -> text


def trafilatura_options(cfg: ExtractConfig) -> dict[str, object]:
    """The picklable extraction settings sent to the worker with each page."""
    return {"favor": cfg.favor, "include_tables": cfg.include_tables, "fast": cfg.fast, "navigation_fallback": cfg.navigation_fallback}


def _trafilatura(html: bytes, url: str, favor: str, include_tables: bool, fast: bool) -> str | None:
    """trafilatura's main text, one paragraph per line; comments stay out (often off-topic).

    When favouring precision finds nothing (about 2% of the evaluation pages), the balanced settings
    get a second try: an empty page is a certain loss, a balanced extraction usually is not.
    """
    options = {"include_comments": False, "include_formatting": False, "include_tables": include_tables, "fast": fast}
    text = trafilatura.extract(html, url=url or None, favor_precision=favor == "precision", favor_recall=favor == "recall", **options)
    if not text and favor == "precision":
        text = trafilatura.extract(html, url=url or None, **options)
    return text


def _squeeze(text: str) -> str:
    return " ".join(text.split())


def looks_like_navigation(text: str, html: bytes) -> bool:
    """Whether an extraction is mostly the site's menu: at least half of its lines (and of its
    characters) are short lines that the page carries as link texts."""
    lines = [_squeeze(line.lstrip("-*| ")) for line in text.splitlines() if line.strip()]
    if len(lines) < NAVIGATION_MIN_LINES:
        return False
    short = [line for line in lines if len(line.split()) <= 5 and not line.endswith((".", "!", "?"))]
    if len(short) < NAVIGATION_SHARE * len(lines):
        return False
    page = html.decode("utf-8", errors="replace")
    anchors = {_squeeze(html_entities.unescape(_TAG.sub(" ", match))) for match in _ANCHOR.findall(page)}
    linked = sum(len(line) for line in short if line in anchors)
    return linked >= NAVIGATION_SHARE * sum(map(len, lines))


def trafilatura_text(
    html: bytes,
    url: str,
    favor: str = "balanced",
    include_tables: bool = True,
    fast: bool = True,
    navigation_fallback: bool = True,
) -> str | None:
    """The fast path's text; a page whose fast extraction is navigation gets the full fallback, and
    keeps its result unless that is navigation too."""
    text = _trafilatura(html, url, favor, include_tables, fast)
    if fast and navigation_fallback and text and looks_like_navigation(text, html):
        fuller = _trafilatura(html, url, favor, include_tables, fast=False)
        if fuller and not looks_like_navigation(fuller, html):
            return fuller
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


def folded_words(text: str) -> list[str]:
    """Lower-case words without punctuation: curly or straight quotes, dashes, commas and line breaks
    compare equal."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _contains(words: list[str], haystack: list[str]) -> bool:
    return " " + " ".join(words) + " " in " " + " ".join(haystack) + " "


def visible_words(html: bytes) -> list[str]:
    """The folded words of the page body as a reader sees them (no head, scripts, styles, comments).

    Each hidden block is skipped with one forward search for its end: linear time on any page.
    """
    page, parts, position = html.decode("utf-8", errors="replace"), [], 0
    while match := _HIDDEN.search(page, position):
        parts.append(page[position : match.start()])
        end = re.compile("-->" if match.group(1) is None else f"</{match.group(1)}\\s*>", re.IGNORECASE)
        closing = end.search(page, match.end())
        position = closing.end() if closing else len(page)
    parts.append(page[position:])
    return folded_words(html_entities.unescape(_TAG.sub(" ", " ".join(parts))))


def _runs(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + LEAD_RUN]) for i in range(len(words) - LEAD_RUN + 1)}


def description_lead(text: str, html: bytes) -> str:
    """The page's description when it is a lead the extraction dropped, else "".

    A lead is visible in the page body (an SEO summary only in ``<meta>`` is not the article) and shares
    no run of ``LEAD_RUN`` words with ``text``: a description that is already there, in part (a
    truncated one, one prefixed by "Video:" or joined from two paragraphs) or whole, is never repeated.
    A description cut with "..." is compared without its possibly cut last word.
    """
    lead = meta_description(html)
    words = folded_words(_ELLIPSIS.sub("", lead))
    if _ELLIPSIS.search(lead):
        words = words[:-1]
    if len(words) < LEAD_RUN or _runs(words) & _runs(folded_words(text)):
        return ""
    return lead if _contains(words, visible_words(html)) else ""


def with_lead(text: str, lead: str) -> str:
    """``text`` led by ``lead`` on a line of its own (a ``description_lead``)."""
    return f"{lead}\n{text}" if lead else text


def main_text(html: bytes, url: str, cfg: ExtractConfig, extractor: ExtractorProcess) -> tuple[str | None, str]:
    """The extractor's text, one paragraph per line; or (None, reason)."""
    return extractor(html, url, trafilatura_options(cfg))


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
    """trafilatura's one-paragraph-per-line text as the project's blank-line-separated paragraphs.

    A long paragraph that comes again (trafilatura sometimes takes both the mobile and the desktop copy
    of a block, or a caption twice) is kept once: the page shows it once.
    """
    rows: list[str] = []
    seen: set[str] = set()
    for row in (table_row(line.strip()) for line in text.splitlines()):
        if not row:
            continue
        if len(row.split()) >= REPEATED_PARAGRAPH_WORDS:
            words = " ".join(folded_words(row))
            if words in seen:
                continue
            seen.add(words)
        rows.append(row)
    return "\n\n".join(rows)


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
