"""Extraction of real pages from trafilatura's evaluation set, the time limit, and the quality rules."""

from __future__ import annotations

import json
import os
import re
import tarfile
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corpusforge.core.config import ExtractConfig
from corpusforge.corpora.extract import (
    ExtractorProcess,
    description_lead,
    extract_page,
    looks_like_navigation,
    meta_description,
    paragraphs,
    trafilatura_options,
    trafilatura_text,
    with_lead,
)
from corpusforge.corpora.quality import quality_reject

PAGES = ("wired.com.burn.html", "businessjargons.com.leadership.html", "bsi.de-ki.html", "rnz.de.witzel.html")


@pytest.fixture(scope="module")
def eval_pages(shared_data) -> dict[str, tuple[bytes, dict]]:
    """The test pages and their annotations, streamed from the head of the archive (no full unpack)."""
    folder = shared_data / "html" / "trafilatura_eval"
    annotations = {item["file"]: item for item in json.loads((folder / "evaldata.json").read_text(encoding="utf-8")).values()}
    pages = {}
    with tarfile.open(folder / "html_eval_and_cache.tar.xz", "r|xz") as archive:
        for member in archive:
            name = member.name.rpartition("/")[2]
            if name in PAGES:
                pages[name] = (archive.extractfile(member).read(), annotations[name])
                if len(pages) == len(PAGES):
                    break
    return pages


@pytest.fixture(scope="module")
def extractor():
    process = ExtractorProcess(timeout_s=30.0)
    yield process
    process.close()


def norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize("name", ["wired.com.burn.html", "businessjargons.com.leadership.html"])
def test_english_pages_keep_main_text_and_drop_boilerplate(eval_pages, extractor, name):
    html, item = eval_pages[name]
    text, reason = extract_page(html, "https://example.com/" + name, "text/html; charset=utf-8", extractor=extractor)
    assert reason == "" and text is not None
    assert "\n\n" in text and "\n\n\n" not in text  # one blank line between paragraphs
    found = norm(text)
    assert all(norm(s) in found for s in item["with"])
    assert not any(norm(s) in found for s in item["without"])


def test_lead_from_the_meta_description_only_when_missing(eval_pages, extractor):
    """wired's standfirst is visible, annotated main text that trafilatura drops; the page states it as its
    description. businessjargons' description is its first paragraph: never repeated. Off by default."""
    html, _ = eval_pages["wired.com.burn.html"]
    lead = meta_description(html)
    assert lead.startswith("The computing power required for AI landmarks")
    text, _ = extract_page(html, "https://www.wired.com/", extractor=extractor)
    assert lead not in norm(text)
    assert description_lead(text, html) == lead
    html, _ = eval_pages["businessjargons.com.leadership.html"]
    text, _ = extract_page(html, "https://businessjargons.com/", extractor=extractor)
    assert norm(meta_description(html)) in norm(text) and description_lead(text, html) == ""


BODY = "\u201cWe didn\u2019t expect it\u201d \u2014 said the mayor, who opened the new bridge across the river on Monday."


@pytest.mark.parametrize(
    "description",
    [
        '"We didn\'t expect it" - said the mayor, who opened the new bridge across the river on Monday.',  # straight quotes, hyphen
        "We didn't expect it, said the mayor, who opened the new bridge across the river on Monday",  # punctuation
        "\u201cWe didn\u2019t expect it\u201d \u2014 said the mayor, who opened the new bri...",  # truncated mid-word
        '"We didn\'t expect it" - said the mayor, who opened the new\u2026',
    ],
)
def test_lead_spelling_variants_are_not_added_again(description):
    html = (f'<html><head><meta name="description" content="{description}"></head><body><p>{BODY}</p></body></html>').encode()
    assert description_lead(BODY.replace(", who", ",\nwho") + "\nMore text.", html) == ""  # other line breaks


def test_lead_hidden_or_too_short_is_not_added():
    text = "The council met on Tuesday to discuss the budget for the coming year."
    hidden = (
        b'<html><head><meta name="description" content="Read the latest local news from our city desk today"></head>'
        b"<body><p>The council met on Tuesday.</p></body></html>"
    )
    assert description_lead(text, hidden) == ""  # only in <meta>: an SEO summary, not the article's lead
    shown = hidden.replace(b"<body>", b"<body><p class=teaser>Read the latest local news from our city desk today</p>")
    assert description_lead(text, shown) == "Read the latest local news from our city desk today"
    short = b'<html><head><meta name="description" content="Home page"></head><body>Home page</body></html>'
    assert description_lead(text, short) == ""


def test_navigation_from_the_fast_path_gets_the_full_fallback(eval_pages):
    """rnz.de's fast extraction is the site's menu (short link texts); the fallback finds the article."""
    html, item = eval_pages["rnz.de.witzel.html"]
    fast = trafilatura_text(html, "https://www.rnz.de/", navigation_fallback=False)
    assert fast and looks_like_navigation(fast, html)
    text = trafilatura_text(html, "https://www.rnz.de/")
    assert text and not looks_like_navigation(text, html)
    found = [norm(s) in norm(text) for s in item["with"]]
    assert sum(found) > sum(norm(s) in norm(fast) for s in item["with"]) and sum(found) >= len(found) - 1
    html, _ = eval_pages["wired.com.burn.html"]  # an article is not navigation
    assert not looks_like_navigation(trafilatura_text(html, "https://www.wired.com/", navigation_fallback=False), html)


def test_repeated_paragraphs_are_kept_once():
    long = "The same caption appears twice because the page has a mobile and a desktop copy of it."
    assert paragraphs(f"{long}\nShort line\n{long.upper()}\nShort line\nEnd.") == f"{long}\n\nShort line\n\nShort line\n\nEnd."


def test_meta_description_forms():
    assert (
        meta_description(b'<meta property="og:description" content="A &amp; B\n  here"><meta name="description" content="x">')
        == "A & B here"
    )
    assert meta_description(b"<META CONTENT='Caf\xc3\xa9 news' NAME='Description'>") == "Caf\u00e9 news"
    assert meta_description(b'<meta name="description" content="  "><meta name="keywords" content="a, b">') == ""
    assert meta_description(b'<meta name="twitter:description" content="not this one">') == ""
    started = time.monotonic()  # it runs outside the time-limited worker: no quadratic backtracking
    assert meta_description(b"<meta name='description' " * 200_000) == ""
    assert time.monotonic() - started < 1.0


words = st.lists(st.text(alphabet="abc", min_size=1, max_size=3), min_size=6, max_size=12).map(" ".join)


@given(lead=words, body=st.lists(words, min_size=1, max_size=5).map("\n".join))
def test_lead_is_added_at_most_once(lead, body):
    html = f'<html><head><meta name="description" content="{lead}"></head><body><p>{lead}</p></body></html>'.encode()
    once = with_lead(body, description_lead(body, html))
    assert once in (body, f"{lead}\n{body}")
    assert description_lead(once, html) == ""
    runs = lambda text: {tuple(text.split()[i : i + 6]) for i in range(len(text.split()) - 5)}  # noqa: E731
    assert (once == body) == bool(runs(lead) & runs(body))  # left out only when it would repeat a 6-word run


def test_language_filter(eval_pages, extractor):
    html, item = eval_pages["bsi.de-ki.html"]
    assert extract_page(html, "https://www.bsi.bund.de/", config=ExtractConfig(), extractor=extractor) == (None, "language")
    text, reason = extract_page(html, "https://www.bsi.bund.de/", config=ExtractConfig(languages=["de"]), extractor=extractor)
    assert reason == "" and text is not None  # German allowed: the article comes through whole
    found = norm(text)
    assert all(norm(s) in found for s in item["with"])
    assert not any(norm(s) in found for s in item["without"])


def test_not_html_or_empty(extractor):
    assert extract_page(b"%PDF-1.4", "https://x.org/a.pdf", "application/pdf", extractor=extractor) == (None, "content_type")
    assert extract_page(b"  ", "https://x.org/", "text/html", extractor=extractor) == (None, "extraction_empty")
    assert extract_page(b"<html><body><script>x()</script></body></html>", "https://x.org/", extractor=extractor) == (
        None,
        "extraction_empty",
    )
    assert extract_page(b"<html><body><p>A short note.</p></body></html>", "https://x.org/", extractor=extractor) == (
        None,
        "too_short",
    )


def stalling_extractor(html: bytes, url: str, **options) -> str | None:
    """Stands in for a pathological page: it never finishes in time (runs in the worker process)."""
    if b"STALL" in html:
        time.sleep(60)
    if b"RAISE" in html:
        raise ValueError("unparseable")
    if b"CRASH" in html:
        os._exit(1)  # as a segfault or an out-of-memory kill would end it
    return trafilatura_text(html, url, **options)


def test_timeout_and_crash_restart_the_worker(eval_pages):
    process = ExtractorProcess(timeout_s=1.0, extractor=stalling_extractor)
    html, _ = eval_pages["wired.com.burn.html"]
    try:
        started = time.monotonic()
        assert extract_page(b"<html>STALL</html>", "https://x.org/", extractor=process) == (None, "extraction_timeout")
        assert time.monotonic() - started < 30
        assert process.restarts == 1
        assert extract_page(b"<html>RAISE</html>", "https://x.org/", extractor=process) == (None, "extraction_error")
        assert extract_page(b"<html>CRASH</html>", "https://x.org/", extractor=process) == (None, "extraction_error")
        assert process.restarts == 2
        text, reason = extract_page(html, "https://www.wired.com/", extractor=process)  # a fresh worker carries on
        assert reason == "" and "OpenAI" in text
    finally:
        process.close()


def test_config_options_reach_the_worker(extractor):
    """Tables are kept by default (annotated main text often sits in them) and dropped on request."""
    cell = "The harvest festival begins at noon on the village green with music and food for everyone"
    page = (
        "<html><body><article><h1>Festival</h1>"
        + "<p>The village prepares for its autumn festival, as it has done every year since the war ended.</p>" * 3
        + f"<table><tr><td>{cell}</td><td>Saturday</td></tr></table></article></body></html>"
    ).encode()
    kept, _ = extractor(page, "https://x.org/", trafilatura_options(ExtractConfig()))
    dropped, _ = extractor(page, "https://x.org/", trafilatura_options(ExtractConfig(include_tables=False)))
    assert cell in kept and "autumn festival" in kept
    assert cell not in dropped and "autumn festival" in dropped
    assert f"\n\n{cell}\tSaturday" in paragraphs(kept)


def test_table_rows_become_tab_separated_cells():
    text = "A heading\n| Constituency | Member | Email |\n|---|---|---|\n| Aberconwy | Robin Millar |  |\n  Closing words. "
    assert paragraphs(text) == "A heading\n\nConstituency\tMember\tEmail\n\nAberconwy\tRobin Millar\n\nClosing words."


PROSE = (
    "The river rose slowly through the night, and by morning the lower fields were under water. "
    "Farmers moved their animals to the high pasture while the children watched from the old stone bridge. "
)


def test_quality_rules_each_with_its_reason():
    cfg = ExtractConfig()
    prose = PROSE * 6
    assert quality_reject(prose, cfg) is None
    assert quality_reject(PROSE, cfg) == "too_short"
    assert quality_reject(" ".join(["a"] * 150), cfg) == "quality_word_length"
    assert quality_reject(" ".join(["internationalisation"] * 150), cfg) == "quality_word_length"
    assert quality_reject(prose + " #tag" * 40, cfg) == "quality_symbol_ratio"
    teasers = "\n".join(f"Read the story of the river and the fields and the farmers number {i} ..." for i in range(20))
    assert quality_reject(teasers.replace("...", "\u2026"), cfg.model_copy(update={"max_symbol_word_ratio": 1.0})) == (
        "quality_ellipsis_lines"
    )
    assert quality_reject(prose + " 1234 5678" * 60, cfg) == "quality_alpha_words"
    assert quality_reject(" ".join(["1234"] * 150), cfg.model_copy(update={"min_alpha_word_fraction": 0.0})) is None
