"""Pushshift Reddit submission dumps -> link candidates for WebText, every submission accounted for.

A dump is NDJSON, compressed as .zst (Pushshift uses a 2 GiB window), .xz, .bz2, .gz or plain.
Schemas drift over the years (float ``created_utc``, ``crosspost_parent_list``, ``_meta``, nulls),
so parsing reads only the fields WebText needs and treats anything else as noise. Selection follows
OpenWebText2 (karma summed over every submission of a canonical URL) or OpenWebText (any single
submission reaching the threshold).
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from corpusforge.core import storage
from corpusforge.corpora.compressed import CORRUPTION, decompressed_chunks
from corpusforge.corpora.document import InputFormatError, Reject, count_input, make_id
from corpusforge.corpora.urls import Blocklist, clean_url

SOURCE = "webtext"
MAX_LINE_BYTES = 8 << 20  # a submission is a few KB; a longer "line" is a wrong or damaged file
SNIFF_LINES = 1000  # this many lines without one submission: the file is not a submission dump
INT_LIMIT = 2**53  # scores and times beyond this are noise, and must stay exact as floats / int64
SUBMISSION_FIELDS = frozenset({"url", "title", "is_self"})  # a comment has none of them


@dataclass(frozen=True, slots=True)
class Submission:
    id: str
    url: str
    score: int
    subreddit: str
    title: str
    is_self: bool
    over_18: bool
    created_utc: int


@dataclass(frozen=True, slots=True)
class Link:
    """One canonical URL chosen for fetching, with the karma that selected it."""

    key: str  # canonical URL (grouping key, document id source)
    url: str  # spelling to fetch
    score: int
    subreddit: str
    title: str
    submission_ids: tuple[str, ...]


def dump_lines(path: storage.PathLike) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) for every line; ``None`` for a line longer than ``MAX_LINE_BYTES``, which
    is skipped without being held in memory."""
    pending = bytearray()
    too_long = False
    number = 0
    for chunk in decompressed_chunks(path):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            number += 1
            too_long = too_long or len(pending) + end - start > MAX_LINE_BYTES
            yield number, None if too_long else bytes(pending + chunk[start:end])
            pending.clear()
            too_long, start = False, end + 1
        if not too_long:
            pending += chunk[start:]
            if len(pending) > MAX_LINE_BYTES:
                pending.clear()
                too_long = True
    if pending or too_long:
        yield number + 1, None if too_long else bytes(pending)


def submission_reject(reason: str, key: str, detail: str = "") -> Reject:
    return Reject(id=make_id(SOURCE, f"submission:{key}"), source=SOURCE, reason=reason, detail=detail, key=key)


def _as_int(value: object) -> int:
    """A count or time from any JSON value: numbers and numeric strings; NaN, inf, bools and the rest are 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return 0
    if isinstance(value, int):
        return max(-INT_LIMIT, min(INT_LIMIT, value))
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return 0
    return int(max(-INT_LIMIT, min(INT_LIMIT, number))) if math.isfinite(number) else 0


def _as_bool(value: object) -> bool:
    """JSON booleans, 0/1 and their string spellings; ``"false"`` is false (``bool("false")`` is not)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return value is True or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 1)


def _as_text(value: object) -> str:
    """Strings and numbers as text; objects, lists, null and bools (schema noise) as ""."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return ""
    return str(value)


def _crosspost_url(row: dict) -> str | None:
    """A crosspost's own url points back to Reddit; the link is the parent's."""
    parents = row.get("crosspost_parent_list")
    for parent in parents if isinstance(parents, list) else ():
        if isinstance(parent, dict) and not _as_bool(parent.get("is_self")) and _as_text(parent.get("url")):
            return _as_text(parent["url"])
    return None


def parse_submission(line: bytes | str, where: str) -> Submission | Reject:
    """One NDJSON line -> Submission, or a reject keyed by file and line: ``malformed_json`` (not
    JSON, nested too deep, not an object with an id) or ``not_a_submission`` (e.g. a comment)."""
    try:
        row = json.loads(line)
    except (ValueError, UnicodeDecodeError) as error:
        return submission_reject("malformed_json", where, str(error)[:200])
    except RecursionError:
        return submission_reject("malformed_json", where, "JSON nested too deeply")
    if not isinstance(row, dict) or not _as_text(row.get("id")):
        return submission_reject("malformed_json", where, "not a submission object")
    if not SUBMISSION_FIELDS.intersection(row):
        return submission_reject("not_a_submission", where, f"object without {', '.join(sorted(SUBMISSION_FIELDS))}")
    url = _as_text(row.get("url"))
    if row.get("crosspost_parent_list") and (not url or clean_url(url) is None or "reddit.com" in url):
        url = _crosspost_url(row) or url
    return Submission(
        id=_as_text(row["id"]),
        url=url,
        score=_as_int(row.get("score")),
        subreddit=_as_text(row.get("subreddit")),
        title=_as_text(row.get("title")),
        is_self=_as_bool(row.get("is_self")),
        over_18=_as_bool(row.get("over_18")),
        created_utc=_as_int(row.get("created_utc")),
    )


def read_submissions(path: storage.PathLike, counts: Counter[str] | None = None) -> Iterator[Submission | Reject]:
    """Stream one dump: one record per non-blank line, counted into ``counts["inputs"]`` as read.

    Any exception on a line becomes a ``parse_error`` reject keyed ``file:line``; damage or a cut
    ends the file in one ``corrupt_input`` reject after the lines before it. A file in which no line
    (of the first ``SNIFF_LINES``) is a submission raises ``InputFormatError``.
    """
    path, name = os.fspath(path), storage.name(path)
    if not storage.is_file(path):
        raise FileNotFoundError(f"Reddit dump not found: {path}")
    lines = submissions = 0
    try:
        for number, line in dump_lines(path):
            if line is not None and not line.strip():
                continue
            count_input(counts)
            lines += 1
            where = f"{name}:{number}"
            record = _parse_line(line, where)
            submissions += isinstance(record, Submission)
            yield record
            if lines == SNIFF_LINES and not submissions:
                raise InputFormatError(_format_error(path, f"first {lines}"))
    except CORRUPTION as error:
        count_input(counts)
        detail = " ".join(f"{type(error).__name__}: {error}".split())
        yield submission_reject("corrupt_input", f"{name}:corrupt", f"{path}: {detail} after {lines} lines")
        return
    if lines and not submissions:
        raise InputFormatError(_format_error(path, str(lines)))


def check_dump_format(path: storage.PathLike) -> None:
    """Raise ``InputFormatError`` (or ``FileNotFoundError``) now, before a build starts, unless a
    submission comes among the first ``SNIFF_LINES`` lines; damage is not a format error (the build
    counts it)."""
    for record in read_submissions(path):
        if isinstance(record, Submission) or record.reason == "corrupt_input":
            return


def _parse_line(line: bytes | None, where: str) -> Submission | Reject:
    """The per-line exception boundary: whatever a line holds, it ends as one record."""
    if line is None:
        return submission_reject("line_too_long", where, f"over {MAX_LINE_BYTES} bytes")
    try:
        return parse_submission(line, where)
    except Exception as error:  # noqa: BLE001 - one odd line must never end a dump
        return submission_reject("parse_error", where, " ".join(f"{type(error).__name__}: {error}".split())[:300])


def _format_error(path: str, lines: str) -> str:
    return (
        f"{path}: none of its {lines} lines is a Reddit submission; expected a Pushshift submissions "
        "dump (RS_*): one JSON object per line with id, url and title, as .zst, .xz, .bz2, .gz or plain NDJSON"
    )


def screen(submission: Submission, blocklist: Blocklist, exclude_over_18: bool) -> tuple[str, Submission] | Reject:
    """Per-submission filters that need no grouping; passes (canonical key, submission)."""
    key = f"{submission.id}"
    if submission.is_self:
        return submission_reject("self_post", key, submission.url)
    if exclude_over_18 and submission.over_18:
        return submission_reject("over_18", key, submission.url)
    cleaned = clean_url(submission.url)
    if cleaned is None:
        return submission_reject("bad_url", key, submission.url)
    domain = blocklist.blocked_domain(cleaned.host)
    if domain:
        return submission_reject("blocked_domain", key, domain)
    extension = blocklist.blocked_extension(cleaned.fetch)
    if extension:
        return submission_reject("blocked_extension", key, extension)
    return cleaned.key, submission


def select_link(
    key: str,
    submissions: Iterable[Submission],
    *,
    karma_mode: Literal["sum", "single"],
    min_karma: int,
) -> Iterator[Link | Reject]:
    """Karma filter for one canonical URL: one Link plus a ``duplicate_url`` reject per extra
    submission, or a ``low_karma`` reject for each. Order-independent (sorted by id)."""
    group = sorted(submissions, key=lambda s: (s.id, s.url))
    total = sum(s.score for s in group)
    best = max(s.score for s in group)
    passes = total >= min_karma if karma_mode == "sum" else best >= min_karma
    if not passes:
        for s in group:
            yield submission_reject("low_karma", s.id, f"{karma_mode} karma {total if karma_mode == 'sum' else best}")
        return
    top = max(group, key=lambda s: (s.score, -s.created_utc, s.id))
    spellings = Counter(clean_url(s.url).fetch for s in group)  # type: ignore[union-attr]
    url = min(spellings, key=lambda u: (-spellings[u], u))  # most submitted spelling, ties by text
    yield Link(
        key=key,
        url=url,
        score=total if karma_mode == "sum" else best,
        subreddit=top.subreddit,
        title=top.title,
        submission_ids=tuple(s.id for s in group),
    )
    for s in group:
        if s is not top:
            yield submission_reject("duplicate_url", s.id, f"same canonical URL as submission {top.id}")
