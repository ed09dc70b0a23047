"""The one document model every source produces, and the reject record for what it drops.

Readers yield ``Document`` or ``Reject`` so that every input record is accounted for:
``inputs == documents + rejects`` is an invariant the pipeline checks. Readers count their inputs
where they read them (``count_input``), never from what they yield, so a record lost on the way
shows up as a mismatch. A damaged remainder of a file (``corrupt_input``) counts as one input.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

# Keys allowed in ``Document.meta`` (written as a Parquet struct of nullable strings).
META_FIELDS: tuple[str, ...] = (
    "file",  # books: path relative to the input root
    "page_id",  # wikipedia
    "revision_id",  # wikipedia
    "timestamp",  # wikipedia revision timestamp / webtext fetch time (ISO 8601)
    "language",  # detected language code, when a language filter ran
    "score",  # webtext: summed reddit karma of the canonical URL
    "subreddit",  # webtext
    "warc_record_id",  # webtext: WARC record the text came from
)


def make_id(source: str, key: str) -> str:
    """Stable id from source + source key, independent of runner, worker or bundle order."""
    return hashlib.sha1(f"{source}\x00{key}".encode("utf-8")).hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    source: str  # "books" | "wikipedia" | "webtext"
    title: str
    text: str  # paragraphs separated by one blank line ("\n\n")
    url: str = ""
    meta: dict[str, str] = field(default_factory=dict)

    def replace(self, **changes: object) -> "Document":
        values = {f: getattr(self, f) for f in ("id", "source", "title", "text", "url", "meta")}
        values.update(changes)
        return Document(**values)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Reject:
    """A dropped record and why. ``reason`` is a short snake_case code (redirect, too_short, ...)."""

    id: str
    source: str
    reason: str
    detail: str = ""  # human-readable detail (error message, duplicate-of id, ...)
    key: str = ""  # the source key (file path, page title, URL) for finding the record again


INPUTS = "inputs"  # the key readers increment in a caller's Counter, once per input record seen


class InputFormatError(ValueError):
    """A file given as a source is not in the source's format at all (a user mistake, not damage):
    the build stops with one line naming the file and the format expected."""


def count_input(counts: Counter[str] | None, n: int = 1) -> None:
    """Tally ``n`` inputs where they are read, independently of what the reader goes on to yield."""
    if counts is not None:
        counts[INPUTS] += n


class AccountingError(RuntimeError):
    """Inputs read and records produced disagree: some record vanished (or was invented) silently."""


def check_accounted(source: str, counts: Counter[str], outputs: int) -> None:
    """Raise ``AccountingError`` with the numbers unless ``inputs == outputs`` (documents + rejects)."""
    if counts[INPUTS] != outputs:
        raise AccountingError(f"{source}: {counts[INPUTS]} inputs read but {outputs} documents + rejects")
