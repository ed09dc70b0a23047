"""URL canonicalisation and blocklists, on real spellings from the 2005 Pushshift dumps."""

from __future__ import annotations

import json
import lzma

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corpusforge.corpora.urls import Blocklist, canonical_url, clean_url, is_tracking_param


@pytest.fixture(scope="module")
def dump_urls(shared_data) -> list[str]:
    urls = []
    for name in ("RS_v2_2005-06.xz", "RS_v2_2005-07.xz"):
        with lzma.open(shared_data / "reddit" / name, "rt", encoding="utf-8") as lines:
            urls += [json.loads(line)["url"] for line in lines]
    return urls


@pytest.mark.parametrize(
    "spellings",
    [  # pairs submitted separately in June/July 2005
        ("http://www.msnbc.msn.com/id/8445696/site/newsweek/", "http://www.msnbc.msn.com/id/8445696/site/newsweek"),
        ("http://sueandpaul.com/gmapPedometer/", "http://www.sueandpaul.com/gmapPedometer/"),
        ("http://www.motoring.co.za/index.php?fArticleId=2621784", "http://motoring.co.za/index.php?fArticleId=2621784"),
        ("http://db.uwaterloo.ca/~alopez-o/Coffee/caffaq.html#IsItTrueEsp", "http://db.uwaterloo.ca/~alopez-o/Coffee/caffaq.html"),
        ("http://www.wired.com/news/culture/0,1284,67982,00.html?tw=wn_tophead_4", "http://wired.com/news/culture/0,1284,67982,00.html"),
        (
            "http://www.nytimes.com/2005/06/24/technology/24zombie.html?ex=1277265600&amp;en=c003ced33d1adfcf&amp;ei=5090"
            "&amp;partner=rssuserland&amp;emc=rss",
            "https://nytimes.com/2005/06/24/technology/24zombie.html",
        ),
    ],
)
def test_real_spellings_share_one_key(spellings):
    keys = {canonical_url(url) for url in spellings}
    assert len(keys) == 1 and None not in keys


def test_dump_merges_only_true_variants(dump_urls):
    """Across all 1,182 real submissions, canonicalisation merges spellings but never distinct
    articles: ``?id=`` style content parameters stay in the key."""
    keys = {canonical_url(url) for url in dump_urls}
    assert None not in keys
    loosely = {url.lower().split("#")[0].rstrip("/").replace("://www.", "://") for url in dump_urls}
    assert len(keys) < len(set(dump_urls))
    assert len(keys) >= len(loosely) - 10  # tracker removal merges a few more, nothing wholesale
    assert canonical_url("http://www.newscientist.com/article.ns?id=dn7568") != canonical_url(
        "http://www.newscientist.com/article.ns?id=dn7569"
    )


def test_html_escaped_query_is_unescaped():
    cleaned = clean_url("http://today.reuters.com/x.aspx?type=internetNews&amp;storyid=2005-06-22T010114Z")
    assert cleaned is not None
    assert cleaned.fetch == "http://today.reuters.com/x.aspx?type=internetNews&storyid=2005-06-22T010114Z"
    assert clean_url("http://x.org/a?b=1&amp;amp;c=2").fetch == "http://x.org/a?b=1&c=2"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "submitted, fetched",
    [  # real dump spellings whose servers read the query as written: slashes, bare keys, escapes, empty values
        ("http://www.dnj.com/apps/pbcs.dll/article?AID=/20050702/NEWS01/507020302/1002", None),
        ("http://www.japantimes.co.jp/cgi-bin/getarticle.pl5?nn20050703a2.htm", None),
        (
            "http://www.nytimes.com/2005/07/01/business/01cnd-soft.html?hp&amp;ex=1120276800&amp;en=23acfbd830c2f31a"
            "&amp;ei=5094&amp;partner=homepage",
            "http://www.nytimes.com/2005/07/01/business/01cnd-soft.html?hp&ex=1120276800&en=23acfbd830c2f31a&ei=5094&partner=homepage",
        ),
        (
            "http://www.marketwatch.com/news/story.asp?guid=%7B088411CD-622C-4960-9AFB-98E99BEF1CB7%7D&amp;siteid=google&amp;dist=",
            "http://www.marketwatch.com/news/story.asp?guid=%7B088411CD-622C-4960-9AFB-98E99BEF1CB7%7D&siteid=google&dist=",
        ),
        ("http://www.wired.com/news/technology/0,1282,68015,00.html?twwn_2techhead?headline=When~Cockroaches~Sieze~Controls", None),
        (
            "https://www.xy.de/index.ssf?/base/news-3/1180.xml&amp;coll=1&thispage=23",
            "https://www.xy.de/index.ssf?/base/news-3/1180.xml&coll=1&thispage=23",
        ),
    ],
)
def test_fetched_spelling_is_the_submitted_one(submitted, fetched):
    """Only ``&amp;`` is undone; the key is canonical (sorted, escaped) but never what is fetched."""
    cleaned = clean_url(submitted)
    assert cleaned is not None
    assert cleaned.fetch == (fetched or submitted)
    assert canonical_url(cleaned.fetch) == cleaned.key


def test_a_spelling_that_cannot_be_fetched_is_a_bad_url():
    """Found by the fuzzer: courlan's scrub cut "www.<[/" to a valid URL, while the fetch spelling kept an unbalanced "["
    and every later use of it (the extension blocklist, the fetch) raised ValueError: the WebText job stopped."""
    assert clean_url("www.<[/") is None
    assert clean_url("http://example.com/a[b]") is not None  # brackets in the path are fine
    assert Blocklist().blocked_extension(clean_url("www.example.com/paper.pdf").fetch) == "pdf"  # type: ignore[union-attr]


def test_fetch_form_keeps_server_spelling():
    cleaned = clean_url(" HTTPS://WWW.Example.COM:443/a/b/../c/?utm_source=x&b=2&a=1#top ")
    assert cleaned is not None
    assert cleaned.fetch == "HTTPS://WWW.Example.COM:443/a/b/../c/?utm_source=x&b=2&a=1#top"
    assert cleaned.key == "http://example.com/a/c?a=1&b=2"
    assert cleaned.host == "www.example.com"
    assert clean_url("www.example.com/x").fetch == "http://www.example.com/x"  # type: ignore[union-attr]


def test_every_real_dump_url_is_fetched_as_submitted(dump_urls):
    for url in dump_urls:
        cleaned = clean_url(url)
        assert cleaned is not None and cleaned.fetch == url.strip().replace("&amp;", "&")


@pytest.mark.parametrize("bad", ["", "not a url", "ftp://example.com/file", "http://", "javascript:alert(1)", "mailto:a@b.c"])
def test_bad_urls_are_none(bad):
    assert clean_url(bad) is None


def test_non_default_port_and_idn_host():
    assert clean_url("http://example.com:8080/x").key == "http://example.com:8080/x"  # type: ignore[union-attr]
    assert clean_url("http://bücher.de/").host == "xn--bcher-kva.de"  # type: ignore[union-attr]


def test_escapes_of_unreserved_characters_are_decoded_but_slashes_kept():
    assert canonical_url("http://x.org/%7Euser/a%2fb") == "http://x.org/~user/a%2Fb"


segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=8)
params = st.lists(st.tuples(segment.filter(lambda k: not is_tracking_param(k)), segment), max_size=4, unique_by=lambda p: p[0])


@given(
    host=st.lists(segment, min_size=1, max_size=3),
    path=st.lists(segment, max_size=4),
    query=params,
    tracker=st.sampled_from(["utm_source", "utm_campaign", "fbclid", "gclid", "mc_eid"]),
    fragment=segment,
    www=st.booleans(),
    https=st.booleans(),
    slash=st.booleans(),
)
def test_spelling_variants_share_key(host, path, query, tracker, fragment, www, https, slash):
    base = f"http://{'.'.join(host)}.com/{'/'.join(path)}"
    plain = base + ("?" + "&".join(f"{k}={v}" for k, v in query) if query else "")
    variant_query = list(reversed(query)) + [(tracker, "abc")]
    variant = (
        ("https://" if https else "http://")
        + ("WWW." if www else "")
        + ".".join(host).upper()
        + ".com/"
        + "/".join(path)
        + ("/" if slash and path else "")
        + "?"
        + "&".join(f"{k}={v}" for k, v in variant_query)
        + "#"
        + fragment
    )
    assert canonical_url(variant) == canonical_url(plain)


@given(st.text(max_size=60))
def test_canonicalisation_never_raises_and_is_idempotent(raw):
    cleaned = clean_url("http://example.com/" + raw)
    if cleaned is not None:
        again = clean_url(cleaned.fetch)
        assert again is not None and again.fetch == cleaned.fetch and again.key == cleaned.key


def test_domain_blocklist_matches_parents_not_lookalikes():
    blocklist = Blocklist()
    assert blocklist.blocked_domain("en.m.wikipedia.org") == "wikipedia.org"
    assert blocklist.blocked_domain("i.imgur.com") == "imgur.com"
    assert blocklist.blocked_domain("www.reddit.com") == "reddit.com"
    assert blocklist.blocked_domain("youtu.be") == "youtu.be"
    assert blocklist.blocked_domain("gfycat.com") == "gfycat.com"
    assert blocklist.blocked_domain("www.redgifs.com") == blocklist.blocked_domain("i.redgifs.com") == "redgifs.com"
    assert blocklist.blocked_domain("www.pornhub.com") == "pornhub.com"
    assert blocklist.blocked_domain("notwikipedia.org") is None
    assert blocklist.blocked_domain("news.bbc.co.uk") is None


def test_extension_blocklist_and_extras():
    blocklist = Blocklist(extra_domains=["example.org"], extra_extensions=[".txt"])
    assert blocklist.blocked_extension("http://x.com/photo.JPG") == "jpg"
    assert blocklist.blocked_extension("http://x.com/paper.pdf?download=1") == "pdf"
    assert blocklist.blocked_extension("http://x.com/story.html") is None
    assert blocklist.blocked_extension("http://x.com/v1.2/") is None  # directory, not a file
    assert blocklist.blocked_extension("http://x.com/notes.txt") == "txt"
    assert blocklist.blocked_domain("a.example.org") == "example.org"
    assert Blocklist().blocked_extension("http://x.com/notes.txt") is None


def test_real_dump_blocks(dump_urls):
    blocklist = Blocklist()
    blocked = {u: blocklist.blocked_extension(clean_url(u).fetch) for u in dump_urls}  # type: ignore[union-attr]
    blocked = {u: ext for u, ext in blocked.items() if ext}
    assert {"jpg", "pdf"} <= set(blocked.values())
    assert all(u.split("?")[0].lower().endswith("." + ext) for u, ext in blocked.items())
    assert len(blocked) < 30  # news articles (.html, .stm, .php, .asp ...) pass


def test_query_parameters_named_like_legacy_entities_are_kept():
    """``html.unescape`` read ``&gt=0`` as ``>=0`` (then cut there) and ``&notify`` as ``¬ify``; only complete
    references (``&amp;``, ``&#39;``) are the dump's escaping."""
    assert canonical_url("http://a.com/?0=0&gt=0") == "http://a.com?0=0&gt=0"
    assert canonical_url("http://a.com/x?q=1&notify=2&sect=3") == "http://a.com/x?notify=2&q=1&sect=3"
    assert canonical_url("http://a.com/x?q=1&amp;notify=2&amp;sect=3") == "http://a.com/x?notify=2&q=1&sect=3"
    assert canonical_url("http://a.com/x?q=a&#39;s") == "http://a.com/x?q=a%27s"
