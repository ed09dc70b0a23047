"""What a person sees: the end-of-build summary and ``docs inspect``."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from corpusforge.build import BuildResult
from corpusforge.core import storage
from corpusforge.core.layout import MANIFEST, Layout
from corpusforge.corpora.document_files import iter_row_groups, word_counts
from corpusforge.pipeline.documents_io import output_files
from corpusforge.pipeline.summary import SourceStats, collect_stats, stats_to_json


def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GB"


def sources_table(stats: dict, inputs: bool = True) -> Table:
    """Figures per source; ``inputs=False`` leaves out the records read, which only the build's counters know."""
    table = Table(title="documents per source")
    columns = ("source", "inputs", "documents", "rejects", "words", "text")
    for column in columns if inputs else tuple(c for c in columns if c != "inputs"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for source, s in stats.items():
        read = [f"{s.inputs:,}"] if inputs else []
        table.add_row(source, *read, f"{s.documents:,}", f"{sum(s.rejects.values()):,}", f"{s.words:,}", _human_bytes(s.bytes))
    return table


def rejects_table(stats: dict) -> Table:
    table = Table(title="rejects per reason")
    table.add_column("source")
    table.add_column("reason")
    table.add_column("count", justify="right")
    for source, s in stats.items():
        for reason, count in sorted(s.rejects.items()):
            table.add_row(source, reason, f"{count:,}")
    return table


def print_build_summary(console: Console, result: BuildResult) -> None:
    if result.stats:
        console.print(sources_table(result.stats))
        console.print(rejects_table(result.stats))
    from corpusforge.stages import EXAMPLE_FORMATS

    for name in (stage.name for stage in EXAMPLE_FORMATS):
        shards = result.artifacts.get(name)
        if isinstance(shards, dict):
            totals = shards.get("totals", shards)
            console.print(f"[bold]{name} shards[/]: {totals.get('examples', '?'):,} examples, {totals.get('tokens', '?'):,} tokens")
    trained = result.artifacts.get("train")
    if isinstance(trained, dict) and trained:
        console.print(
            "[bold]held-out evaluation[/]: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in trained.items())
        )
    if result.reused:
        console.print(
            f"[bold]reused[/] (made earlier from the same configuration and inputs; --force runs them again): {', '.join(result.reused)}"
        )
    if result.ran:
        console.print("[bold]ran[/]: " + ", ".join(f"{stage} ({escape(reason)})" for stage, reason in result.ran.items()))
    for warning in result.warnings:
        console.print(f"[bold yellow]warning[/]: {escape(warning)}")
    timings = ", ".join(f"{stage} {seconds:.1f}s" for stage, seconds in result.stage_seconds.items())
    console.print(f"[bold]wall time[/]: {timings}")
    layout = Layout.at(result.output_dir)
    # Paths are never wrapped (soft_wrap): a piped console is 80 columns, and a path cut in two cannot be pasted.
    console.print(f"[bold green]outputs[/] in {layout.out}:", soft_wrap=True)
    for folder in (layout.documents, layout.rejects, layout.vocab_root, layout.shards_root, layout.path("train")):
        if storage.is_dir(folder):
            console.print(f"  {folder}/", soft_wrap=True)
    console.print(f"  manifest: {result.manifest_path}", soft_wrap=True)
    if storage.is_file(layout.report):
        console.print(f"  report:   {layout.report}  (open it in a browser)", soft_wrap=True)


def _is_rejects(path: str) -> bool:
    return "reason" in pq.read_schema(storage.arrow_input(path)).names


def _locate(path: str) -> tuple[list[str], list[str]]:
    """(document files, reject files) for a build directory, a documents or rejects folder, or one file."""
    path = storage.resolve(path)
    layout = Layout.at(path)
    if storage.is_file(path):
        return ([], [path]) if _is_rejects(path) else ([path], [])
    if storage.is_dir(layout.documents):
        return output_files(layout.documents), output_files(layout.rejects)
    if storage.is_file(storage.join(path, "manifest.json")) and storage.glob(storage.join(path, "train-*.arrow")):
        raise ValueError(f"{path} is a shard directory: use `corpusforge shards inspect {path}`")
    if storage.is_dir(path):
        files = output_files(path)
        if files and _is_rejects(files[0]):
            return [], files
        beside = Layout.at(storage.parent(path))
        return files, output_files(beside.rejects) if path == beside.documents else []
    raise FileNotFoundError(f"{path}: no such file or directory")


def inspect_documents(console: Console, path: str, show: str | None = None, as_json: bool = False) -> None:
    """Counts and lengths of documents (or reject reasons of a rejects folder), then one record if asked."""
    doc_files, reject_files = _locate(path)
    if not doc_files and not reject_files:
        raise FileNotFoundError(f"{path}: no part-*.parquet document or reject files")
    row = _find_row(doc_files or reject_files, show) if show is not None else None  # a bad --show fails before any output
    none = storage.join(path, "_none")
    stats = collect_stats(storage.parent(doc_files[0]) if doc_files else none, storage.parent(reject_files[0]) if reject_files else none)
    inputs = _inputs_from_manifest(stats, path)
    words = _word_counts(doc_files)
    lengths = _length_stats(words) if doc_files else {}
    if as_json:
        sources = {source: figures | ({} if inputs else {"inputs": None}) for source, figures in stats_to_json(stats).items()}
        console.print_json(json.dumps({"sources": sources, "lengths": lengths}))
    elif doc_files:
        console.print(sources_table(stats, inputs=inputs))
        if not inputs:
            console.print(
                f"no inputs column: records read per source are counted in a build's {MANIFEST} (give the build output folder)",
                soft_wrap=True,
            )
        if any(s.rejects for s in stats.values()):
            console.print(rejects_table(stats))
        console.print(
            "[bold]length in words[/]: "
            + ", ".join(f"{k.removeprefix('words_')} {v:,.0f}" for k, v in lengths.items() if k.startswith("words_"))
        )
        console.print(_histogram(words))
    else:
        console.print(
            f"{path}: rejects only ({sum(sum(s.rejects.values()) for s in stats.values()):,} records; the documents are in the documents/ folder beside it)"
        )
        console.print(rejects_table(stats))
    if row is not None:
        _print_row(console, row)


def _inputs_from_manifest(stats: dict[str, SourceStats], path: str) -> bool:
    """Fill each source's records read from the build's counters when ``path`` is a build output folder or its
    documents/ folder: the Parquet files hold what was written, not what was read. False when there are none."""
    path = storage.resolve(path)
    parent = Layout.at(storage.parent(path))
    layout = parent if path == parent.documents else Layout.at(path)
    counters = storage.read_json(layout.manifest).get("counters", {}) if storage.is_file(layout.manifest) else {}
    if not set(stats) <= set(counters):
        return False
    for source, figures in stats.items():
        figures.inputs = counters[source]["inputs"]
    return True


def _word_counts(doc_files: list[str]) -> np.ndarray:
    return np.concatenate(
        [np.zeros(0, dtype=np.int64)]
        + [word_counts(table["text"]).to_numpy(zero_copy_only=False) for table in iter_row_groups(doc_files, ["text"])]
    )


def _length_stats(words: np.ndarray) -> dict:
    return {
        "documents": int(words.size),
        "words_total": int(words.sum()),
        "words_min": int(words.min()) if words.size else 0,
        "words_median": float(np.median(words)) if words.size else 0.0,
        "words_mean": float(words.mean()) if words.size else 0.0,
        "words_max": int(words.max()) if words.size else 0,
    }


def _histogram(words: np.ndarray, bins: int = 10, width: int = 40) -> str:
    if not words.size:
        return ""
    edges = np.unique(np.quantile(words, np.linspace(0, 1, bins + 1)).astype(int))
    counts, edges = np.histogram(words, bins=edges if edges.size > 1 else bins)
    peak = counts.max() or 1
    lines = ["words per document (quantile bins):"]
    for lo, hi, count in zip(edges[:-1], edges[1:], counts):
        lines.append(f"  {int(lo):>9,}-{int(hi):<9,} {'#' * int(width * count / peak):<{width}} {count:,}")
    return "\n".join(lines)


def _find_row(files: list[str], show: str) -> dict:
    """Row ``show`` (a row number across the files, or an id) as a dict; KeyError if there is none."""
    index = int(show) if show.isdigit() else None
    total = 0
    for f in files:
        table = pq.read_table(storage.arrow_input(f))
        total += table.num_rows
        if index is not None:
            if index < table.num_rows:
                return table.slice(index, 1).to_pylist()[0]
            index -= table.num_rows
        else:
            match = table.filter(pc.equal(table["id"], show))
            if match.num_rows:
                return match.to_pylist()[0]
    raise KeyError(f"no record {show!r}: {'rows are 0..' + str(total - 1) if show.isdigit() else 'no such id'}")


def _print_row(console: Console, row: dict) -> None:
    if "reason" in row:
        console.rule(f"[bold]reject[/] ({row['source']}, id {row['id']})")
        console.print(f"reason: {row['reason']}   detail: {row['detail'] or '-'}   key: {row['key'] or '-'}", markup=False, highlight=False)
        return
    meta = {k: v for k, v in (row["meta"] or {}).items() if v is not None}
    console.rule(f"[bold]{row['title']}[/] ({row['source']}, id {row['id']})")
    console.print(f"url: {row['url'] or '-'}   meta: {meta}")
    text = row["text"]
    console.print(text[:4000], markup=False, highlight=False)
    if len(text) > 4000:
        console.print(f"[dim]... {len(text) - 4000:,} more characters[/]")
