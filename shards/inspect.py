"""Summarise a shard directory (what a person checks before training on it) and show single examples.

Statistics come from the first ``sample`` examples in file order (200k by default) so that a
multi-gigabyte directory is summarised in seconds; the summary says when it sampled. A directory
behind a URI is read through the shard cache (``shards.cache``), so its shards are checked on download.
"""

from __future__ import annotations

import io
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text
from tokenizers import Tokenizer

from corpusforge.core import storage
from corpusforge.shards.cache import open_cached
from corpusforge.shards.reader import Manifest, ShardError, column_view, read_manifest

SAMPLE = 200_000
HISTOGRAM_BINS = 16


CHUNK = 8_192  # examples summed at a time: the summary's memory is one chunk's columns, whatever the sample


def summarize(directory: storage.PathLike, *, sample: int = SAMPLE) -> dict[str, Any]:
    manifest = read_manifest(directory)
    width = manifest.arrow_schema().field("input_ids").type.list_size
    edges = np.histogram_bin_edges([], bins=HISTOGRAM_BINS, range=(0, width))
    sums: Counter[str] = Counter()
    counts = np.zeros(HISTOGRAM_BINS, dtype=np.int64)
    for columns in _sampled_chunks(manifest, sample):
        lengths = columns["length"].astype(np.int64)
        counts += np.histogram(lengths, bins=edges)[0]
        sums.update(examples=len(lengths), real=int(lengths.sum()), partial=int((lengths < width).sum()))
        if manifest.task == "bert":
            sums.update(_bert_counts(columns, manifest.vocab.special_ids["mask"]))
    examples, real = sums["examples"], sums["real"]
    summary: dict[str, Any] = {
        "task": manifest.task,
        "shards": len(manifest.shards),
        "examples": manifest.examples,
        "tokens": manifest.tokens,
        "sampled_examples": examples,
        "sampled": examples < manifest.examples,
        "sequence_length": width,
        "mean_length": _ratio(real, examples),
        "padding_fraction": _ratio(examples * width - real, examples * width),
        "length_histogram": {"edges": edges.tolist(), "counts": counts.tolist()},
        "vocab": manifest.vocab.model_dump(include={"kind", "path", "size", "sha256"}),
    }
    if manifest.task == "bert":
        predictions = sums["predictions"]
        summary.update(
            {
                "predictions": predictions,
                "predictions_per_example": _ratio(predictions, examples),
                "masked_fraction": _ratio(predictions, real),
                "mask_token_fraction": _ratio(sums["mask"], predictions),
                "random_token_fraction": _ratio(sums["random"], predictions),
                "unchanged_fraction": _ratio(sums["unchanged"], predictions),
                "nsp_random_next_fraction": _ratio(sums["random_next"], examples),
            }
        )
    else:
        summary.update({"windows": manifest.examples, "partial_windows": sums["partial"]})
    return summary


def _sampled_chunks(manifest: Manifest, sample: int) -> Iterator[dict[str, np.ndarray]]:
    """The first ``sample`` examples' columns, ``CHUNK`` examples at a time (views into each shard)."""
    remaining = sample
    for entry in manifest.shards:
        if remaining <= 0:
            return
        table = open_cached(manifest, entry).slice(0, remaining)
        columns = {name: column_view(table, name) for name in table.column_names}
        for first in range(0, table.num_rows, CHUNK):
            yield {name: column[first : first + CHUNK] for name, column in columns.items()}
        remaining -= table.num_rows
        del table, columns  # one shard open at a time


def _bert_counts(columns: dict[str, np.ndarray], mask_id: int) -> dict[str, int]:
    """Masking counts as create_pretraining_data.py intends: 80% [MASK], 10% random, 10% unchanged."""
    real = columns["masked_lm_weights"] > 0
    positions = columns["masked_lm_positions"].astype(np.int64)
    shown = np.take_along_axis(columns["input_ids"], positions, axis=1)[real]
    original = columns["masked_lm_ids"][real]
    return {
        "predictions": int(real.sum()),
        "mask": int((shown == mask_id).sum()),
        "random": int(((shown != mask_id) & (shown != original)).sum()),
        "unchanged": int(((shown != mask_id) & (shown == original)).sum()),
        "random_next": int((columns["next_sentence_label"] == 1).sum()),
    }


def _ratio(part: Any, whole: Any) -> float:
    return float(part) / float(whole) if whole else 0.0


def render_summary(summary: dict[str, Any], console: Console) -> None:
    table = Table(title=f"{summary['task'].upper()} shards", show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("shards", f"{summary['shards']:,}"),
        ("examples" if summary["task"] == "bert" else "windows", f"{summary['examples']:,}"),
        ("tokens", f"{summary['tokens']:,}"),
    ]
    rows += [
        sequence_row(summary),
        ("mean length", f"{summary['mean_length']:.1f}"),
        ("padding", f"{summary['padding_fraction']:.2%}"),
    ]
    if summary["task"] == "bert":
        rows += [
            ("predictions / example", f"{summary['predictions_per_example']:.2f}"),
            ("masked (of real tokens)", f"{summary['masked_fraction']:.2%}"),
            ("  -> [MASK]", f"{summary['mask_token_fraction']:.2%}"),
            ("  -> random token", f"{summary['random_token_fraction']:.2%}"),
            ("  -> unchanged", f"{summary['unchanged_fraction']:.2%}"),
            ("NSP random next", f"{summary['nsp_random_next_fraction']:.2%}"),
        ]
    else:
        rows.append(("partial windows", f"{summary['partial_windows']:,}"))
    vocab = summary["vocab"]
    rows.append(("vocabulary", f"{vocab['kind']} {vocab['size']:,} sha256 {vocab['sha256'][:16] or '-'}"))
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    if summary["sampled"]:
        console.print(f"statistics from the first {summary['sampled_examples']:,} of {summary['examples']:,} examples (sampled)")
    console.print(length_histogram_text(summary["length_histogram"]))


def sequence_row(summary: dict[str, Any]) -> tuple[str, str]:
    """The examples' width: a GPT window holds seq_len + 1 tokens, so inputs and their shifted targets come from one window."""
    width = summary["sequence_length"]
    if summary["task"] == "gpt":
        return "window", f"{width:,} tokens ({width - 1:,} inputs + 1 shifted target)"
    return "sequence length", f"{width:,}"


def length_histogram_text(histogram: dict[str, list], width: int = 40) -> str:
    counts, edges = histogram["counts"], histogram["edges"]
    peak = max(counts) or 1
    lines = ["sequence lengths"]
    for count, low, high in zip(counts, edges, edges[1:]):
        lines.append(f"{low:6.0f}-{high:<6.0f} {'#' * round(width * count / peak):<{width}} {count:,}")
    return "\n".join(lines)


def length_histogram_figure(histogram: dict[str, list], title: str) -> Any:
    """The length histogram as a matplotlib figure; counts on a log axis so a thin tail still shows."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.5))
    axes.stairs(histogram["counts"], histogram["edges"], fill=True)
    axes.set(title=title, xlabel="sequence length (real tokens)", ylabel="examples (log)", yscale="log")
    figure.tight_layout()
    return figure


def write_length_histogram(path: storage.PathLike, histogram: dict[str, list], title: str) -> str:
    """Save the histogram as a PNG at ``path``, written atomically (never into the shard directory by default)."""
    from matplotlib import pyplot as plt

    figure = length_histogram_figure(histogram, title)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    storage.write_bytes(path, buffer.getvalue())
    return os.fspath(path)


def render_example(directory: storage.PathLike, index: int, vocab: storage.PathLike | None = None) -> list[Text]:
    """Example ``index`` (file order) decoded, masked positions highlighted with their originals, as lines to print.

    Built whole before anything is printed, so a bad index or a missing vocabulary is one error line.
    ``vocab`` replaces the manifest's vocabulary path (shards moved without their vocabulary).
    """
    manifest = read_manifest(directory, vocab=vocab)
    if not 0 <= index < manifest.examples:
        raise IndexError(f"example {index} out of range: the directory holds {manifest.examples}")
    offset = 0
    for entry in manifest.shards:
        if index < offset + entry.examples:
            row = open_cached(manifest, entry).slice(index - offset, 1).to_pylist()[0]
            break
        offset += entry.examples
    if not storage.is_file(manifest.tokenizer_path()):
        raise ShardError(f"{manifest.tokenizer_path()}: vocabulary not found (shards moved without it? pass --vocab DIR)")
    tokenizer = Tokenizer.from_str(storage.read_text(manifest.tokenizer_path()))
    lines = [Text(f"example {index} ({entry.file}, row {index - offset})")]
    ids = row["input_ids"][: row["length"]]
    if manifest.task == "gpt":
        partial = " (partial window)" if row["length"] < len(row["input_ids"]) else ""
        return lines + [Text(tokenizer.decode(ids, skip_special_tokens=False)), Text(f"length {row['length']}{partial}")]
    originals = {p: t for p, t, w in zip(row["masked_lm_positions"], row["masked_lm_ids"], row["masked_lm_weights"]) if w > 0}
    text = Text()
    for position, token_id in enumerate(ids):
        token = tokenizer.id_to_token(token_id) or f"<{token_id}>"
        if position in originals:
            text.append(token, style="bold red")
            text.append(f"({tokenizer.id_to_token(originals[position])})", style="green")
        else:
            text.append(token, style="cyan" if position < row["a_length"] else "")
        text.append(" ")
    nsp = "random next" if row["next_sentence_label"] == 1 else "actual next"
    return lines + [text, Text(f"length {row['length']}, segment A {row['a_length']} tokens, {len(originals)} predictions, NSP: {nsp}")]
