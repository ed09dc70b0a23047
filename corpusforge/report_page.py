"""``OUT/report.html``: one self-contained page that shows a researcher what a build made.

Everything on it is read back from the output folder (manifest.json, the documents and rejects
Parquet files, the vocabularies, the shard manifests and shards), so the page can be rewritten
for any finished build with ``write_report(out_dir)``. Plots are matplotlib PNGs inlined as base64:
the one file can be mailed or archived. Every figure that the manifest also holds carries a
``data-key`` attribute naming where it comes from, which the tests compare with the manifest.
Charts are drawn as wide as the page and shown at that width, short and under their tables (tables
that belong together stand side by side), so the page reads top to bottom without half-empty rows.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpusforge import __version__
from corpusforge.core import storage
from corpusforge.core.layout import Layout
from corpusforge.encoding.vocab import FERTILITY_SAMPLE_BYTES
from corpusforge.pipeline.documents_io import output_files
from corpusforge.shards.inspect import sequence_row, summarize

SHARD_SAMPLE = 50_000  # examples read per shard folder for its figures: the page is written by the launcher, on a small machine
DUPLICATE_REASONS = ("duplicate", "near_duplicate")  # their ``detail`` is the id of the document kept
PAGE_PX = 1100  # the page's width (body max-width): a chart is drawn at it, so the browser shows it unscaled
DPI = 100
LOG_COUNTS_ABOVE = 20  # a bar chart's counts go on a log axis when its largest bar is this many times its smallest
CLUSTER_SLOTS = 10  # the duplicate chart is at least this many sizes wide: one size is two slim bars, not two walls
CLUSTER_LABELS = 25  # at most this many cluster sizes are labelled under that chart, so the labels never overlap
STYLE = f"""
body{{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:{PAGE_PX}px;color:#222;padding:0 1em}}
h1{{margin-bottom:.2em}} h2{{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.8em}}
.meta{{color:#666}} table{{border-collapse:collapse;margin:.6em 0}} caption{{text-align:left;font-weight:600;padding:.2em 0}}
td,th{{padding:.25em .8em;border-bottom:1px solid #e4e4e4;text-align:right}} th{{background:#f4f4f4}}
td:first-child,th:first-child{{text-align:left}} .warn{{color:#a40;font-weight:600}}
.row{{display:flex;flex-wrap:wrap;gap:0 3em;align-items:flex-start}} img{{display:block;width:100%;height:auto;margin:.4em 0}}
"""


def write_report(out_dir: storage.PathLike) -> str:
    """Write ``out_dir/report.html`` from the build's files and return its path."""
    layout = Layout.at(out_dir)
    manifest = storage.read_json(layout.manifest)
    sections = [
        _warnings(manifest),
        _sources(manifest),
        _lengths(manifest),
        _duplicates(output_files(layout.rejects)),
        _vocabularies(layout, manifest),
        _shards(layout),
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


def _warnings(manifest: dict) -> str:
    """Every warning of the build, first on the page: what a reader must not miss."""
    warnings = manifest.get("warnings", [])
    if not warnings:
        return _section("Warnings", "<p>None: the build gave no warning.</p>")
    return _section("Warnings", "<ul>" + "".join(f"<li class=warn>{html.escape(w)}</li>" for w in warnings) + "</ul>")


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
    reasons = [
        [source, html.escape(reason), _cell(count, f"counters.{source}.rejects.{reason}")]
        for source, c in counters.items()
        for reason, count in sorted(c["rejects"].items(), key=lambda item: -item[1])
    ]
    tables = _table(["source", "inputs", "documents", "rejects", "words", "text"], rows, "per source")
    if reasons:
        tables += _table(["source", "reason", "count"], reasons, "reject reasons")
    return _section("Sources and rejects", f"<div class=row>{tables}</div>{_img(_sources_figure(counters))}")


def _sources_figure(counters: dict) -> Any:
    """Documents + rejects and words per source, and (when any) rejects per reason over all sources."""
    names = list(counters)
    totals: Counter[str] = Counter()
    for c in counters.values():
        totals.update(c["rejects"])
    figure, panels = _figure(3 if totals else 2, height=_bars_height(max(len(names), len(totals))))
    documents = [counters[s]["documents"] for s in names]
    rejected = [sum(counters[s]["rejects"].values()) for s in names]
    panels[0].barh(names, documents, label="documents", color="#3b7dd8")
    panels[0].barh(names, rejected, left=documents, label="rejects", color="#e08a3c")
    panels[0].set(title="inputs per source", xlabel="records")
    panels[0].legend(loc="upper left", bbox_to_anchor=(1, 1))  # beside the bars, not over them
    panels[1].barh(names, [counters[s]["words"] for s in names], color="#4a9a5b")
    panels[1].set(title="words kept per source", xlabel="words")
    if totals:
        reasons = sorted(totals, key=totals.get)
        panels[2].barh(reasons, [totals[r] for r in reasons], color="#c45c4a")
        panels[2].set(title="rejects per reason", xlabel="records (all sources)")
    for axes in panels:
        _counts(axes, "x")
    return figure


def _lengths(manifest: dict) -> str:
    """From the recount's per-source lengths (the documents are not read again for the page)."""
    counters = manifest.get("counters", {})
    per_source = _with_lengths(counters)
    if not per_source:
        return ""
    rows = [
        [s, f"{counters[s]['documents']:,}", f"{a['min']:,}", f"{a['median']:,.0f}", f"{a['mean']:,.0f}", f"{a['max']:,}"]
        for s, a in per_source.items()
    ]
    return _section(
        "Document lengths", _table(["source", "documents", "min", "median", "mean", "max"], rows) + _img(_lengths_figure(counters))
    )


def _with_lengths(counters: dict) -> dict[str, dict]:
    return {source: s["lengths"] for source, s in sorted(counters.items()) if s.get("lengths")}


def _lengths_figure(counters: dict) -> Any:
    figure, (axes,) = _figure(1, height=3.0)
    for source, lengths in _with_lengths(counters).items():
        axes.stairs(lengths["counts"], lengths["bins"], linewidth=2, label=f"{source} ({counters[source]['documents']:,})")
    axes.set(title="document length per source", xlabel="words per document (log)", ylabel="documents (log)")
    _counts(axes, "x", log=True)
    _counts(axes, "y", log=True)
    axes.legend()
    return figure


def _duplicates(reject_files: list[str]) -> str:
    sizes = _cluster_sizes(reject_files)
    if not sizes:
        return _section("Duplicate clusters", "<p>No exact or near-duplicates were removed.</p>")
    rows = [[reason, f"{len(s):,}", f"{int(s.sum() - len(s)):,}", f"{int(s.max()):,}", f"{s.mean():.2f}"] for reason, s in sizes.items()]
    return _section(
        "Duplicate clusters", _table(["reason", "clusters", "removed", "largest", "mean size"], rows) + _img(_duplicates_figure(sizes))
    )


def _cluster_sizes(reject_files: list[str]) -> dict[str, np.ndarray]:
    """Per reason, the size of each cluster: a removed copy names the document kept, so a cluster is that id plus its copies."""
    copies: dict[str, Counter[str]] = {reason: Counter() for reason in DUPLICATE_REASONS}
    for path in reject_files:
        table = pq.read_table(storage.arrow_input(path), columns=["reason", "detail"])
        for reason in DUPLICATE_REASONS:
            details = table.filter(pc.equal(table["reason"], reason))["detail"].to_pylist()
            copies[reason].update(d for d in details if d)
    return {reason: np.array([1 + n for n in kept.values()]) for reason, kept in copies.items() if kept}


def _duplicates_figure(sizes: dict[str, np.ndarray]) -> Any:
    """Clusters per size, the reasons' bars side by side: one reason's point can no longer hide the other's."""
    values = np.unique(np.concatenate(list(sizes.values())))
    width = 0.8 / len(sizes)
    figure, (axes,) = _figure(1, height=2.6)
    heights = []
    for index, (reason, s) in enumerate(sizes.items()):
        clusters = np.bincount(np.searchsorted(values, s), minlength=len(values))
        offset = (index - (len(sizes) - 1) / 2) * width
        axes.bar(np.arange(len(values)) + offset, clusters, width, label=reason.replace("_", "-"))
        heights += [int(n) for n in clusters if n]
    step = math.ceil(len(values) / CLUSTER_LABELS)
    axes.set_xticks(np.arange(len(values))[::step], [f"{v:,}" for v in values[::step]])
    margin = max(0.5, (CLUSTER_SLOTS - len(values)) / 2)
    axes.set_xlim(-margin, len(values) - 1 + margin)
    axes.set(title="duplicate cluster sizes (kept document + removed copies)", xlabel="documents in the cluster", ylabel="clusters")
    _counts(axes, "y", log=max(heights) > LOG_COUNTS_ABOVE * min(heights))
    axes.legend()
    return figure


def _vocabularies(layout: Layout, manifest: dict) -> str:
    """Sizes and tokens per word as the vocab stage measured them (``encoding.vocab.vocab_figures``): no tokenizer
    is loaded here, in the launcher."""
    requested = manifest.get("config", {}).get("vocab", {})
    measured = manifest.get("artifacts", {}).get("vocab_figures", {})
    rows = []
    for kind, key in (("wordpiece", "wordpiece_vocab_size"), ("bpe", "bpe_vocab_size")):
        if kind not in manifest.get("artifacts", {}).get("vocab", {}):
            continue
        figures, wanted = measured.get(kind, {}), requested.get(key)
        reached = figures.get("size")
        if not reached:  # a vocab stage of an earlier version measured nothing
            note = "-"
        elif wanted and reached < wanted:
            note = f"<span class=warn>{reached / wanted:.0%} of the requested size: the corpus ran out of merges</span>"
        else:
            note = "reached"
        fertility = figures.get("tokens_per_word")
        rows.append(
            [
                kind,
                _cell(wanted, f"config.vocab.{key}") if wanted else "-",
                f"{reached:,}" if reached else "-",
                note,
                f"{fertility:.3f}" if fertility is not None else "-",
            ]
        )
    if not rows:
        return ""
    return _section(
        "Vocabularies",
        _table(["kind", "requested", "reached", "note", "tokens per word"], rows)
        + f"<p class=meta>Tokens per whitespace word on the first {FERTILITY_SAMPLE_BYTES // 1_000_000} MB of documents (in id order, which is hash order).</p>",
    )


def _shards(layout: Layout) -> str:
    """One table per example format, side by side, and their length histograms in one chart."""
    from corpusforge.stages import EXAMPLE_FORMATS

    summaries = {}
    for stage in EXAMPLE_FORMATS:
        folder = layout.shards(stage.name)
        if storage.is_file(storage.join(folder, "manifest.json")):
            summaries[stage.name] = summarize(folder, sample=SHARD_SAMPLE)
    if not summaries:
        return ""
    tables = "".join(
        _table(["figure", "value"], _shard_rows(summary, task), f"{task.upper()} shards") for task, summary in summaries.items()
    )
    return _section("Example shards", f"<div class=row>{tables}</div>{_img(_shards_figure(summaries))}")


def _shard_rows(summary: dict, task: str) -> list[list[str]]:
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
    return [list(row) for row in rows]


def _shards_figure(summaries: dict[str, dict]) -> Any:
    figure, panels = _figure(len(summaries), height=3.0)
    for axes, (task, summary) in zip(panels, summaries.items()):
        histogram = summary["length_histogram"]
        logged = any(histogram["counts"])  # no example, no log axis
        axes.stairs(histogram["counts"], histogram["edges"], fill=True, color="#6a5acd")
        axes.set(
            title=f"{task.upper()} example lengths", xlabel="real tokens per example", ylabel="examples (log)" if logged else "examples"
        )
        _counts(axes, "x")
        _counts(axes, "y", log=logged)
    return figure


def _stage_times(manifest: dict) -> str:
    seconds = manifest.get("stage_seconds", {})
    stages = {k: v for k, v in seconds.items() if k != "total"}
    if not stages:
        return ""
    rows = [[stage, _cell(value, f"stage_seconds.{stage}", "{:,.1f} s")] for stage, value in seconds.items()]
    figure, (axes,) = _figure(1, height=_bars_height(len(stages)))
    axes.barh(list(stages)[::-1], list(stages.values())[::-1], color="#888")
    axes.set(title="wall time per stage", xlabel="seconds")
    return _section("Stage times", _table(["stage", "wall time"], rows) + _img(figure))


# ---- HTML and figures ---------------------------------------------------------------------------------------


def _cell(value: Any, key: str, fmt: str = "{:,}") -> str:
    """A figure with the manifest key it comes from (``data-key``/``data-value``), for readers and tests."""
    return f'<span data-key="{html.escape(key)}" data-value="{html.escape(json.dumps(value))}">{fmt.format(value)}</span>'


def _table(header: list[str], rows: list[list[Any]], caption: str = "") -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{f'<caption>{html.escape(caption)}</caption>' if caption else ''}<tr>{head}</tr>{body}</table>"


def _section(title: str, body: str) -> str:
    return f"<h2>{html.escape(title)}</h2>{body}"


def _figure(panels: int, height: float) -> tuple[Any, list[Any]]:
    """A row of ``panels`` charts as wide as the page."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(1, panels, figsize=(PAGE_PX / DPI, height), squeeze=False)
    return figure, list(axes[0])


def _bars_height(bars: int) -> float:
    """Inches for a horizontal bar chart: a bar's label needs about a line of text."""
    return max(2.2, 0.8 + 0.3 * bars)


def _counts(axes: Any, which: str, log: bool = False) -> None:
    """Make a count axis read as counts: whole-number ticks, and on a log scale plain 1, 2, 5, 10 labels
    (never 0.25 or 2x10^0). Called once the data is drawn: the log ticks depend on the range shown."""
    from matplotlib import ticker

    axis = axes.xaxis if which == "x" else axes.yaxis
    scale, get_limits, set_limits = (
        (axes.set_xscale, axes.get_xlim, axes.set_xlim) if which == "x" else (axes.set_yscale, axes.get_ylim, axes.set_ylim)
    )
    if log:
        scale("log")
        low, high = get_limits()
        low = max(low, 0.7)  # a count under 1 is 0, which a log axis cannot show: no 0.5 tick
        set_limits(low, high)
        axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0) if math.log10(high / low) <= 3 else (1.0,)))
        axis.set_minor_formatter(ticker.NullFormatter())
    else:
        axis.set_major_locator(ticker.MaxNLocator(nbins=_label_room(axes) if which == "x" else "auto", integer=True))
    axis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:,.0f}"))


def _label_room(axes: Any) -> int:
    """How many tick labels fit side by side on the x axis: matplotlib's "auto" counts on short labels, and a
    panel a third of the page wide cannot hold eight labels like 3,500,000."""
    width_px = axes.get_position().width * axes.get_figure().get_figwidth() * DPI
    longest = len(f"{max(axes.get_xlim()):,.0f}")
    return max(2, int(width_px // (7 * longest + 16)))  # a 10-point digit or comma is about 7 px at DPI 100


def _img(figure: Any) -> str:
    """The figure as an inline PNG, its panel titles as the alt text."""
    from matplotlib import pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=DPI)
    alt = "; ".join(axes.get_title() for axes in figure.axes)
    plt.close(figure)
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'
