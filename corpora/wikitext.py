"""MediaWiki markup to plain text, fast enough for a whole Wikipedia dump on a few cores.

A full parser (mwparserfromhell) builds a tree for every page and is ~4x slower than
WikiExtractor; this module is a fixed pipeline of C-speed regular expressions plus one linear
scan for the only structures that nest (``{{templates}}`` and ``{| tables |}``). Pre-training
corpora want running prose, so everything that is not prose is dropped rather than rendered:
templates (infoboxes, citations, navboxes), tables, references, files, categories,
interlanguage links, math and galleries. Link and formatting markup is reduced to its text.
"""

from __future__ import annotations

import bisect
import functools
import html
import re
import time
from collections.abc import Callable, Iterable

# Tags whose whole content is not prose (a ``<ref>`` is a citation, ``<math>`` is TeX, ...).
DROPPED_TAGS = (
    "ref",
    "references",
    "math",
    "chem",
    "ce",
    "gallery",
    "timeline",
    "score",
    "graph",
    "imagemap",
    "templatestyles",
    "mapframe",
    "maplink",
    "syntaxhighlight",
    "source",
    "hiero",
    "inputbox",
    "categorytree",
    "indicator",
    "section",
    "table",
)

# Link prefixes that put an image or a category on the page instead of text: the canonical
# English names plus common localized namespace names; ``wikitext_to_text`` takes more.
MEDIA_PREFIXES = frozenset(
    {
        "file",
        "image",
        "media",
        "category",
        "tập tin",
        "hình",
        "thể loại",
        "phương tiện",  # vi
        "файл",
        "изображение",
        "категория",
        "медия",  # bg, ru
        "datei",
        "bild",
        "kategorie",  # de
        "fichier",
        "catégorie",  # fr
        "archivo",
        "imagen",
        "categoría",  # es
        "ficheiro",
        "arquivo",
        "categoria",  # pt, it
        "plik",
        "kategoria",  # pl
        "bestand",
        "categorie",  # nl
    }
)

# Interwiki prefixes that are links to sister projects (shown as text), not interlanguage links.
_SISTER_PREFIXES = frozenset(
    {
        "wikt",
        "wiktionary",
        "w",
        "wikipedia",
        "s",
        "wikisource",
        "q",
        "wikiquote",
        "b",
        "wikibooks",
        "n",
        "wikinews",
        "v",
        "wikiversity",
        "voy",
        "wikivoyage",
        "commons",
        "meta",
        "m",
        "species",
        "d",
        "wikidata",
        "mw",
        "mediawiki",
        "foundation",
        "wmf",
        "c",
        "special",
        "help",
        "portal",
    }
)

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
# Closing and self-closing tags of DROPPED_TAGS; "[^<>]" keeps every scan within one tag.
_CLOSING_TAG = re.compile(r"</(%s)\s*>" % "|".join(DROPPED_TAGS), re.I)
_SELF_CLOSING_TAG = re.compile(r"<(?:%s)\b[^<>]*/>" % "|".join(DROPPED_TAGS), re.I)
_TEMPLATE_PARAM = re.compile(r"\{\{\{[^{}]*\}\}\}")
# Tokens of the nesting scan: template braces anywhere, table braces (group 1) only at a line
# start after indentation; "|}}" is a template's empty last parameter, not a table end.
_NEST_TOKEN = re.compile(r"\{\{|\}\}|^[ \t:]*(\{\||\|\}(?!\}))", re.M)
_NEST_CLOSER = re.compile(r"\}\}|^[ \t:]*\|\}(?!\})", re.M)
# With no closer anywhere every opener is unclosed and loses its two characters (a template opener
# alone on its line also its line break): one substitution instead of one scan step per opener.
_UNCLOSED_OPENER = re.compile(r"^\{\{\n|\{\{|^\{\|\n|^([ \t:]*)\{\|", re.M)
_UNCLOSED_TEMPLATE = re.compile(r"^\{\{\n|\{\{", re.M)
_EXTERNAL_LINK = re.compile(r"\[(?:https?:|ftp:|mailto:|//)[^\s\[\]]*(?:[ \t]+([^\[\]\n]*))?\]", re.I)
_BARE_URL_BRACKET = re.compile(r"\[(?:https?:|ftp:)//[^\s\]]*\]")
# Innermost links: no "[[" or "]]" inside, single brackets allowed ("caption [sic]").
_INTERNAL_LINK = re.compile(r"\[\[([^\[\]]*+(?:(?:\[(?!\[)|\](?!\]))[^\[\]]*+)*+)\]\]")  # possessive: no backtracking
_INTERLANGUAGE = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{2,8}){0,2}|simple|be-x-old|roa-tara")
# Line-anchored patterns start with a literal "\n" (the text is wrapped in newlines): re's
# literal-prefix search makes that several times faster than "^" with re.M.
_HEADING = re.compile(r"\n(={1,6})([^\n]*)(?=\n)")  # a candidate line; _heading checks the closing marks
_BOLD_ITALIC = re.compile(r"'''''|'''|''")
_MAGIC_WORD = re.compile(r"__[A-Z_]{2,30}__")
_HTML_TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*\b[^<>]*?/?>")
_HORIZONTAL_RULE = re.compile(r"\n-{4,}")
_LIST_CHARS = "*#:; \t"
_EMPTY_PARENS = re.compile(r"\([ \t]*(?:[,;:.][ \t]*)*\)")
_SPACES = re.compile(r"  +")
_LEFTOVER = ("{{", "}}", "[[", "]]", "{|", "|}")
_NEST_TOKENS = ("{{", "}}", "{|", "|}")
_BRACKET_RUN = re.compile(r"[{}\[\]|]{2,}")
_REPLACE_PASSES = 4  # then a stack settles what is left of the run in one pass
_HEADING_MARK = "\x00H"  # + level digit; marks heading lines until paragraphs are joined
_LEVELS = ("1", "2", "3", "4", "5", "6")


class MarkupTimeout(TimeoutError):
    """A page's markup took longer than its time budget to convert."""


def wikitext_to_text(
    wikitext: str, *, keep_headings: bool = True, media_prefixes: Iterable[str] = (), budget_s: float | None = None
) -> str:
    """Plain text of a page: paragraphs joined by a blank line, list items one per line.

    Section headings are kept (``keep_headings``) as a paragraph of their own, without the
    ``==`` marks, so sentence splitters never glue a heading onto the next sentence.
    ``media_prefixes`` adds localized File/Category namespace names (from the dump's siteinfo).
    Every step is linear in the page size; ``budget_s`` still bounds one page's time (checked
    between steps) and raises ``MarkupTimeout`` past it, so no page can stall a worker.
    """
    media = MEDIA_PREFIXES | {p.lower() for p in media_prefixes}
    steps: tuple[Callable[[str], str], ...] = (
        lambda text: _COMMENT.sub("", text),
        _drop_tags,
        lambda text: _TEMPLATE_PARAM.sub("", text),
        _drop_nested,
        lambda text: _MAGIC_WORD.sub("", text),
        lambda text: _BARE_URL_BRACKET.sub("", text),
        lambda text: _EXTERNAL_LINK.sub(lambda m: m.group(1) or "", text),
        lambda text: _rewrite_links(text, media),
        lambda text: _HEADING.sub(lambda m: _heading(m, keep_headings), text),
        lambda text: _BOLD_ITALIC.sub("", text),
        lambda text: _HTML_TAG.sub("", text),
        html.unescape,
        lambda text: _HORIZONTAL_RULE.sub("\n", text),
        lambda text: _EMPTY_PARENS.sub("", text),
        _drop_leftover,
        _normalize_spaces,
        _paragraphs,
    )
    deadline = None if budget_s is None else time.monotonic() + budget_s
    text = f"\n{wikitext}\n"
    for step in steps:
        text = step(text)
        if deadline is not None and time.monotonic() > deadline:
            raise MarkupTimeout(f"over {budget_s}s converting {len(wikitext)} characters of markup")
    return text


def _normalize_spaces(text: str) -> str:
    for char in "\t\u00a0\u2009\u202f":
        text = text.replace(char, " ")
    text = _SPACES.sub(" ", text.replace("\u200b", ""))
    for punctuation in ",.)":
        text = text.replace(f" {punctuation}", punctuation)
    return text


def _heading(m: re.Match[str], keep: bool) -> str:
    """``== Title ==`` (the same number of ``=`` closing it, trailing blanks allowed) as a marked
    heading line, or a bare line break when headings are dropped; any other line unchanged."""
    opening = m.group(1)
    line = (opening + m.group(2)).rstrip(" \t")
    for level in range(len(opening), 0, -1):
        title = line[level:-level].strip(" \t")
        if len(line) > 2 * level and line.endswith("=" * level) and title:
            return f"\n\n{_HEADING_MARK}{level}{title}\n" if keep else "\n"
    return m.group(0)


def _drop_tags(text: str) -> str:
    """Remove ``<ref>...</ref>``-like elements (and self-closing ones), scanning forward once.

    An opener takes everything up to the first closer of its name after it; an opener never
    closed stays (its content is kept as text). Only names that close somewhere are searched
    for, each only up to its last closer, so unclosed tags cost nothing at all (a regex
    ``<ref>.*?</ref>`` rescans to the end for each: 13 s for ``'<ref>' * 4000``).
    """
    if "/" not in text:  # no closing or self-closing tag: nothing to drop (a substring test, no regex pass)
        return text
    text = _SELF_CLOSING_TAG.sub("", text)
    closers: dict[str, list[re.Match[str]]] = {}
    for closer in _CLOSING_TAG.finditer(text):
        closers.setdefault(closer[1].lower(), []).append(closer)
    pieces: list[str] = []
    position = scan = 0
    while closers:
        limit = max(found[-1].start() for found in closers.values())
        opener = _opening_tag(frozenset(closers)).search(text, scan, limit)
        if opener is None:
            break
        name = opener[1].lower()
        found = closers[name]
        index = bisect.bisect_left(found, opener.end(), key=lambda m: m.start())
        if index == len(found):
            del closers[name]  # every later opener of this name is unclosed too
            scan = opener.end()
            continue
        pieces.append(text[position : opener.start()])
        position = scan = found[index].end()
    pieces.append(text[position:])
    return "".join(pieces)


@functools.cache
def _opening_tag(names: frozenset[str]) -> re.Pattern[str]:
    return re.compile(r"<(%s)\b[^<>]*>" % "|".join(sorted(names)), re.I)


def _drop_nested(text: str) -> str:
    """Remove ``{{...}}`` and ``{|...|}`` spans, nested to any depth, in one linear scan.

    A closer pops back to its matching opener (forgiving unclosed inner openers); a closer
    with no opener, and an opener never closed, lose only their own two characters so one
    stray brace never swallows the rest of an article. A table is a block, so it leaves a
    paragraph break behind; a template leaves nothing.
    """
    if not _holds(text, _NEST_TOKENS):
        return text
    if ("}}" not in text and "|}" not in text) or not _NEST_CLOSER.search(text):
        if "{|" not in text:
            return _UNCLOSED_TEMPLATE.sub("", text)  # a plain replacement: no Python call per opener
        return _UNCLOSED_OPENER.sub(r"\1", text)
    spans: list[tuple[int, int, str]] = []  # (start, end, replacement)
    stack: list[tuple[str, int, int]] = []  # (kind, start, end of the opener token)
    open_at: dict[str, list[int]] = {"t": [], "|": []}  # stack indexes of each kind's openers
    for m in _NEST_TOKEN.finditer(text):
        token = m.group(1) or m.group()
        kind = "|" if m.group(1) else "t"
        start = m.start(1) if m.group(1) else m.start()
        if token in ("{{", "{|"):
            open_at[kind].append(len(stack))
            stack.append((kind, start, m.end()))
            continue
        if not open_at[kind]:
            spans.append((start, m.end(), ""))
            continue
        depth = open_at[kind][-1]
        for _, start, end in stack[depth + 1 :]:
            spans.append((start, end, ""))
        spans.append((stack[depth][1], m.end(), "\n\n" if kind == "|" else ""))
        del stack[depth:]
        for indexes in open_at.values():
            while indexes and indexes[-1] >= depth:
                indexes.pop()
    spans.extend((start, end, "") for _, start, end in stack)
    if not spans:
        return text
    spans.sort()
    pieces: list[str] = []
    position = 0
    for start, end, replacement in spans:
        if end <= position:
            continue  # inside a span already removed
        start = max(start, position)
        pieces.append(text[position:start])
        pieces.append(replacement)
        # A template that filled whole lines takes its line break along (no spurious paragraph).
        if not replacement and (start == 0 or text[start - 1] == "\n") and text.startswith("\n", end):
            end += 1
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


def _drop_leftover(text: str) -> str:
    """Last resort for unbalanced markup: drop stray ``{{ }} [[ ]] {| |}`` pairs, including pairs
    that meet once the pairs between them are gone (``[{{[`` -> ``[[`` -> nothing): a stack per run
    of bracket characters, linear where repeated ``str.replace`` passes would be quadratic."""
    if not _holds(text, _LEFTOVER):
        return text
    return _BRACKET_RUN.sub(_reduce_run, text)


def _holds(text: str, tokens: tuple[str, ...]) -> bool:
    """Whether any of ``tokens`` occurs in ``text``, their characters looked for first: a one-character search is a
    plain scan, a two-character one several times slower on a page holding any character beyond Latin-1, and most
    pages hold none of these characters once their markup is gone."""
    return any(char in text for char in _characters(tokens)) and any(token in text for token in tokens)


@functools.cache
def _characters(tokens: tuple[str, ...]) -> str:
    return "".join(sorted(set("".join(tokens))))


def _reduce_run(m: re.Match[str]) -> str:
    run = m.group()
    for _ in range(_REPLACE_PASSES):  # C-speed passes settle every run real pages have
        if not any(token in run for token in _LEFTOVER):
            return run
        for token in _LEFTOVER:
            run = run.replace(token, "")
    kept: list[str] = []
    for char in run:
        if kept and kept[-1] + char in _LEFTOVER:
            kept.pop()
        else:
            kept.append(char)
    return "".join(kept)


def _rewrite_links(text: str, media: frozenset[str] | set[str]) -> str:
    """Replace ``[[target|label]]`` by its label, innermost first (File captions hold links)."""

    def replace(m: re.Match[str]) -> str:
        target, bar, label = m.group(1).partition("|")
        target = target.strip()
        prefix, colon, _ = target.partition(":")
        if colon and not target.startswith(":"):
            name = prefix.strip().lower()
            if name in media:
                return ""
            if not bar and name not in _SISTER_PREFIXES and _INTERLANGUAGE.fullmatch(name):
                return ""
        if bar:
            return label.rpartition("|")[2] if label else target.lstrip(":")
        return target.lstrip(":").lstrip("#")

    for _ in range(8):  # nesting depth; real pages need two passes at most
        text, count = _INTERNAL_LINK.subn(replace, text)
        if not count:
            break
    return text


def _paragraphs(text: str) -> str:
    """Join source lines as MediaWiki renders them: a blank line ends a paragraph, list items
    stay one per line, consecutive plain lines run together into one paragraph."""
    paragraphs: list[tuple[int, str]] = []  # (heading level, or 0 for body text; text)
    block: list[str] = []
    block_is_list = False

    def flush() -> None:
        if block:
            paragraphs.append((0, "\n".join(block)))
            block.clear()

    for raw in text.split("\n"):
        is_item = raw[:1] in ("*", "#", ":", ";")
        line = raw.lstrip(_LIST_CHARS).strip() if is_item else raw.strip()
        if not line:
            if not raw.strip():
                flush()
            continue
        if line.startswith(_HEADING_MARK):
            flush()
            rest = line[len(_HEADING_MARK) :]
            level = int(rest[0]) if rest[:1] in _LEVELS else 1
            paragraphs.append((level, rest[1:].strip() if rest[:1] in _LEVELS else rest.strip()))
            continue
        if block and is_item != block_is_list:
            flush()
        block_is_list = is_item
        if block and not is_item:
            block[-1] = f"{block[-1]} {line}"
        else:
            block.append(line)
    flush()
    return "\n\n".join(_drop_empty_sections(paragraphs))


def _drop_empty_sections(paragraphs: list[tuple[int, str]]) -> list[str]:
    """Drop headings with nothing under them ("References", "See also" once their lists and
    templates are gone): a heading survives only if body text or a deeper heading follows."""
    kept: list[str] = []
    following: int | None = None  # level of the next kept paragraph; None at the end
    for level, paragraph in reversed(paragraphs):
        if not paragraph or (level and not (following == 0 or (following or 0) > level)):
            continue
        kept.append(paragraph)
        following = level
    return kept[::-1]
