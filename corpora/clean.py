"""Text normalisation shared by every source, and the key used for exact duplicate removal.

Normalising before deduplication and tokenisation means two copies of a text that differ only in
mojibake, stray control characters or line wrapping count as the same text, and the vocabulary
is not spent on encoding accidents.
"""

from __future__ import annotations

import hashlib
import re
import sys
import unicodedata
from functools import cache

import ftfy
import ftfy.badness
import ftfy.chardata
import numpy as np

from corpusforge.core.config import CleanConfig
from corpusforge.corpora.decontaminate import Decontaminator
from corpusforge.corpora.document import Document, Reject
from corpusforge.corpora.language import detect_languages

# Mojibake and encoding repairs only: curly quotes and dashes are the author's, not accidents.
_FTFY = ftfy.TextFixerConfig(uncurl_quotes=False, explain=False)
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# Control characters (except newline and tab, which become whitespace) and invisible format
# characters that only break words apart: soft hyphen, zero-width space, word joiner, BOM.
_INVISIBLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u200b\u2060\ufeff]")
_MAX_REPAIRS = 8  # nested mojibake layers; real text settles after one or two
# The characters some ftfy fixer rewrites wherever they stand: "&" (HTML entities), ASCII and C1 controls
# (ESC of terminal escapes among them), line breaks to unify, surrogates, ligatures, wide and narrow forms.
# A line without any of them that is NFC already and not mojibake (``is_bad``) is one no fixer changes.
_TOUCHED = re.compile(
    "["
    + "".join(
        re.escape(chr(point))
        for point in sorted(
            {ord("&"), ord("\r"), 0x2028, 0x2029, *range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)}
            | set(ftfy.chardata.LIGATURES)
            | set(ftfy.chardata.WIDTH_MAP)
            | set(ftfy.chardata.CONTROL_CHARS)
        )
    )
    + "\ud800-\udfff]"
)


def normalize_text(text: str, fix_unicode: bool = True) -> str:
    """Repair encoding errors, drop control characters, one space inside paragraphs, ``\\n\\n`` between.

    One repair can expose another (``"Â\\n0"`` looks like mojibake only once the line break is a
    space, ``"Â ÂÂœ"`` has two layers), so repair + layout repeat until the text is stable:
    normalising normalised text changes nothing. (Layout cannot go first: it drops the C1 controls
    that mojibake is made of.)
    """
    if not fix_unicode:
        return _layout(text)
    for _ in range(_MAX_REPAIRS):
        repaired = _layout(fix_text(text))
        if repaired == text or not _may_change_again(repaired):
            return repaired
        text = repaired
    return text


def fix_text(text: str, config: ftfy.TextFixerConfig = _FTFY) -> str:
    """``ftfy.fix_text``, line by line as it works, with the lines that no fixer changes left out.

    ftfy runs a dozen fixers over each line at least twice (until a pass changes nothing), though nearly
    every line of real text is one none of them changes (``_TOUCHED``); this is ftfy's own loop, with
    those lines passed over. Whether a line is mojibake (``is_bad``) is asked only of lines holding one of
    its anchors, found once for the whole text (a line of prose with curly quotes holds none). ftfy's
    ``"auto"`` HTML rule (no unescaping once a line has held "<") is kept, line by line, as it applies it.
    """
    anchors = _anchor_positions(text).tolist() if _BADNESS_WIDTH is not None else None  # where mojibake can be
    if _TOUCHED.search(text) is None and (text.isascii() or anchors == [] and unicodedata.is_normalized("NFC", text)):
        return text  # every line passed over, as the loop would: one character class, and a text in NFC has its lines in NFC
    out = []
    passed = 0  # anchors before this line
    position = 0
    while position < len(text):
        end = min(text.find("\n", position) + 1 or len(text), position + config.max_decode_length)
        line = text[position:end]
        if config.unescape_html == "auto" and "<" in line:
            config = config._replace(unescape_html=False)
        if anchors is not None:
            while passed < len(anchors) and anchors[passed] < position:
                passed += 1
        may_be_bad = anchors is None or passed < len(anchors) and anchors[passed] < end
        untouched = _TOUCHED.search(line) is None and (
            line.isascii() or unicodedata.is_normalized("NFC", line) and not (may_be_bad and is_bad(line))
        )
        out.append(line if untouched else ftfy.fix_and_explain(line, config).text)
        position = end
    return "".join(out)


def _may_change_again(text: str) -> bool:
    """ftfy's other fixes are idempotent; only mojibake and HTML entities can reappear after a pass.

    An entity, not any "&": books are full of "&c." and a second pass over a whole book costs as
    much as the first."""
    return bool(ftfy.chardata.HTML_ENTITY_RE.search(text)) or is_bad(text)


def is_bad(text: str) -> bool:
    """``ftfy.badness.is_bad``, searching only near its anchors (``_badness_anchors``).

    Each of the alternatives of ftfy's pattern needs a character that is no ASCII one and spans at most 7
    characters (``_badness_width`` checks this on the installed ftfy's pattern, else the full search
    runs), so a match lies within that distance of one of its anchors. A search of a whole book cost as
    much as repairing it; near every non-ASCII character, a tenth of that; near anchors only, where a
    book's curly quotes and dashes are none, less again.
    """
    if _BADNESS_WIDTH is None:
        return ftfy.badness.is_bad(text)
    anchors = _anchor_positions(text)
    if not len(anchors):
        return False
    starts = np.maximum(anchors - _BADNESS_WIDTH, 0)
    ends = anchors + _BADNESS_WIDTH + 1
    new_window = np.concatenate([[True], starts[1:] > ends[:-1]])
    first, last = starts[new_window], np.maximum.reduceat(ends, np.flatnonzero(new_window))
    search = ftfy.badness.BADNESS_RE.search
    return any(search(text, int(start), int(end)) for start, end in zip(first, last))


def _anchor_positions(text: str) -> np.ndarray:
    """The positions of ``text``'s characters that ``_badness_anchors`` marks (sorted)."""
    if text.isascii():
        return np.empty(0, dtype=np.intp)
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return np.flatnonzero(_badness_anchors()[np.minimum(points, 0x10000)])


# Characters of clean typeset text, punctuation first: where an alternative of ftfy's pattern lets us, its
# anchor is not one of them (a line of English prose with curly quotes and dashes holds no anchor).
_TYPESET = ("‘’“”«»—–…·•", "éèàçñüöäß")


@cache
def _badness_anchors() -> np.ndarray:
    """Per code point up to U+FFFF, and one entry true for all above: whether a match of ftfy's pattern can
    be found around it. Every alternative has required atoms that match no ASCII character; its anchor is
    the one of them matching the fewest ``_TYPESET`` characters (then the fewest below U+3000), so every
    match holds an anchor and a line of plain prose with curly quotes and dashes holds none. Built once per
    process (~0.03 s), from the installed ftfy's pattern as ``_badness_width`` reads it."""
    pattern = ftfy.badness.BADNESS_RE
    flags = pattern.flags & ~re.VERBOSE
    branches = _alternatives(pattern.pattern, verbose=bool(pattern.flags & re.VERBOSE)) or []
    every = "".join(map(chr, range(0x10000)))
    table = np.zeros(0x10001, dtype=bool)
    table[0x10000] = True
    for branch in branches:
        required = [re.compile(atom, flags) for atom, optional in branch if not optional and _matches_no_ascii(atom, flags)]
        anchor = min(
            required, key=lambda m: (*(sum(map(bool, map(m.fullmatch, chars))) for chars in _TYPESET), len(m.findall(every, 128, 0x3000)))
        )
        table[[found.start() for found in anchor.finditer(every)]] = True
    return table


def _layout(text: str) -> str:
    text = _INVISIBLE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    paragraphs = (collapse_spaces(block) for block in _PARAGRAPH_BREAK.split(text))
    return "\n\n".join(p for p in paragraphs if p)


def collapse_spaces(block: str) -> str:
    """``" ".join(block.split())``: runs of whitespace as one space, none at the ends.

    A hard-wrapped block of prose has no whitespace but single spaces and line breaks: with the breaks
    made spaces, ``isprintable`` (false for every whitespace character but " ") and no double space
    prove the join would change nothing but the ends, and the word list is never built (half the cost).
    """
    flat = block.replace("\n", " ")
    if "  " not in flat and flat.isprintable():
        return flat.strip(" ")
    return " ".join(block.split())


def word_count(text: str) -> int:
    """Whitespace-separated words, the unit of the ``min_words`` filter: the definition, for any text; the
    filter itself counts cleaned text with ``laid_out_word_count``, which equals it there."""
    return len(text.split())


def laid_out_word_count(text: str) -> int:
    """``word_count`` of a text ``_layout`` wrote (one space between words, ``\n\n`` between paragraphs, no
    other whitespace): its separators counted, without making a string of each word."""
    return text.count(" ") + text.count("\n\n") + 1 if text else 0


def dedup_key(text: str) -> str:
    """SHA-1 of the text with case, Unicode compatibility forms, punctuation and spacing erased.

    Two copies of a book that differ only in quotes, wrapping or capitalisation share one key.

    The words (runs of letters and digits, ``str.isalnum``: what ``re``'s ``[^\\W_]`` matches) joined by
    single spaces, the per-character test a table look-up in numpy and the runs of other characters cut to
    one space by a mask: ``re.sub(r"[\\W_]+", " ", ...)`` gave the same string at nearly twice the cost,
    and ``" ".join(text.split())`` cost a third of the key. NFKC goes line by line: a line break composes
    with nothing and nothing reorders across it, so the result is the whole text's, and the lines without
    a compatibility character (nearly all) pass Python's quick check instead of a book being normalised
    whole for one "…".
    """
    folded = "\n".join(unicodedata.normalize("NFKC", line) for line in text.split("\n")).casefold()
    points = np.frombuffer(folded.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    word = _word_characters()[points]
    keep = word.copy()
    keep[1:] |= word[:-1]  # a word's characters and the one after it (a space now): runs cut to one space
    kept = np.where(word, points, np.uint32(32))[keep]
    if len(kept) and kept[-1] == 32:
        kept = kept[:-1]
    return hashlib.sha1(kept.tobytes().decode("utf-32-le").encode("utf-8")).hexdigest()


@cache
def _word_characters() -> np.ndarray:
    """Per code point: whether it is a letter or digit (``str.isalnum``), built once per process."""
    return np.char.isalnum(np.arange(sys.maxunicode + 1, dtype=np.uint32).view("<U1"))


# One single-character matcher of a regular expression: a class, a character escape (not \A \b \B \Z,
# a group reference or an octal escape) or a plain character (not a group, quantifier or anchor).
_ATOM = re.compile(
    r"\[\^?\]?(?:\\.|[^\]\\])*\]|\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\}|[^bBAZ0-9])|[^()*+?{}^$|\\[]"
)


def _badness_width() -> int | None:
    """The longest match of ftfy's badness pattern if every alternative needs a non-ASCII character, else None.

    The pattern is read as alternatives of single-character atoms (any construct beyond those, ``?``
    and the anchors ``^ $``: None), and whether an atom can match an ASCII character is asked of
    ``re`` itself, atom by atom.
    """
    pattern = ftfy.badness.BADNESS_RE
    branches = _alternatives(pattern.pattern, verbose=bool(pattern.flags & re.VERBOSE))
    if not branches or not all(any(not optional and _matches_no_ascii(atom, pattern.flags) for atom, optional in b) for b in branches):
        return None
    return max(map(len, branches))


def _alternatives(pattern: str, verbose: bool) -> list[list[tuple[str, bool]]] | None:
    """The top-level alternatives of ``pattern``, each a list of (single-character atom, optional), or None."""
    branches: list[list[tuple[str, bool]]] = [[]]
    position = 0
    while position < len(pattern):
        char = pattern[position]
        position += 1
        if char in "^$" or verbose and char.isspace():
            continue
        if verbose and char == "#":  # a comment runs to the end of the line
            end = pattern.find("\n", position)
            position = len(pattern) if end < 0 else end + 1
        elif char == "|":
            branches.append([])
        elif char == "?" and branches[-1] and not branches[-1][-1][1]:
            branches[-1][-1] = (branches[-1][-1][0], True)
        elif atom := _ATOM.match(pattern, position - 1):
            branches[-1].append((atom.group(), False))
            position = atom.end()
        else:
            return None
    return branches


def _matches_no_ascii(atom: str, flags: int) -> bool:
    matcher = re.compile(atom, flags & ~re.VERBOSE)  # an atom has no layout; a class keeps its spaces either way
    return not any(matcher.fullmatch(chr(point)) for point in range(128))


_BADNESS_WIDTH = _badness_width()
if _BADNESS_WIDTH is not None:
    # ftfy's own mojibake check, run on every line it repairs (an eighth of the documents job on
    # books), becomes the same verdict found near non-ASCII characters only.
    ftfy.is_bad = is_bad


class Cleaner:
    """The per-document filters of the ``clean`` stage: a cleaned document, or a reject with its reason.

    Unicode repair and whitespace, then the minimum length, then the language filter, then the
    evaluation sets' n-grams (``corpora.decontaminate``).
    """

    def __init__(self, cfg: CleanConfig) -> None:
        self.cfg = cfg
        self.decontaminator = (
            Decontaminator.from_files(cfg.decontaminate, cfg.decontaminate_ngram, cfg.decontaminate_min_words)
            if cfg.decontaminate
            else None
        )

    def __call__(self, doc: Document) -> Document | Reject:
        return self.clean_many([doc])[0]

    def clean_many(self, docs: list[Document]) -> list[Document | Reject]:
        """Each document cleaned or rejected as alone; the language of those still in is identified together
        (``detect_languages``: short pages are identified faster so)."""
        texts = [normalize_text(doc.text, fix_unicode=self.cfg.fix_unicode) for doc in docs]
        out: list[Document | Reject | None] = [None] * len(docs)
        for i, (doc, text) in enumerate(zip(docs, texts)):
            words = laid_out_word_count(text)
            if words < self.cfg.min_words:
                out[i] = Reject(doc.id, doc.source, "too_short", f"{words} words < {self.cfg.min_words}", doc.url or doc.title)
        languages: dict[int, str] = {}
        if self.cfg.language:
            kept = [i for i, result in enumerate(out) if result is None]
            for i, (language, confidence) in zip(kept, detect_languages([texts[i] for i in kept])):
                languages[i] = language
                if language != self.cfg.language or confidence < self.cfg.language_min_confidence:
                    doc = docs[i]
                    out[i] = Reject(doc.id, doc.source, "language", f"{language}:{confidence:.2f}", doc.url or doc.title)
        for i, (doc, text) in enumerate(zip(docs, texts)):
            if out[i] is None:
                out[i] = self._decontaminated(doc, text, languages.get(i))
        return out

    def _decontaminated(self, doc: Document, text: str, language: str | None) -> Document | Reject:
        if self.decontaminator is not None:
            found = self.decontaminator.match(text)
            if found is not None:
                detail = f"shares a {self.cfg.decontaminate_ngram}-gram with {found}"
                return Reject(doc.id, doc.source, "contaminated", detail, doc.url or doc.title)
        meta = dict(doc.meta)
        if language is not None:
            meta["language"] = language
        return doc.replace(text=text, meta=meta)
