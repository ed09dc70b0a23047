"""Remove Project Gutenberg header, footer and license so only the book's own text remains.

The boilerplate is not the author's prose and repeats in every file; left in, it becomes the most
duplicated passage of a books corpus. The markers below cover every variant in the shared
books (``*** START OF THIS PROJECT GUTENBERG EBOOK``, ``***START OF THE ...***`` without spaces, a
start marker wrapped over two lines, ``End of Project Gutenberg's ...`` / ``End of the Project
Gutenberg EBook of ...`` lines before the end marker) plus the older ``*END*THE SMALL PRINT!``
header terminator. Text without any marker is returned whole.
"""

from __future__ import annotations

import re

# Where the body begins: the end of the last header marker found near the top.
_START_MARKERS = re.compile(
    r"""^[ \t]*\*{3}[ \t]*START[ \t]+OF[ \t]+(?:THE|THIS)[ \t]+PROJECT[ \t]+GUTENBERG[^\n]*(?:\n[^\n*]*)?\*{3}[^\n]*$
      |^[ \t]*\*{3}[ \t]*START[ \t]+OF[ \t]+(?:THE|THIS)[ \t]+PROJECT[ \t]+GUTENBERG[^\n]*$
      |^[^\n]*\*END\*[ \t]*THE[ \t]+SMALL[ \t]+PRINT![^\n]*$""",
    re.IGNORECASE | re.MULTILINE | re.VERBOSE,
)
# Where the body ends: the first footer marker after the body began.
_END_MARKERS = re.compile(
    r"""^[ \t]*\*{3}[ \t]*END[ \t]+OF[ \t]+(?:THE|THIS)[ \t]+PROJECT[ \t]+GUTENBERG
      |^[ \t]*End[ \t]+of[ \t]+(?:the[ \t]+|this[ \t]+)?Project[ \t]+Gutenberg
      |^[ \t]*Fin[ \t]+(?:du|de)[ \t]+(?:the[ \t]+)?Project[ \t]+Gutenberg
      |^[ \t]*Ende[ \t]+dieses[ \t]+Proje[ck]t[ \t]+Gutenberg""",
    re.IGNORECASE | re.MULTILINE | re.VERBOSE,
)
# Producer credits and transcriber notes that follow the start marker, before the book proper.
_CREDIT_OPENING = re.compile(
    r"(?:Produced|Transcribed|Scanned|Proofread)\b|E-?text[ \t]+(?:prepared|produced)|Note[ \t]+from[ \t]+the[ \t]+original[ \t]+file"
    r"|\*+$",
    re.IGNORECASE,
)
_CREDIT_ANYWHERE = re.compile(
    r"Project[ \t]+Gutenberg|\bE-?texts?\b|Transcriber.?s[ \t]+Notes?|Distributed[ \t]+Proofread|pgdp\.net"
    r"|Internet[ \t]+Archive|https?://|www[.:]|\w@\w+\.\w+|\belectronic[ \t]+(?:book|edition|text|version)",
    re.IGNORECASE,
)
_CREDIT_WINDOW = 6_000  # characters after the start marker where credits and notes may sit
_TITLE = re.compile(r"^Title:[ \t]*(.+(?:\n[ \t]+\S.*)*)", re.MULTILINE)
# The same field glued to the line before it by a lost line break ("www.gutenberg.orgTitle: ...").
_GLUED_TITLE = re.compile(r"(?<=[\w.])Title:[ \t]*(.+(?:\n[ \t]+\S.*)*)")
_HEADER_CHARS = 20_000  # the Title: line and start marker sit in the first few hundred lines


def strip_gutenberg(text: str) -> str:
    """The body of a Gutenberg e-book (LF line endings expected); text without markers unchanged."""
    start = _body_start(text)
    end_match = _END_MARKERS.search(text, start)
    end = end_match.start() if end_match else len(text)
    if start == 0 and end_match is None:
        return text
    body = text[start:end]
    return _drop_leading_credits(body) if start else body.strip("\n")


def gutenberg_title(text: str) -> str | None:
    """The ``Title:`` header value (continuation lines joined), or None when there is no header."""
    header = text[:_HEADER_CHARS]
    match = _TITLE.search(header) or _GLUED_TITLE.search(header)
    if match is None:
        return None
    return " ".join(match.group(1).split()) or None


def _body_start(text: str) -> int:
    last = None
    for match in _START_MARKERS.finditer(text, 0, min(len(text), _HEADER_CHARS * 2)):
        last = match
    return last.end() if last else 0


def _drop_leading_credits(body: str) -> str:
    """Drop paragraphs up to the last credit-like one near the top ("Produced by ...", transcriber notes)."""
    paragraphs = re.split(r"\n[ \t]*\n", body.strip("\n"))
    last_credit, offset = -1, 0
    for i, paragraph in enumerate(paragraphs):
        if offset > _CREDIT_WINDOW:
            break
        if _CREDIT_OPENING.match(paragraph.strip()) or _CREDIT_ANYWHERE.search(paragraph):
            last_credit = i
        offset += len(paragraph) + 2
    return "\n\n".join(paragraphs[last_credit + 1 :]).strip("\n")
