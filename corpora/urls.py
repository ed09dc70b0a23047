"""URL canonicalisation (the WebText grouping key) and the domain / extension blocklists.

Reddit links to one page under many spellings (``www.``, trailing slash, ``#anchor``, ``&amp;``,
``?utm_source=...``). Karma is summed per canonical URL, so every spelling must map to one key.
courlan scrubs the raw string and decodes punycode hosts; its tracker regex is too greedy for a
grouping key (it drops ``?game=`` and ``?keyword=``), so query filtering uses an explicit list here.

Only the key is canonical. The URL that is fetched is the spelling that was submitted, with the
``&amp;`` of HTML-escaped dumps undone and nothing else changed: servers expect the spelling they
linked (``index.ssf?/base/news-3/1180.xml&coll=1`` breaks once its slashes are encoded, its bare key
given ``=`` or its parameters reordered).
"""

from __future__ import annotations

import functools
import html
import html.entities
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from courlan import scrub_url
from courlan.clean import decode_punycode

from corpusforge.core import storage

DATA_DIR = storage.join(storage.parent(storage.resolve(__file__)), "data")
DEFAULT_PORTS = {"http": 80, "https": 443}

# Query parameters that only track the click, never select content.
TRACKING_PARAMS = frozenset(
    {
        "fbclid",
        "gclid",
        "gclsrc",
        "dclid",
        "msclkid",
        "yclid",
        "twclid",
        "igshid",
        "mc_cid",
        "mc_eid",
        "_ga",
        "_gl",
        "_hsenc",
        "_hsmi",
        "_openstat",
        "ref_src",
        "ref_url",
        "cmpid",
        "wt.mc_id",
        "spm",
        "scid",
        "ncid",
        "sr_share",
        "share",
        "smid",
        "s_cid",
        "ito",
        "vero_id",
        "oly_anon_id",
        "oly_enc_id",
        "rb_clickid",
        "mkt_tok",
        "trk",
        "trkcampaign",
        # seen on the 2005 dumps: nytimes.com (partner, emc, ex, en, ei), wired.com (tw), cnn.com (cnn)
        "partner",
        "emc",
        "ex",
        "en",
        "ei",
        "tw",
        "cnn",
    }
)
TRACKING_PREFIXES = ("utm_", "pk_", "mtm_", "piwik_", "hmb_", "ga_", "itm_", "at_")


def is_tracking_param(name: str) -> bool:
    name = name.lower()
    return name in TRACKING_PARAMS or name.startswith(TRACKING_PREFIXES)


@dataclass(frozen=True, slots=True)
class CleanUrl:
    """``fetch`` is the submitted spelling (``&amp;`` unescaped); ``key`` merges spellings."""

    fetch: str
    key: str
    host: str


UNRESERVED_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def _unescape_unreserved(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char.isascii() and (char.isalnum() or char in "-._~") else "%" + match.group(1).upper()


def _clean_path(path: str) -> str:
    """Resolve dot segments, decode only unreserved escapes (%7E == ~, but %2F stays) and quote the rest."""
    if not path:
        return "/"
    resolved = posixpath.normpath(path)
    if path.endswith("/") and resolved != "/":
        resolved += "/"
    resolved = "/" + resolved.lstrip("/")
    return quote(UNRESERVED_ESCAPE.sub(_unescape_unreserved, resolved), safe="/:@!$&'()*+,;=~%-._")


def fetch_spelling(raw: str) -> str:
    """The submitted URL as it is fetched: stripped, ``&amp;`` unescaped (twice-escaped dumps too),
    ``http://`` before a bare ``www.`` host; every other character as submitted."""
    text = raw.strip()
    while "&amp;" in text:
        text = text.replace("&amp;", "&")
    return "http://" + text if "://" not in text and text.lower().startswith("www.") else text


# A complete HTML character reference: numeric, or a name ended by ";" (as escaped dumps write them).
_CHARACTER_REFERENCE = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")


def unescape_references(text: str) -> str:
    """``html.unescape`` of complete references only. ``html.unescape`` also reads a legacy name without its
    ";", so the query parameters ``&gt=1`` or ``&notify=1`` became ``>=1`` (then cut there) and ``¬ify=1``."""
    return _CHARACTER_REFERENCE.sub(_reference, text)


def _reference(match: re.Match[str]) -> str:
    reference = match.group(0)
    return html.unescape(reference) if reference[1] == "#" or reference[1:] in html.entities.html5 else reference


def clean_url(raw: str) -> CleanUrl | None:
    """Key and fetch spelling of one submitted URL; None when it is not an absolute http(s) URL with a host."""
    if not raw or not isinstance(raw, str):
        return None
    fetch = fetch_spelling(raw)
    text = scrub_url(unescape_references(fetch))
    try:
        parts = urlsplit(text)
        port = parts.port
        urlsplit(fetch)  # what is fetched must parse too: scrub_url cuts "www.<[/" to "www.", the "[" stays in it
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    if scheme not in DEFAULT_PORTS or not host or " " in host:
        return None
    try:
        host = decode_punycode(host.lower()).encode("idna").decode("ascii")
    except UnicodeError:
        return None
    netloc = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    if ":" in host:  # IPv6 literal
        netloc = f"[{host}]" if port in (None, DEFAULT_PORTS[scheme]) else f"[{host}]:{port}"
    path = _clean_path(parts.path)
    pairs = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not is_tracking_param(k)]
    query = urlencode(sorted(pairs), doseq=True)
    bare_netloc = netloc[4:] if netloc.startswith("www.") else netloc
    key_path = path.rstrip("/") if path != "/" else ""
    key_path = key_path[: -len("/index.html")] if key_path.endswith("/index.html") else key_path
    key = urlunsplit(("http", bare_netloc, key_path, query, ""))
    return CleanUrl(fetch=fetch, key=key, host=host)


def canonical_url(raw: str) -> str | None:
    """The grouping key: scheme-, ``www.``-, slash-, fragment- and tracker-insensitive."""
    cleaned = clean_url(raw)
    return cleaned.key if cleaned else None


def _read_list(name: str) -> frozenset[str]:
    text = storage.read_text(storage.join(DATA_DIR, name))
    return frozenset(line.split("#", 1)[0].strip().lower() for line in text.splitlines()) - {""}


@functools.cache
def default_blocked_domains() -> frozenset[str]:
    return _read_list("blocklist_domains.txt")


@functools.cache
def default_blocked_extensions() -> frozenset[str]:
    return _read_list("blocklist_extensions.txt")


class Blocklist:
    """Domain (suffix match on dot boundaries) and extension blocklists with configurable extras."""

    def __init__(self, extra_domains: Iterable[str] = (), extra_extensions: Iterable[str] = ()) -> None:
        self.domains = default_blocked_domains() | {d.strip().lower().lstrip(".") for d in extra_domains}
        self.extensions = default_blocked_extensions() | {e.strip().lower().lstrip(".") for e in extra_extensions}

    def blocked_domain(self, host: str) -> str | None:
        """The listed domain that covers ``host`` (itself or a parent), else None."""
        labels = host.lower().rstrip(".").split(".")
        for start in range(len(labels)):
            candidate = ".".join(labels[start:])
            if candidate in self.domains:
                return candidate
        return None

    def blocked_extension(self, url: str) -> str | None:
        """The listed extension of the URL's last path segment, else None."""
        segment = urlsplit(url).path.rsplit("/", 1)[-1]
        if "." not in segment:
            return None
        extension = unquote(segment).rsplit(".", 1)[1].lower()
        return extension if extension in self.extensions else None
