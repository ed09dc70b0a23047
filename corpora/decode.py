"""Bytes of a text file to one Python string with LF line endings, whatever the encoding.

Books arrive as UTF-8 (with or without BOM), UTF-16 or UTF-32 with BOM, or legacy 8-bit encodings
(Latin-1, Windows-1252), detected by charset-normalizer. A pre-training corpus must never crash on one bad file, so decoding
always ends with a string, except for content that is not text at all (binary junk saved as
``.txt``): that raises ``BinaryContentError`` so the reader can count it as a reject instead of
feeding replacement characters into the corpus.
"""

from __future__ import annotations

import codecs

from charset_normalizer import from_bytes

# Bytes 0x00-0x08, 0x0E-0x1F and 0x7F never occur in real text in any common encoding;
# tab, LF, VT, FF and CR do.
_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F])
_MAX_CONTROL_RATIO = 0.02  # random bytes score ~0.10; text files score 0.0
_SNIFF_BYTES = 64 * 1024  # enough to judge a file without scanning a whole book
_GUESS_BYTES = 256 * 1024  # charset detection sample
WESTERN_MARGIN = 0.1  # chaos (share of odd characters) windows-1252 may exceed the best guess by


class BinaryContentError(ValueError):
    """The bytes are not text in any encoding (NUL bytes, many control characters)."""


def decode_bytes(data: bytes) -> str:
    """Decode ``data`` to text with ``\\n`` line endings; raise ``BinaryContentError`` for binary junk."""
    return _normalize_newlines(_decode(data))


def _decode(data: bytes) -> str:
    if data.startswith(codecs.BOM_UTF8):
        return data[len(codecs.BOM_UTF8) :].decode("utf-8", errors="replace")
    if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):  # before UTF-16: FF FE 00 00 starts both
        return data.decode("utf-32", errors="replace")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    bom_less_utf16 = _bom_less_utf16(data)
    if bom_less_utf16 is not None:
        return bom_less_utf16
    _reject_binary(data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    return data.decode(guess_encoding(data), errors="replace")


def guess_encoding(data: bytes) -> str:
    """charset-normalizer's pick for undeclared legacy text (books and web pages alike), but
    windows-1252 (the WHATWG legacy default, a Latin-1 superset) when it reads the bytes nearly as
    cleanly: short Western texts decode without errors in several code pages, and "Le café crème"
    otherwise comes back as cp1257 "Le cafï crčme"."""
    matches = list(from_bytes(data[:_GUESS_BYTES]))
    if not matches:
        return "utf-8"
    western = next((m for m in matches if "cp1252" in m.could_be_from_charset), None)
    if western is not None and western.chaos <= matches[0].chaos + WESTERN_MARGIN:
        return "cp1252"
    return matches[0].encoding


def _bom_less_utf16(data: bytes) -> str | None:
    """UTF-16 without BOM shows NUL in every other byte of ASCII text; accept it only if it decodes cleanly."""
    head = data[:_SNIFF_BYTES]
    if len(head) < 4 or b"\x00" not in head:
        return None
    even_nuls, odd_nuls = head[0::2].count(0), head[1::2].count(0)
    half = len(head) // 2
    if odd_nuls > 0.4 * half and even_nuls < 0.05 * half:
        encoding = "utf-16-le"
    elif even_nuls > 0.4 * half and odd_nuls < 0.05 * half:
        encoding = "utf-16-be"
    else:
        return None
    try:
        text = data[: len(data) - len(data) % 2].decode(encoding)
    except UnicodeDecodeError:
        return None
    return text if _control_ratio(text.encode("utf-8", errors="replace")[:_SNIFF_BYTES]) <= _MAX_CONTROL_RATIO else None


def _reject_binary(data: bytes) -> None:
    head = data[:_SNIFF_BYTES]
    if b"\x00" in head:
        raise BinaryContentError("NUL bytes in content: not a text file")
    ratio = _control_ratio(head)
    if ratio > _MAX_CONTROL_RATIO:
        raise BinaryContentError(f"{ratio:.1%} control bytes in content: not a text file")


def _control_ratio(data: bytes) -> float:
    if not data:
        return 0.0
    return (len(data) - len(data.translate(None, delete=_CONTROL_BYTES))) / len(data)


def _normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")
