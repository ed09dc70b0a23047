"""NearDedup and WikipediaRemoval as real Beam pipelines on near-duplicates built from real book text."""

from __future__ import annotations

import uuid
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from hypothesis import given
from hypothesis import strategies as st

from corpusforge.core.config import NearDedupConfig
from corpusforge.corpora.document import Document, make_id
from corpusforge.pipeline.near_dedup import NearDedup, on_wikipedia, wikipedia_removal
from corpusforge.pipeline.options import LOCAL_RUNNER
from corpusforge.pipeline.steps import SpillDocuments


@pytest.fixture(scope="module")
def words(shared_data) -> list[str]:
    return (shared_data / "books" / "en" / "1155-0.txt").read_text(encoding="utf-8").split()


@pytest.fixture(scope="module")
def other_words(shared_data) -> list[str]:
    return (shared_data / "books" / "en" / "43-0.txt").read_text(encoding="utf-8").split()


def doc(key: str, text: str, url: str = "") -> Document:
    return Document(make_id("webtext", key), "webtext", key, text, url)


@pytest.fixture(scope="module")
def corpus(words, other_words) -> dict[str, Document]:
    """A chain A~B~C~D~E (each a 500-word window shifted by 25 words: neighbours share ~90% of their
    5-grams, A and E only ~65%), C a little longer so it must be the representative; an exact pair;
    a pair at Jaccard ~0.6 (a candidate at most, never a duplicate); and unrelated documents."""
    docs = {}
    for i, name in enumerate("ABCDE"):
        text = " ".join(words[i * 25 : i * 25 + 500])
        docs[name] = doc(name, text + (" a closing line of twelve more words makes this the longest one" if name == "C" else ""))
    twin = " ".join(words[3000:3400])
    docs["X1"], docs["X2"] = doc("X1", twin), doc("X2", twin)
    docs["H1"] = doc("H1", " ".join(words[5000:5400]))
    docs["H2"] = doc("H2", " ".join(words[5100:5500]))  # shares 300 of 400 words: Jaccard ~0.6
    for i in range(4):
        docs[f"U{i}"] = doc(f"U{i}", " ".join(other_words[2000 + i * 600 : 2000 + i * 600 + 450]))
    return docs


def options(mode: str = "in_memory") -> PipelineOptions:
    flags = {"direct_num_workers": 2} if mode == "multi_processing" else {}
    return PipelineOptions([], runner=LOCAL_RUNNER, direct_running_mode=mode, **flags)


def write_sorted(pcoll: beam.PCollection, path: Path) -> None:
    """Results come back through a file: DoFns are pickled, even in memory, so no list can collect them."""
    (
        pcoll
        | "All" >> beam.combiners.ToList()
        | "Join" >> beam.Map(lambda rows: "\n".join(sorted(rows)))
        | "Write" >> beam.io.WriteToText(str(path), shard_name_template="")
    )


# 32 bands x 4 rows make the Jaccard-0.6 pair H1/H2 a candidate (P = 0.99): only verification separates it.
LOOSE_BANDS = NearDedupConfig(bands=32, rows=4, max_component_rounds=2)


def run_near_dedup(
    docs: list[Document], cfg: NearDedupConfig, tmp: Path, mode: str = "in_memory", shuffle: bool = False
) -> list[tuple[str, ...]]:
    """Sorted rows ("kept", id) and (reason, id, detail) of a NearDedup run (``shuffle``: through bucket files)."""
    path = tmp / f"out-{mode}-{uuid.uuid4().hex}.txt"
    shuffle_dir = str(tmp / f"shuffle-{uuid.uuid4().hex}") if shuffle else None
    with beam.Pipeline(options=options(mode)) as p:
        out = p | beam.Create(docs) | SpillDocuments(str(tmp / f"spill-{uuid.uuid4().hex}"), cfg) | NearDedup(cfg, shuffle_dir)
        rows = (
            out.kept | "K" >> beam.Map(lambda d: f"kept\t{d.id}"),
            out.rejects | "R" >> beam.Map(lambda r: f"{r.reason}\t{r.id}\t{r.detail}"),
        ) | beam.Flatten()
        write_sorted(rows, path)
    return [tuple(line.split("\t")) for line in path.read_text().splitlines()]


def split(rows: list[tuple[str, ...]]) -> tuple[list[str], dict[str, tuple[str, str]]]:
    kept = [r[1] for r in rows if r[0] == "kept"]
    return kept, {r[1]: (r[0], r[2]) for r in rows if r[0] != "kept"}


@pytest.fixture(scope="module")
def in_memory_rows(corpus, tmp_path_factory) -> list[tuple[str, ...]]:
    return run_near_dedup(list(corpus.values()), LOOSE_BANDS, tmp_path_factory.mktemp("nd"))


def test_chain_cluster_exact_pair_and_negatives(corpus, in_memory_rows):
    kept, rejects = split(in_memory_rows)
    assert len(kept) + len(rejects) == len(corpus)  # every document accounted for
    c = corpus["C"].id
    for name in "ABDE":  # A and E are far apart; only the chain connects them to C
        assert rejects[corpus[name].id] == ("near_duplicate", c)
    assert c in kept
    x1, x2 = sorted([corpus["X1"].id, corpus["X2"].id])  # equal length: the smaller id represents
    assert x1 in kept and rejects[x2] == ("near_duplicate", x1)
    for name in ["H1", "H2", "U0", "U1", "U2", "U3"]:
        assert corpus[name].id in kept


def test_unconverged_components_fall_back_to_exact(corpus, in_memory_rows, tmp_path):
    """With no propagation round at all, the exact pass over the residual label graph gives the same clusters."""
    cfg = LOOSE_BANDS.model_copy(update={"max_component_rounds": 0})
    assert run_near_dedup(list(corpus.values()), cfg, tmp_path) == in_memory_rows


def test_same_output_in_memory_and_multi_processing(corpus, in_memory_rows, tmp_path):
    assert run_near_dedup(list(corpus.values()), LOOSE_BANDS, tmp_path, mode="multi_processing") == in_memory_rows


def test_same_output_through_file_shuffles(corpus, in_memory_rows, tmp_path):
    """Every shuffle through bucket files (as the documents job runs it on the local runners), in both modes."""
    assert run_near_dedup(list(corpus.values()), LOOSE_BANDS, tmp_path, shuffle=True) == in_memory_rows
    assert run_near_dedup(list(corpus.values()), LOOSE_BANDS, tmp_path, mode="multi_processing", shuffle=True) == in_memory_rows


def test_without_verification_the_candidate_is_a_duplicate(corpus, tmp_path):
    """The same banding without verification links H1/H2, which the verified run keeps apart."""
    cfg = LOOSE_BANDS.model_copy(update={"verify": False, "max_component_rounds": 1})
    kept, rejects = split(run_near_dedup([corpus["H1"], corpus["H2"]], cfg, tmp_path))
    assert len(kept) == 1 and list(rejects.values()) == [("near_duplicate", kept[0])]


def test_on_wikipedia_hosts():
    domains = NearDedupConfig().wikipedia_domains
    assert on_wikipedia("https://en.m.wikipedia.org/wiki/Lyon", domains)
    assert on_wikipedia("http://www.wikiwand.com/en/Lyon", domains)
    assert not on_wikipedia("https://notwikipedia.org/x", domains)
    assert not on_wikipedia("https://example.com/wikipedia.org", domains)


def test_wikipedia_removal_both_reasons(words, other_words, tmp_path):
    article = " ".join(other_words[5000:5600])
    wiki = [
        Document(make_id("wikipedia", "Article"), "wikipedia", "Article", article, "https://en.wikipedia.org/wiki/Article"),
        Document(make_id("wikipedia", "Other"), "wikipedia", "Other", " ".join(words[9000:9500])),
    ]
    header = "Home | News | About us | Contact | Subscribe to our newsletter today"
    web = [
        doc("on-wiki", " ".join(words[100:400]), "https://en.wikipedia.org/wiki/Something"),
        doc("mirror", " ".join(words[500:800]), "https://www.wikiwand.com/en/Something"),
        doc("copy", f"{header}\n\n{article}\n\nCopyright 2019 all rights reserved", "https://blog.example.com/post"),
        doc("own", " ".join(words[20000:20400]), "https://example.org/essay"),
    ]
    path = tmp_path / "wiki.txt"
    with beam.Pipeline(options=options()) as p:
        cfg = NearDedupConfig()
        spill = str(tmp_path / "spill")
        out = wikipedia_removal(
            p | "Web" >> beam.Create(web) | "SpillWeb" >> SpillDocuments(spill, cfg),
            p | "Wiki" >> beam.Create(wiki) | "SpillWiki" >> SpillDocuments(spill, cfg),
            cfg,
        )
        titles = {d.id: d.title for d in web}
        rows = (
            out.kept | "K" >> beam.Map(lambda d: f"kept\t{titles[d.id]}"),
            out.rejects | "R" >> beam.Map(lambda r: f"{r.reason}\t{r.key}\t{r.detail}"),
        ) | beam.Flatten()
        write_sorted(rows, path)
    assert path.read_text().splitlines() == [
        "kept\town",
        f"wikipedia_near_duplicate\thttps://blog.example.com/post\t{wiki[0].id}",
        "wikipedia_url\thttps://en.wikipedia.org/wiki/Something\ten.wikipedia.org",
        "wikipedia_url\thttps://www.wikiwand.com/en/Something\twww.wikiwand.com",
    ]


# Keys that share leading bytes without being equal, and equal keys.
BAND_KEYS = [bytes([i % 2, 0, i % 3, i, 0, 0, 0, 0, 0, 0]) for i in range(8)]


@given(st.lists(st.tuples(st.sampled_from(BAND_KEYS), st.sampled_from(["a", "b", "c", "d", "e"])), max_size=60))
def test_band_members_give_the_pairs_of_each_band_key(members) -> None:
    """Tagged band members grouped by band key give exactly the id pairs of each key (buckets of two or more)."""
    from collections import defaultdict
    from itertools import combinations

    from corpusforge.pipeline.near_dedup import DOC, _bucket_members, _candidate_pairs

    buckets: defaultdict[bytes, list[str]] = defaultdict(list)
    by_key: defaultdict[bytes, set[str]] = defaultdict(set)
    for key, doc_id in members:
        buckets[key].append(DOC + doc_id)
        by_key[key].add(doc_id)
    expected = sorted(pair for ids in by_key.values() for pair in combinations(sorted(ids), 2))
    pairs = [pair for item in buckets.items() for ids, _ in _bucket_members(item) for pair in _candidate_pairs(ids)]
    assert sorted(pairs) == expected


def components(edges: list[tuple[str, str]]) -> set[frozenset[str]]:
    """The connected components of an edge list, as sets of nodes."""
    from corpusforge.pipeline.near_dedup import _union_find

    groups: dict[str, set[str]] = {}
    for node, root in _union_find(edges).items():
        groups.setdefault(root, set()).add(node)
    return {frozenset(g) for g in groups.values()}


@given(
    st.lists(st.frozensets(st.integers(0, 5), max_size=4), min_size=2, max_size=12),
    st.lists(st.lists(st.integers(0, 11), min_size=2, max_size=8), max_size=10),
    st.integers(1, 6),
)
def test_checking_buckets_with_a_forest_keeps_the_components(shingles, buckets, forest_nodes) -> None:
    """Skipping pairs already connected, and flushing the forest every few nodes, leaves the components of
    all verified candidate pairs unchanged (threshold 0.5 on tiny shingle sets: many pairs fail)."""
    from unittest import mock

    import numpy as np

    from corpusforge.corpora.minhash import jaccard
    from corpusforge.pipeline import near_dedup
    from corpusforge.pipeline.near_dedup import _candidate_pairs, _VerifyBuckets

    ids = [f"id{i:02d}" for i in range(len(shingles))]
    sets = {doc_id: np.array(sorted(s), dtype=np.uint64) for doc_id, s in zip(ids, shingles)}
    members = [tuple(sorted({ids[i % len(ids)] for i in bucket})) for bucket in buckets]
    members = [m for m in members if len(m) > 1]
    expected = [pair for m in members for pair in _candidate_pairs(m) if jaccard(sets[pair[0]], sets[pair[1]]) >= 0.5]
    check, edges = _VerifyBuckets(0.5), []
    with mock.patch.object(near_dedup, "FOREST_NODES", forest_nodes):
        check.start_bundle()
        for m in members:
            edges.extend(check.process((b"", [(doc_id, sets[doc_id].tobytes()) for doc_id in m])))
        edges.extend(value.value for value in check.finish_bundle())
    assert components(edges) == components(expected)


def _graphs() -> list[tuple[str, str]]:
    """Edges of components that settle in the first round (stars, pairs), in later ones (two stars sharing a member,
    short chains) or never within a few rounds (a 40-node path numbered out of order), and random ones (seeded)."""
    import random

    rng = random.Random(7)
    edges = [("s00", f"s{i:02d}") for i in range(1, 9)] + [("p0", "p1"), ("q1", "q0")]
    edges += [("t0", "t5"), ("t0", "t6"), ("t1", "t6"), ("t1", "t7"), ("t2", "t7")]  # stars t0 and t1, t2 joined by members
    order = list(range(40))
    rng.shuffle(order)
    edges += [(f"c{a:02d}", f"c{b:02d}") for a, b in zip(order, order[1:])]
    nodes = [f"r{i:02d}" for i in range(60)]
    edges += [tuple(rng.sample(nodes, 2)) for _ in range(45)]
    return edges


@pytest.mark.parametrize("rounds", [0, 1, 2, 4])
def test_connected_components_are_exact_whatever_the_rounds(rounds, tmp_path):
    """Every node labelled with the smallest node of its component, whether its component settled in a round
    (the jump's check that a label's group is whole) or was left to the residual union-find, through files or not."""
    from apache_beam.testing.util import assert_that, equal_to

    from corpusforge.pipeline.near_dedup import ConnectedComponents, _union_find

    edges = _graphs()
    expected = sorted(_union_find(edges).items())
    assert len({root for _, root in expected}) > 5 and {root for node, root in expected if node[0] == "c"} == {"c00"}
    for shuffle in (None, str(tmp_path / "shuffle")):
        with beam.Pipeline(options=options()) as p:
            assert_that(p | beam.Create(edges) | ConnectedComponents(rounds, shuffle) | beam.Flatten(), equal_to(expected))


def test_a_label_group_settles_only_when_whole():
    """The jump settles a group only when its label is its own and no member has a neighbour outside it."""
    from corpusforge.pipeline.near_dedup import OTHER, OWN, SETTLED, _jump

    whole = ("a", [(OWN, "a"), (OTHER, "a", ("b",)), (OTHER, "b", ("a", "c")), (OTHER, "c", ("b",))])
    out = list(_jump(whole))
    assert all(o.tag == SETTLED for o in out) and sorted(o.value for o in out) == [("a", "a"), ("b", "a"), ("c", "a")]
    open_group = ("a", [(OWN, "a"), (OTHER, "a", ("b",)), (OTHER, "b", ("a", "d"))])  # d is labelled otherwise
    assert list(_jump(open_group)) == [("a", ("a", ("b",))), ("b", ("a", ("a", "d")))]
    relabelled = ("b", [(OWN, "a"), (OTHER, "b", ("c",)), (OTHER, "c", ("b",))])  # b itself now has the label a
    assert list(_jump(relabelled)) == [("b", ("a", ("c",))), ("c", ("a", ("b",)))]
