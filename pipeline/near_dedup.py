"""Near-duplicate removal at Beam scale: MinHash LSH, verified candidate pairs, distributed
connected components, one deterministic representative per cluster; and Wikipedia removal.

Stages (each a shuffle, none a single-task step over the whole corpus):

1. the band keys each ``DocRef`` carries (computed when the document was spilled); GroupByKey(band
   key) -> candidate pairs;
2. optional exact Jaccard verification: the pair is joined (CoGroupByKey by id) with both references
   and the two texts are read back from the spill files;
3. connected components by min-label propagation with pointer jumping, unrolled for
   ``max_component_rounds`` rounds (a path of n nodes converges in about log2(n) rounds); edges whose
   endpoints still disagree are counted and resolved exactly by union-find over the residual *label*
   graph, which is empty once converged and tiny otherwise;
4. per component the representative is the longest text, then the smallest id; every other member
   becomes ``Reject(reason="near_duplicate", detail=<representative id>)``.

Only references (``pipeline.document_spill.DocRef``), ids and shingle sets of candidates travel.

Every choice depends on document ids and texts only, so output is identical whatever the runner,
bundle order or worker count.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from itertools import combinations
from urllib.parse import urlsplit

import apache_beam as beam
import numpy as np

from corpusforge.core.config import NearDedupConfig
from corpusforge.corpora.document import Reject
from corpusforge.corpora.minhash import jaccard, s_curve_table, shingle_set
from corpusforge.pipeline.document_spill import DocRef, banding, load_texts
from corpusforge.pipeline.file_shuffle import FileCoGroupByKey, FileGroupByKey

log = logging.getLogger(__name__)

REJECTS = "rejects"
KEPT = "kept"
# A band bucket larger than this is linked as a star (+ a sorted chain) instead of all pairs: huge
# buckets are boilerplate clones, and k^2 verified pairs would dominate the stage for no new edges.
MAX_BUCKET_ALL_PAIRS = 64
DOC, WEB, WIKI = "d", "w", "k"  # band member tags


def _band_keys(ref: DocRef, tag: str) -> Iterator[tuple[bytes, str]]:
    """(band key, tag + id) for every LSH band of a document (tags are one character)."""
    for key in ref.band_keys():
        yield key, tag + ref.id


def _location(ref: DocRef) -> tuple[str, tuple[str, int]]:
    """(id, (spill file, row)): what verifying a pair needs of a document, not the whole reference."""
    return ref.id, (ref.spill, ref.row)


def _bucket_pairs(item: tuple[bytes, Iterable[str]]) -> Iterator[tuple[str, str]]:
    """Candidate pairs (smaller id first) among the documents sharing one band."""
    ids = sorted({member[1:] for member in item[1]})
    if len(ids) <= MAX_BUCKET_ALL_PAIRS:
        yield from combinations(ids, 2)
        return
    yield from ((ids[0], other) for other in ids[1:])
    yield from zip(ids[1:], ids[2:])


def _cross_pairs(item: tuple[bytes, Iterable[str]]) -> Iterator[tuple[str, str]]:
    """(webtext id, wikipedia id) pairs sharing one band."""
    members = set(item[1])
    web = sorted(m[1:] for m in members if m[0] == WEB)
    wiki = sorted(m[1:] for m in members if m[0] == WIKI)
    yield from ((w, k) for w in web for k in wiki)


Location = tuple[str, str, int]  # (id, spill file, row) of a document


class VerifyPairs(beam.PTransform):
    """Keep candidate pairs (left id, right id) whose exact shingle Jaccard reaches the threshold.

    ``left`` and ``right`` are keyed ``(id, (spill file, row))``. The left location is joined to the
    pair (CoGroupByKey by id) and sent to the right id, where both texts are read back from the spill
    files, a batch of comparisons at a time: only locations travel.
    """

    def __init__(self, cfg: NearDedupConfig, left: beam.PCollection, right: beam.PCollection, shuffle_dir: str | None = None) -> None:
        super().__init__()
        self.cfg, self.left, self.right, self.shuffle_dir = cfg, left, right, shuffle_dir

    def expand(self, pairs: beam.PCollection) -> beam.PCollection:
        ngram, threshold = self.cfg.ngram, self.cfg.threshold

        def send_left(item: tuple[str, dict[str, list]]) -> Iterator[tuple[str, Location]]:
            left_id, group = item
            for spill, row in group["ref"]:
                for right_id in group["pair"]:
                    yield right_id, (left_id, spill, row)

        def with_right(item: tuple[str, dict[str, list]]) -> Iterator[tuple[Location, Location]]:
            right_id, group = item
            for spill, row in group["ref"]:
                for left in group["left"]:
                    yield left, (right_id, spill, row)

        def compare(batch: list[tuple[Location, Location]]) -> Iterator[tuple[str, str]]:
            texts = load_texts([location for pair in batch for location in pair])
            shingles: dict[str, np.ndarray] = {}
            for left, right in batch:
                for doc_id, _, _ in (left, right):
                    if doc_id not in shingles:
                        shingles[doc_id] = shingle_set(texts[doc_id], ngram)
                if jaccard(shingles[left[0]], shingles[right[0]]) >= threshold:
                    yield left[0], right[0]

        halves = (
            {"pair": pairs, "ref": self.left} | "JoinLeft" >> FileCoGroupByKey(self.shuffle_dir) | "SendLeft" >> beam.FlatMap(send_left)
        )
        return (
            {"left": halves, "ref": self.right}
            | "JoinRight" >> FileCoGroupByKey(self.shuffle_dir)
            | "WithRight" >> beam.FlatMap(with_right)
            | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=256)
            | "Compare" >> beam.FlatMap(compare)
        )


def _union_find(edges: list[tuple[str, str]]) -> dict[str, str]:
    """Smallest member of each component of a (small) residual graph, for each node."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {x: find(x) for x in parent}


class ConnectedComponents(beam.PTransform):
    """Edges (a, b) -> (node, smallest node id of its component), distributed over the runner."""

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.rounds = rounds

    def expand(self, edges: beam.PCollection) -> beam.PCollection:
        both_ways = edges | "BothWays" >> beam.FlatMap(lambda e: [(e[0], e[1]), (e[1], e[0])])
        adjacency = both_ways | "Adjacency" >> beam.GroupByKey()
        labels = adjacency | "Init" >> beam.Map(lambda item: (item[0], min(item[0], *item[1])))
        for r in range(self.rounds):
            labels = labels | f"Round{r}" >> _PropagateAndJump(adjacency)

        def label_edge(item: tuple[str, dict[str, list]]) -> Iterator[tuple[str, tuple[str, str]]]:
            node, group = item
            for label in group["label"]:
                for other in group["edge"]:
                    yield other, (node, label)

        def residual(item: tuple[str, dict[str, list]]) -> Iterator[tuple[str, str]]:
            _, group = item
            for label in group["label"]:
                for _, other_label in group["edge"]:
                    if other_label != label:
                        yield min(label, other_label), max(label, other_label)

        leftover = (
            {
                "label": labels,
                "edge": {"label": labels, "edge": both_ways} | "JoinEdge" >> beam.CoGroupByKey() | "LabelEdge" >> beam.FlatMap(label_edge),
            }
            | "JoinOther" >> beam.CoGroupByKey()
            | "Residual" >> beam.FlatMap(residual)
            | "DistinctResidual" >> beam.Distinct()
        )
        # The residual graph is gathered under one key and resolved there; its roots are joined back by
        # label (a join, not a side input: the DaskRunner recomputes side inputs inside every task).
        roots = (
            leftover
            | "OneKey" >> beam.Map(lambda edge: (0, edge))
            | "AllResidual" >> beam.GroupByKey()
            | "UnionFind" >> beam.FlatMap(lambda item: _union_find(list(item[1])).items())
        )
        by_label = labels | "ByLabel" >> beam.Map(lambda nl: (nl[1], nl[0]))
        return (
            {"node": by_label, "root": roots}
            | "JoinRoots" >> beam.CoGroupByKey()
            | "Resolve" >> beam.FlatMap(lambda item: [(node, min(item[1]["root"], default=item[0])) for node in item[1]["node"]])
        )


class _PropagateAndJump(beam.PTransform):
    """One round: each node takes the minimum label among itself and its neighbours, then the label
    of its label (pointer jumping), which doubles how far a label travels per round."""

    def __init__(self, adjacency: beam.PCollection) -> None:
        super().__init__()
        self.adjacency = adjacency

    def expand(self, labels: beam.PCollection) -> beam.PCollection:
        def spread(item: tuple[str, dict[str, list]]) -> Iterator[tuple[str, str]]:
            node, group = item
            for label in group["label"]:
                yield node, label
                for neighbours in group["adj"]:
                    for other in neighbours:
                        yield other, label

        propagated = (
            {"label": labels, "adj": self.adjacency}
            | "Join" >> beam.CoGroupByKey()
            | "Spread" >> beam.FlatMap(spread)
            | "Min" >> beam.CombinePerKey(min)
        )
        members = propagated | "ByLabel" >> beam.Map(lambda nl: (nl[1], nl[0]))
        return {"member": members, "own": propagated} | "JoinLabel" >> beam.CoGroupByKey() | "Jump" >> beam.FlatMap(_jump)


def _jump(item: tuple[str, dict[str, list]]) -> Iterator[tuple[str, str]]:
    """Members labelled L take L's own label when it is smaller (it is connected to L, so to it)."""
    label, group = item
    own = min(group["own"], default=label)
    for node in group["member"]:
        yield node, min(label, own)


def _representatives(item: tuple[str, Iterable[tuple[str, int]]]) -> Iterator[tuple[str, str]]:
    """(duplicate id, representative id) for a component: keep the longest text, then the smallest id."""
    members = sorted(item[1], key=lambda m: (-m[1], m[0]))
    keep = members[0][0]
    for doc_id, _ in members[1:]:
        yield doc_id, keep


def _keep_or_reject(item: tuple[str, dict[str, list]]) -> Iterator[object]:
    """Each reference is kept, or rejected with the reason and id found for it: nothing is lost."""
    _, group = item
    for ref in group["ref"]:
        if group["reject"]:
            reason, detail = min(group["reject"])
            yield beam.pvalue.TaggedOutput(REJECTS, Reject(ref.id, ref.source, reason, detail, ref.key))
        else:
            yield ref


def _split(refs: beam.PCollection, rejects: beam.PCollection, shuffle_dir: str | None) -> beam.pvalue.DoOutputsTuple:
    keyed = refs | "KeyRefs" >> beam.Map(lambda r: (r.id, r))
    return (
        {"ref": keyed, "reject": rejects}
        | "JoinRejects" >> FileCoGroupByKey(shuffle_dir)
        | "Split" >> beam.FlatMap(_keep_or_reject).with_outputs(REJECTS, main=KEPT)
    )


class NearDedup(beam.PTransform):
    """PCollection[DocRef] -> tagged outputs ``kept`` (DocRef) and ``rejects`` (near_duplicate).

    With ``shuffle_dir`` the shuffles that carry an element per document go through files there
    (``pipeline.file_shuffle``); the others carry candidate pairs only.
    """

    def __init__(self, cfg: NearDedupConfig | None = None, shuffle_dir: str | None = None) -> None:
        super().__init__()
        self.cfg, self.shuffle_dir = cfg or NearDedupConfig(), shuffle_dir

    def expand(self, docs: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        cfg = self.cfg
        bands, rows = banding(cfg)
        log.info("near_dedup: threshold %.2f, num_perm %d\n%s", cfg.threshold, cfg.num_perm, s_curve_table(bands, rows))
        pairs = (
            docs
            | "BandKeys" >> beam.FlatMap(_band_keys, DOC)
            | "ByBand" >> FileGroupByKey(self.shuffle_dir)
            | "BucketPairs" >> beam.FlatMap(_bucket_pairs)
            | "DistinctPairs" >> beam.Distinct()
        )
        if cfg.verify:
            by_id = docs | "ById" >> beam.Map(_location)
            pairs = pairs | "Verify" >> VerifyPairs(cfg, by_id, by_id, self.shuffle_dir)
        labels = pairs | "Components" >> ConnectedComponents(cfg.max_component_rounds)
        lengths = docs | "Lengths" >> beam.Map(lambda r: (r.id, r.chars))
        duplicates = (
            {"label": labels, "length": lengths}
            | "JoinLengths" >> FileCoGroupByKey(self.shuffle_dir)
            | "ByComponent" >> beam.FlatMap(lambda it: [(lab, (it[0], n)) for lab in it[1]["label"] for n in it[1]["length"]])
            | "GroupComponent" >> beam.GroupByKey()
            | "Representative" >> beam.FlatMap(_representatives)
            | "AsReject" >> beam.Map(lambda dr: (dr[0], ("near_duplicate", dr[1])))
        )
        return _split(docs, duplicates, self.shuffle_dir)


def on_wikipedia(url: str, domains: Iterable[str]) -> bool:
    """True when the URL's host is one of ``domains`` or a subdomain of one (en.m.wikipedia.org)."""
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    return any(host == d or host.endswith("." + d) for d in domains)


class WikipediaRemoval(beam.PTransform):
    """WebText minus pages on Wikipedia or a mirror (``wikipedia_url``) and pages that are near-duplicates
    of a Wikipedia article (``wikipedia_near_duplicate``, detail = the article's id), as GPT-2 did to keep
    the common evaluation sets out of its training text."""

    def __init__(self, wikipedia_docs: beam.PCollection, cfg: NearDedupConfig | None = None, shuffle_dir: str | None = None) -> None:
        super().__init__()
        self.wikipedia_docs, self.cfg, self.shuffle_dir = wikipedia_docs, cfg or NearDedupConfig(), shuffle_dir

    def expand(self, web: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        cfg, wiki = self.cfg, self.wikipedia_docs
        domains = tuple(cfg.wikipedia_domains)
        url_rejects = (
            web
            | "OnWikipedia" >> beam.Filter(lambda d: on_wikipedia(d.url, domains))
            | "UrlReject" >> beam.Map(lambda d: (d.id, ("wikipedia_url", urlsplit(d.url).hostname or "")))
        )
        elsewhere = web | "NotOnWikipedia" >> beam.Filter(lambda d: not on_wikipedia(d.url, domains))
        pairs = (
            (
                elsewhere | "WebBands" >> beam.FlatMap(_band_keys, WEB),
                wiki | "WikiBands" >> beam.FlatMap(_band_keys, WIKI),
            )
            | "AllBands" >> beam.Flatten()
            | "ByBand" >> FileGroupByKey(self.shuffle_dir)
            | "CrossPairs" >> beam.FlatMap(_cross_pairs)
            | "DistinctPairs" >> beam.Distinct()
        )
        if cfg.verify:
            web_refs = elsewhere | "WebById" >> beam.Map(_location)
            wiki_refs = wiki | "WikiById" >> beam.Map(_location)
            pairs = pairs | "Verify" >> VerifyPairs(cfg, web_refs, wiki_refs, self.shuffle_dir)
        near_rejects = pairs | "NearReject" >> beam.Map(lambda p: (p[0], ("wikipedia_near_duplicate", p[1])))
        rejects = (url_rejects, near_rejects) | "AllRejects" >> beam.Flatten()
        return _split(web, rejects, self.shuffle_dir)


def wikipedia_removal(
    webtext_docs: beam.PCollection, wikipedia_docs: beam.PCollection, cfg: NearDedupConfig | None = None
) -> beam.pvalue.DoOutputsTuple:
    """``webtext_refs | WikipediaRemoval(wikipedia_refs, cfg)``: tagged outputs ``kept`` and ``rejects``."""
    return webtext_docs | "WikipediaRemoval" >> WikipediaRemoval(wikipedia_docs, cfg)
