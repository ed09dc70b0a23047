"""Near-duplicate removal at Beam scale: MinHash LSH, verified candidate pairs, distributed
connected components, one deterministic representative per cluster; and Wikipedia removal.

Stages (each a shuffle, none a single-task step over the whole corpus):

1. the band keys each ``DocRef`` carries (computed when the document was spilled); GroupByKey(band
   key) -> buckets of two or more documents, made distinct (a tight cluster fills the same bucket in
   many bands);
2. optional exact Jaccard verification, per bucket: each member's location joins the buckets it is in,
   each spill file is read once for the documents any bucket needs, and their shingle sets go to the
   buckets; a worker checks a bucket's candidate pairs skipping those its union-find already connects,
   and sends on the forest it made. So a cluster of k near-duplicates costs about k checks and k edges,
   not the k^2 pairs of its buckets (two thirds of 400 B pages near-duplicate: tens of millions of pairs
   at a few hundred MB), and the components are those of all verified pairs;
3. connected components by min-label propagation with pointer jumping, each node carrying its
   neighbours, unrolled for ``max_component_rounds`` rounds (a path of n nodes converges in about
   log2(n) rounds; the verified forests arrive as stars); a component whose nodes all carry its
   smallest id leaves the rounds as soon as a jump sees it whole (on 400 B pages the unrolled rounds
   had carried every node again long after its component had settled); edges whose
   endpoints still disagree are resolved exactly by union-find over the residual *label* graph,
   which is empty once converged and tiny otherwise;
4. per component the representative is the longest text, then the smallest id; every other member
   becomes ``Reject(reason="near_duplicate", detail=<representative id>)``.

Only references (``pipeline.document_spill.DocRef``), ids and shingle sets of candidates travel; with a
shuffle folder every shuffle here goes through files (``pipeline.file_shuffle``), none through the runner.

Every choice depends on document ids and texts only, so output is identical whatever the runner,
bundle order or worker count.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from itertools import combinations, tee
from urllib.parse import urlsplit

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from corpusforge.core.config import NearDedupConfig
from corpusforge.corpora.document import Reject
from corpusforge.corpora.minhash import jaccard, s_curve_table, shingle_set, shingle_sets
from corpusforge.pipeline.document_spill import DocRef, banding, iter_texts, load_texts
from corpusforge.pipeline.file_shuffle import FileCoGroupByKey, FileDistinct, FileGroupByKey

log = logging.getLogger(__name__)

REJECTS = "rejects"
KEPT = "kept"
# A band bucket larger than this is linked as a star (+ a sorted chain) instead of all pairs: huge
# buckets are boilerplate clones, and k^2 verified pairs would dominate the stage for no new edges.
MAX_BUCKET_ALL_PAIRS = 64
DOC, WEB, WIKI = "d", "w", "k"  # band member tags
# Documents a verifying worker's union-find holds before it writes its forest out: bounds its memory
# (~100 B a node), while one forest edge per document replaces the k - 1 verified pairs of each bucket.
FOREST_NODES = 200_000
# Shingle sets (8 bytes a shingle) a worker buffers before writing its shuffle files.
SHINGLE_FLUSH = 5_000


def _band_keys(ref: DocRef, tag: str) -> tuple[list[bytes], str]:
    """(every LSH band key of a document, tag + id) (tags are one character): grouped under each key."""
    return list(ref.band_keys()), tag + ref.id


def _location(ref: DocRef) -> tuple[str, tuple[str, int]]:
    """(id, (spill file, row)): what verifying a pair needs of a document, not the whole reference."""
    return ref.id, (ref.spill, ref.row)


def _candidate_pairs(ids: Sequence[str]) -> Iterator[tuple[str, str]]:
    """Candidate pairs among a bucket's sorted ids: all of them, or a star and a chain for a huge bucket."""
    if len(ids) <= MAX_BUCKET_ALL_PAIRS:
        yield from combinations(ids, 2)
        return
    yield from ((ids[0], other) for other in ids[1:])
    yield from zip(ids[1:], ids[2:])


Bucket = tuple[str, ...]  # the sorted ids of the documents sharing a band key


def _bucket_members(item: tuple[bytes, Iterable[str]]) -> Iterator[tuple[Bucket, None]]:
    """A band bucket of two or more documents as its sorted ids, keyed by them to be made distinct: a tight
    cluster fills the same bucket in many of the bands, and one check of it is enough."""
    ids = tuple(sorted({member[1:] for member in item[1]}))
    if len(ids) > 1:
        yield ids, None


def _star(ids: Bucket) -> Iterator[tuple[str, str]]:
    """Unverified, every candidate pair of a bucket is an edge: a star links the same documents."""
    yield from ((ids[0], other) for other in ids[1:])


def _bucket_id(ids: Bucket) -> bytes:
    """A bucket's name on the way to its members and back (128 bits: no two buckets share one)."""
    return hashlib.blake2b("\n".join(ids).encode("utf-8"), digest_size=16).digest()


class _Forest:
    """Union-find over document ids: pairs already connected by verified pairs need no check."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.parent)

    def find(self, x: str) -> str:
        parent = self.parent
        root = x
        while (up := parent.get(root, root)) != root:
            root = up
        while x != root:
            parent[x], x = root, parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def edges(self) -> list[tuple[str, str]]:
        """(root, member) for every member that is not a root: the same components as the pairs unioned."""
        return [(self.find(x), x) for x in list(self.parent) if self.find(x) != x]


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


def _to_spill(item: tuple[str, dict[str, list]]) -> Iterator[tuple[str, tuple[int, str, list[bytes]]]]:
    """(spill file, (row, id, buckets)) of a document that some bucket needs."""
    doc_id, group = item
    if group["bucket"] and group["ref"]:
        spill, row = min(group["ref"])
        yield spill, (row, doc_id, sorted(group["bucket"]))


def _shingle_rows(item: tuple[str, Iterable[tuple[int, str, list[bytes]]]], ngram: int) -> Iterator[tuple[bytes, tuple[str, bytes]]]:
    """Each needed document of one spill file read once, its shingle set sent to every bucket it is in."""
    path, wanted = item
    by_row = {row: (doc_id, buckets) for row, doc_id, buckets in wanted}
    rows, texts = tee(iter_texts(path, by_row))  # the sets come a chunk of texts behind the rows
    for (row, _), shingles in zip(rows, shingle_sets((text for _, text in texts), ngram)):
        doc_id, buckets = by_row[row]
        data = shingles.tobytes()
        for bucket in buckets:
            yield bucket, (doc_id, data)


class _VerifyBuckets(beam.DoFn):
    """A bucket's candidate pairs checked in order, skipping those its worker already knows connected
    (the components stay the same); the verified pairs leave as the forest they make, so a cluster of
    k documents costs about k checks and k edges, not k^2."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def start_bundle(self) -> None:
        self._forest = _Forest()

    def process(self, item: tuple[bytes, Iterable[tuple[str, bytes]]]) -> Iterator[tuple[str, str]]:
        sets = {doc_id: np.frombuffer(shingles, dtype=np.uint64) for doc_id, shingles in item[1]}
        forest = self._forest
        for a, b in _candidate_pairs(sorted(sets)):
            if forest.find(a) != forest.find(b) and jaccard(sets[a], sets[b]) >= self.threshold:
                forest.union(a, b)
        if len(forest) >= FOREST_NODES:
            yield from forest.edges()
            self._forest = _Forest()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for edge in self._forest.edges():
            yield WindowedValue(edge, MIN_TIMESTAMP, [GlobalWindow()])
        self._forest = _Forest()


class VerifyBuckets(beam.PTransform):
    """Buckets (sorted ids) -> edges whose components are those of the verified candidate pairs.

    Each document's location goes to the buckets it is in (a join by id), each spill file is read once for
    the documents any bucket needs, and each needed document's shingle set (not its text) goes to its
    buckets, where the pairs are checked: per document, work and shuffled bytes grow with the buckets it
    is in, not with its near-duplicates.
    """

    def __init__(self, cfg: NearDedupConfig, locations: beam.PCollection, shuffle_dir: str | None = None) -> None:
        super().__init__()
        self.cfg, self.locations, self.shuffle_dir = cfg, locations, shuffle_dir

    def expand(self, buckets: beam.PCollection) -> beam.PCollection:
        requests = buckets | "Requests" >> beam.FlatMap(lambda ids: [(m, _bucket_id(ids)) for m in ids])
        return (
            {"bucket": requests, "ref": self.locations}
            | "JoinRefs" >> FileCoGroupByKey(self.shuffle_dir)
            | "ToSpill" >> beam.FlatMap(_to_spill)
            | "BySpill" >> FileGroupByKey(self.shuffle_dir)
            | "Shingle" >> beam.FlatMap(_shingle_rows, self.cfg.ngram)
            | "ByBucket" >> FileGroupByKey(self.shuffle_dir, flush_elements=SHINGLE_FLUSH)
            | "Check" >> beam.ParDo(_VerifyBuckets(self.cfg.threshold))
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


Node = tuple[str, tuple[str, tuple[str, ...]]]  # (node, (label, neighbours))
OWN, OTHER = 0, 1  # message tags
SETTLED = "settled"  # the jump's output of nodes whose component is whole and labelled


def _init(item: tuple[str, Iterable[str]]) -> Node:
    """A node, labelled with the smallest of itself and its neighbours, carrying its neighbours."""
    node, others = item
    neighbours = tuple(sorted(set(others)))
    return node, (min(node, neighbours[0]), neighbours)


def _spread(item: Node) -> Iterator[tuple[str, tuple[str, tuple[str, ...] | None]]]:
    """A node's label to itself (with its neighbours) and to each neighbour."""
    node, (label, neighbours) = item
    yield node, (label, neighbours)
    for other in neighbours:
        yield other, (label, None)


def _smallest(item: tuple[str, Iterable[tuple[str, tuple[str, ...] | None]]]) -> Iterator[tuple[str, tuple]]:
    """The smallest label a node received, keyed by that label for the jump; the node's own label to itself."""
    node, received = item
    label, neighbours = None, ()
    for value, carried in received:
        label = value if label is None or value < label else label
        if carried is not None:
            neighbours = carried
    yield label, (OTHER, node, neighbours)
    yield node, (OWN, label)


def _jump(item: tuple[str, Iterable[tuple]]) -> Iterator[Node | beam.pvalue.TaggedOutput]:
    """Members labelled L take L's own label when it is smaller (it is connected to L, so to them). When L is its
    own label and no member has a neighbour outside the group, the group is a whole component labelled with its
    smallest node: its members leave as ``SETTLED`` (node, label), and the rounds after carry only the others."""
    label, values = item
    values = list(values)
    own = min((v[1] for v in values if v[0] == OWN), default=label)
    members = [(v[1], v[2]) for v in values if v[0] == OTHER]
    if own == label and _closed(members):
        for node, _ in members:
            yield beam.pvalue.TaggedOutput(SETTLED, (node, label))
        return
    for node, neighbours in members:
        yield node, (min(label, own), neighbours)


def _closed(members: list[tuple[str, tuple[str, ...]]]) -> bool:
    """No member has a neighbour outside the members: edges run both ways, so they are whole components; all
    labelled with one of their nodes, they are one component, and its smallest node (whose label is itself)."""
    nodes = {node for node, _ in members}
    return all(other in nodes for _, neighbours in members for other in neighbours)


def _label_messages(item: Node) -> Iterator[tuple[str, tuple[int, str]]]:
    """A node's label to itself and to each neighbour, to find the edges whose ends still disagree."""
    node, (label, neighbours) = item
    yield node, (OWN, label)
    for other in neighbours:
        yield other, (OTHER, label)


def _residual(item: tuple[str, Iterable[tuple[int, str]]]) -> Iterator[tuple[str, str]]:
    """(smaller, larger) label of each edge at this node whose ends have different labels."""
    _, values = item
    values = list(values)
    for tag, label in values:
        if tag == OWN:
            for other_tag, other in values:
                if other_tag == OTHER and other != label:
                    yield min(label, other), max(label, other)


class ConnectedComponents(beam.PTransform):
    """Edges (a, b) -> (node, smallest node id of its component), distributed over the runner.

    Each node travels with its neighbours, so a round is two shuffles (spread the labels and keep the
    smallest; jump to the label's label), through files under ``shuffle_dir`` when given. The labels come as
    several PCollections (the resolved, the settled of each round), not flattened: the in-process runners run
    a Flatten of several inputs themselves, holding every element (at 300 MB of 400 B pages, ~60 MB more in the
    largest process); ``FileCoGroupByKey`` writes each where it is produced.
    """

    def __init__(self, rounds: int, shuffle_dir: str | None = None) -> None:
        super().__init__()
        self.rounds, self.shuffle_dir = rounds, shuffle_dir

    def expand(self, edges: beam.PCollection) -> tuple[beam.PCollection, ...]:
        shuffle = self.shuffle_dir
        nodes = (
            edges
            | "BothWays" >> beam.FlatMap(lambda e: [(e[0], e[1]), (e[1], e[0])])
            | "Adjacency" >> FileGroupByKey(shuffle)
            | "Init" >> beam.Map(_init)
        )
        settled = []
        for r in range(self.rounds):
            jumped = (
                nodes
                | f"Spread{r}" >> beam.FlatMap(_spread)
                | f"Min{r}" >> FileGroupByKey(shuffle)
                | f"Smallest{r}" >> beam.FlatMap(_smallest)
                | f"ByLabel{r}" >> FileGroupByKey(shuffle)
                | f"Jump{r}" >> beam.FlatMap(_jump).with_outputs(SETTLED, main="nodes")
            )
            nodes = jumped.nodes
            settled.append(jumped[SETTLED])
        leftover = (
            nodes
            | "LabelMessages" >> beam.FlatMap(_label_messages)
            | "AtNode" >> FileGroupByKey(shuffle)
            | "Residual" >> beam.FlatMap(_residual)
            | "DistinctResidual" >> FileDistinct(shuffle)
        )
        # The residual graph is gathered under one key and resolved there; its roots are joined back by
        # label (a join, not a side input: the DaskRunner recomputes side inputs inside every task).
        roots = (
            leftover
            | "OneKey" >> beam.Map(lambda edge: (0, edge))
            | "AllResidual" >> FileGroupByKey(shuffle)
            | "UnionFind" >> beam.FlatMap(lambda item: _union_find(list(item[1])).items())
        )
        by_label = nodes | "ByLabel" >> beam.Map(lambda item: (item[1][0], item[0]))
        resolved = (
            {"node": by_label, "root": roots}
            | "JoinRoots" >> FileCoGroupByKey(shuffle)
            | "Resolve" >> beam.FlatMap(lambda item: [(node, min(item[1]["root"], default=item[0])) for node in item[1]["node"]])
        )
        return (resolved, *settled)


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


def _split(
    refs: beam.PCollection, rejects: beam.PCollection | tuple[beam.PCollection, ...], shuffle_dir: str | None
) -> beam.pvalue.DoOutputsTuple:
    keyed = refs | "KeyRefs" >> beam.Map(lambda r: (r.id, r))
    return (
        {"ref": keyed, "reject": rejects}
        | "JoinRejects" >> FileCoGroupByKey(shuffle_dir)
        | "Split" >> beam.FlatMap(_keep_or_reject).with_outputs(REJECTS, main=KEPT)
    )


class NearDedup(beam.PTransform):
    """PCollection[DocRef] -> tagged outputs ``kept`` (DocRef) and ``rejects`` (near_duplicate).

    With ``shuffle_dir`` every shuffle goes through files there (``pipeline.file_shuffle``): on the local
    runners Beam's own would hold an element per document or edge in the launcher and its workers.
    """

    def __init__(self, cfg: NearDedupConfig | None = None, shuffle_dir: str | None = None) -> None:
        super().__init__()
        self.cfg, self.shuffle_dir = cfg or NearDedupConfig(), shuffle_dir

    def expand(self, docs: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        cfg = self.cfg
        bands, rows = banding(cfg)
        log.info("near_dedup: threshold %.2f, num_perm %d\n%s", cfg.threshold, cfg.num_perm, s_curve_table(bands, rows))
        buckets = (
            docs
            | "BandKeys" >> beam.Map(_band_keys, DOC)
            | "ByBand" >> FileGroupByKey(self.shuffle_dir, many_keys=True, min_values=2)
            | "BucketMembers" >> beam.FlatMap(_bucket_members)
            | "DistinctBuckets" >> FileGroupByKey(self.shuffle_dir)
            | "Members" >> beam.Map(lambda item: item[0])
        )
        if cfg.verify:
            by_id = docs | "ById" >> beam.Map(_location)
            edges = buckets | "Verify" >> VerifyBuckets(cfg, by_id, self.shuffle_dir)
        else:
            edges = buckets | "Star" >> beam.FlatMap(_star)
        labels = edges | "Components" >> ConnectedComponents(cfg.max_component_rounds, self.shuffle_dir)
        lengths = docs | "Lengths" >> beam.Map(lambda r: (r.id, r.chars))
        duplicates = (
            {"label": labels, "length": lengths}
            | "JoinLengths" >> FileCoGroupByKey(self.shuffle_dir)
            | "ByComponent" >> beam.FlatMap(lambda it: [(lab, (it[0], n)) for lab in it[1]["label"] for n in it[1]["length"]])
            | "GroupComponent" >> FileGroupByKey(self.shuffle_dir)
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
                elsewhere | "WebBands" >> beam.Map(_band_keys, WEB),
                wiki | "WikiBands" >> beam.Map(_band_keys, WIKI),
            )
            | "ByBand" >> FileGroupByKey(self.shuffle_dir, many_keys=True, min_values=2)
            | "CrossPairs" >> beam.FlatMap(_cross_pairs)
            | "DistinctPairs" >> FileDistinct(self.shuffle_dir)
        )
        if cfg.verify:
            web_refs = elsewhere | "WebById" >> beam.Map(_location)
            wiki_refs = wiki | "WikiById" >> beam.Map(_location)
            pairs = pairs | "Verify" >> VerifyPairs(cfg, web_refs, wiki_refs, self.shuffle_dir)
        near_rejects = pairs | "NearReject" >> beam.Map(lambda p: (p[0], ("wikipedia_near_duplicate", p[1])))
        return _split(web, (url_rejects, near_rejects), self.shuffle_dir)


def wikipedia_removal(
    webtext_docs: beam.PCollection, wikipedia_docs: beam.PCollection, cfg: NearDedupConfig | None = None
) -> beam.pvalue.DoOutputsTuple:
    """``webtext_refs | WikipediaRemoval(wikipedia_refs, cfg)``: tagged outputs ``kept`` and ``rejects``."""
    return webtext_docs | "WikipediaRemoval" >> WikipediaRemoval(wikipedia_docs, cfg)
