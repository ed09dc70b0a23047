"""``OUT/report.html``: one self-contained page that shows a researcher what a build made.

Everything on it is read back from the output folder (manifest.json, the documents and rejects
Parquet files, the vocabularies, the shard manifests and shards), so the page can be rewritten
for any finished build with ``write_report(out_dir)``. Plots are matplotlib PNGs inlined as base64:
the one file can be mailed or archived. Every figure that the manifest also holds carries a
``data-key`` attribute naming where it comes from, which the tests compare with the manifest.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Iterable

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpusforge import __version__
from corpusforge.core import storage
from corpusforge.core.layout import Layout
from corpusforge.corpora.document_files import iter_rows
from corpusforge.pipeline.documents_io import output_files
from corpusforge.shards.inspect import sequence_row, summarize

FERTILITY_SAMPLE_BYTES = 2_000_000  # text tokenized per vocabulary for tokens-per-word
FERTILITY_BATCH = 256  # paragraphs encoded at once
DUPLICATE_REASONS = ("duplicate", "near_duplicate")  # their ``detail`` is the id of the document kept
STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{margin-bottom:.2em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
.meta{color:#666} table{border-collapse:collapse;margin:.6em 0}
td,th{padding:.25em .8em;border-bottom:1px solid #e4e4e4;text-align:right} th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left} .warn{color:#a40;font-weight:600}
.row{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start} img{max-width:100%;border:1px solid #eee}
"""


def write_report(out_dir: storage.PathLike) -> str:
    """Write ``out_dir/report.html`` from the build's files and return its path."""
    from corpusforge.stages import EXAMPLE_FORMATS

    layout = Layout.at(out_dir)
    manifest = storage.read_json(layout.manifest)
    sections = [
        _sources(manifest),
        _rejects(manifest),
        _lengths(manifest),
        _duplicates(output_files(layout.rejects)),
        _vocabularies(layout, manifest),
        *(
            _shards(layout.shards(stage.name), stage.name)
            for stage in EXAMPLE_FORMATS
            if storage.is_file(storage.join(layout.shards(stage.name), "manifest.json"))
        ),
        _stage_times(manifest),
    ]
    stages = ", ".join(manifest.get("config", {}).get("run", {}).get("stages", []))
    page = (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>corpusforge build report</title><style>{STYLE}</style></head><body>"
        f"<h1>corpusforge build report</h1><p class=meta>{html.escape(layout.out)} · stages: {html.escape(stages)} · "
        f"written {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by corpusforge {__version__}</p>"
        + "".join(s for s in sections if s)
        + "</body></html>"
    )
    storage.write_bytes(layout.report, page.encode("utf-8"))
    return layout.report


# ---- sections -----------------------------------------------------------------------------------------------


def _sources(manifest: dict) -> str:
    counters = manifest.get("counters", {})
    if not counters:
        return ""
    rows = [
        [
            source,
            *(_cell(c[k], f"counters.{source}.{k}") for k in ("inputs", "documents")),
            _cell(sum(c["rejects"].values()), f"counters.{source}.rejects"),
            _cell(c["words"], f"counters.{source}.words"),
            f"{c['bytes'] / 1e6:,.2f} MB",
        ]
        for source, c in counters.items()
    ]
    names = list(counters)
    figure, (left, right) = _figure(2, width=10)
    documents = [counters[s]["documents"] for s in names]
    rejected = [sum(counters[s]["rejects"].values()) for s in names]
    left.barh(names, documents, label="documents", color="#3b7dd8")
    left.barh(names, rejected, left=documents, label="rejects", color="#e08a3c")
    left.set(title="inputs per source: documents + rejects", xlabel="records")
    left.legend()
    right.barh(names, [counters[s]["words"] for s in names], color="#4a9a5b")
    right.set(title="words kept per source", xlabel="words")
    return _section("Sources", _table(["source", "inputs", "documents", "rejects", "words", "text"], rows) + _img(figure))


def _rejects(manifest: dict) -> str:
    rows = [
        [source, html.escape(reason), _cell(count, f"counters.{source}.rejects.{reason}")]
        for source, c in manifest.get("counters", {}).items()
        for reason, count in sorted(c["rejects"].items(), key=lambda item: -item[1])
    ]
    if not rows:
        return ""
    totals: Counter[str] = Counter()
    for c in manifest["counters"].values():
        totals.update(c["rejects"])
    figure, (axes,) = _figure(1, width=7, height=max(2.4, 0.5 + 0.35 * len(totals)))
    reasons = sorted(totals, key=totals.get)
    axes.barh(reasons, [totals[r] for r in reasons], color="#c45c4a")
    axes.set(title="rejects per reason (all sources)", xlabel="records")
    return _section("Reject reasons", f"<div class=row>{_table(['source', 'reason', 'count'], rows)}{_img(figure)}</div>")


def _lengths(manifest: dict) -> str:
    """From the recount's per-source lengths (the documents are not read again for the page)."""
    per_source = {source: s["lengths"] for source, s in sorted(manifest.get("counters", {}).items()) if s.get("lengths")}
    if not per_source:
        return ""
    figure, (axes,) = _figure(1, width=9)
    for source, lengths in per_source.items():
        documents = manifest["counters"][source]["documents"]
        axes.stairs(lengths["counts"], lengths["bins"], linewidth=2, label=f"{source} ({documents:,})")
    axes.set(xscale="log", yscale="log", title="document length per source", xlabel="words per document (log)", ylabel="documents (log)")
    axes.legend()
    rows = [
        [s, f"{manifest['counters'][s]['documents']:,}", f"{a['min']:,}", f"{a['median']:,.0f}", f"{a['mean']:,.0f}", f"{a['max']:,}"]
        for s, a in per_source.items()
    ]
    return _section("Document lengths", _table(["source", "documents", "min", "median", "mean", "max"], rows) + _img(figure))


def _duplicates(reject_files: list[str]) -> str:
    """Cluster sizes: each removed copy names the document kept, so a cluster is that id plus its copies."""
    clusters: dict[str, Counter[str]] = {reason: Counter() for reason in DUPLICATE_REASONS}
    for path in reject_files:
        table = pq.read_table(storage.arrow_input(path), columns=["reason", "detail"])
        for reason in DUPLICATE_REASONS:
            details = table.filter(pc.equal(table["reason"], reason))["detail"].to_pylist()
            clusters[reason].update(d for d in details if d)
    if not any(clusters.values()):
        return _section("Duplicate clusters", "<p>No exact or near-duplicates were removed.</p>")
    figure, (axes,) = _figure(1, width=8)
    rows = []
    for (reason, copies), marker in zip(clusters.items(), ("o", "x")):
        if not copies:
            continue
        sizes = np.array([1 + n for n in copies.values()])
        values, frequency = np.unique(sizes, return_counts=True)
        axes.plot(values, frequency, marker=marker, markersize=9, linestyle=":", label=reason.replace("_", "-"))
        rows.append([reason, f"{len(sizes):,}", f"{int(sizes.sum() - len(sizes)):,}", f"{int(sizes.max()):,}", f"{sizes.mean():.2f}"])
    axes.set(
        xscale="log",
        yscale="log",
        title="duplicate cluster sizes (kept document + removed copies)",
        xlabel="documents in the cluster",
        ylabel="clusters",
    )
    axes.legend()
    return _section("Duplicate clusters", _table(["reason", "clusters", "removed", "largest", "mean size"], rows) + _img(figure))


def _vocabularies(layout: Layout, manifest: dict) -> str:
    from tokenizers import Tokenizer

    requested = manifest.get("config", {}).get("vocab", {})
    rows = []
    for kind, key in (("wordpiece", "wordpiece_vocab_size"), ("bpe", "bpe_vocab_size")):
        path = storage.join(layout.vocab(kind), "tokenizer.json")
        if not storage.is_file(path):
            continue
        tokenizer = Tokenizer.from_str(storage.read_text(path))
        reached, wanted = tokenizer.get_vocab_size(with_added_tokens=True), requested.get(key)
        note = (
            f"<span class=warn>{reached / wanted:.0%} of the requested size: the corpus ran out of merges</span>"
            if wanted and reached < wanted
            else "reached"
        )
        rows.append(
            [kind, _cell(wanted, f"config.vocab.{key}") if wanted else "-", f"{reached:,}", note, f"{_fertility(tokenizer, layout):.3f}"]
        )
        del tokenizer  # one vocabulary loaded at a time
    if not rows:
        return ""
    return _section(
        "Vocabularies",
        _table(["kind", "requested", "reached", "note", "tokens per word"], rows)
        + f"<p class=meta>Tokens per whitespace word on the first {FERTILITY_SAMPLE_BYTES // 1_000_000} MB of documents (in id order, which is hash order).</p>",
    )


def _fertility(tokenizer: Any, layout: Layout) -> float:
    """Tokens per word, paragraph by paragraph: an ``Encoding`` of a whole 1 MB book held ~150 MB."""
    words = tokens = 0
    for text in _text_sample(output_files(layout.documents), FERTILITY_SAMPLE_BYTES):
        paragraphs = text.split("\n\n")
        words += sum(len(paragraph.split()) for paragraph in paragraphs)
        for first in range(0, len(paragraphs), FERTILITY_BATCH):  # encodings of a batch at a time
            batch = paragraphs[first : first + FERTILITY_BATCH]
            tokens += sum(len(encoding) for encoding in tokenizer.encode_batch_fast(batch, add_special_tokens=False))
    return tokens / words if words else 0.0


def _text_sample(doc_files: list[str], budget: int) -> Iterable[str]:
    for (text,) in iter_rows(doc_files, ["text"]):
        yield text[:budget]
        budget -= len(text)
        if budget <= 0:
            return


def _shards(directory: str, task: str) -> str:
    summary = summarize(directory)
    rows = [
        ("shards", _cell(summary["shards"], f"shards.{task}.shards")),
        ("examples", _cell(summary["examples"], f"shards.{task}.totals.examples")),
        ("tokens", _cell(summary["tokens"], f"shards.{task}.totals.tokens")),
        sequence_row(summary),
        ("mean length", f"{summary['mean_length']:.1f}"),
        ("padding", f"{summary['padding_fraction']:.2%}"),
    ]
    if "masked_fraction" in summary:  # masked-LM examples
        rows += [
            ("masked (of real tokens)", f"{summary['masked_fraction']:.2%}"),
            (
                "&nbsp;&nbsp;→ [MASK] / random / unchanged",
                f"{summary['mask_token_fraction']:.1%} / {summary['random_token_fraction']:.1%} / {summary['unchanged_fraction']:.1%}",
            ),
            ("NSP random next", f"{summary['nsp_random_next_fraction']:.2%}"),
        ]
    else:
        rows.append(("partial windows", f"{summary['partial_windows']:,}"))
    if summary["sampled"]:
        rows.append(("statistics from", f"the first {summary['sampled_examples']:,} examples"))
    histogram = summary["length_histogram"]
    figure, (axes,) = _figure(1, width=7)
    axes.stairs(histogram["counts"], histogram["edges"], fill=True, color="#6a5acd")
    axes.set(title=f"{task.upper()} example lengths", xlabel="real tokens per example", ylabel="examples (log)")
    if any(histogram["counts"]):  # no example, no log axis
        axes.set_yscale("log")
    return _section(f"{task.upper()} shards", f"<div class=row>{_table(['figure', 'value'], [list(r) for r in rows])}{_img(figure)}</div>")


def _stage_times(manifest: dict) -> str:
    seconds = manifest.get("stage_seconds", {})
    stages = {k: v for k, v in seconds.items() if k != "total"}
    if not stages:
        return ""
    rows = [[stage, _cell(value, f"stage_seconds.{stage}", "{:,.1f} s")] for stage, value in seconds.items()]
    figure, (axes,) = _figure(1, width=7, height=max(2.4, 0.6 + 0.35 * len(stages)))
    axes.barh(list(stages)[::-1], list(stages.values())[::-1], color="#888")
    axes.set(title="wall time per stage", xlabel="seconds")
    return _section("Stage times", f"<div class=row>{_table(['stage', 'wall time'], rows)}{_img(figure)}</div>")


# ---- HTML and figures ---------------------------------------------------------------------------------------


def _cell(value: Any, key: str, fmt: str = "{:,}") -> str:
    """A figure with the manifest key it comes from (``data-key``/``data-value``), for readers and tests."""
    return f'<span data-key="{html.escape(key)}" data-value="{html.escape(json.dumps(value))}">{fmt.format(value)}</span>'


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _section(title: str, body: str) -> str:
    return f"<h2>{html.escape(title)}</h2>{body}"


def _figure(panels: int, width: float = 8, height: float = 3.6) -> tuple[Any, list[Any]]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(1, panels, figsize=(width, height), squeeze=False)
    return figure, list(axes[0])


def _img(figure: Any) -> str:
    from matplotlib import pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return f'<img alt="chart" src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'
