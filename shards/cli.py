"""``shards`` commands: inspect a shard directory, verify it before training (exit code 1 on a problem, 2 on a path that is not there).

Both only read: the histogram PNG is written only where ``--plot PATH`` says, never into the shards.
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.console import Console

from corpusforge.core import storage
from corpusforge.core.layout import Layout
from corpusforge.shards.format import MANIFEST_NAME
from corpusforge.shards.inspect import SAMPLE, render_example, render_summary, summarize, write_length_histogram
from corpusforge.shards.reader import ShardError
from corpusforge.shards.verify import verify, what_verify_checks

app = typer.Typer(help="Inspect and verify Arrow shard directories.", no_args_is_help=True, rich_markup_mode=None)
VOCAB_HELP = "vocabulary directory or tokenizer.json, when the shards were moved without the one their manifest names"
LOAD_HINT = 'load with datasets: load_dataset("arrow", data_dir="{directory}", split="train")'


def exit_if_missing(directory: str) -> None:
    """A mistyped path is a usage error: one ``error:`` line and exit 2, as every corpusforge command does."""
    if storage.is_dir(directory) or storage.is_file(storage.join(directory, MANIFEST_NAME)):
        return
    typer.echo(f"error: {directory}: {'not a directory' if storage.exists(directory) else 'no such directory'}", err=True)
    raise typer.Exit(2)


def not_shards_hint(directory: str) -> str | None:
    """What ``directory`` is instead, with the command that reads it, when it holds no shard manifest."""
    if storage.is_file(storage.join(directory, MANIFEST_NAME)):
        return None
    layout = Layout.at(directory)
    if layout.is_build_folder():
        shard_dirs = [folder for folder in storage.listdir(layout.shards_root) if storage.is_file(storage.join(folder, MANIFEST_NAME))]
        found = f"; its shards: {', '.join(shard_dirs)}" if shard_dirs else ""
        return f"{directory} is a build output folder: for its documents use `corpusforge docs inspect {directory}`{found}"
    if any(name.startswith("part-") and name.endswith(".parquet") for name in map(storage.name, storage.listdir(directory))):
        return f"{directory} holds Parquet documents or rejects, not shards: use `corpusforge docs inspect {directory}`"
    return None


@app.command("inspect")
def inspect_command(
    directory: Annotated[str, typer.Argument(help="shard directory (holds manifest.json)")],
    show: Annotated[Optional[int], typer.Option("--show", help="print example N decoded, masks highlighted")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable summary on stdout")] = False,
    sample: Annotated[int, typer.Option(help="examples read for the statistics")] = SAMPLE,
    plot: Annotated[Optional[str], typer.Option("--plot", help="write the length histogram as a PNG here")] = None,
    vocab: Annotated[Optional[str], typer.Option("--vocab", help=VOCAB_HELP)] = None,
) -> None:
    """Summary figures, the sequence-length histogram and decoded examples; changes nothing on disk unless --plot."""
    console = Console(highlight=False, soft_wrap=True)
    exit_if_missing(directory)
    hint = not_shards_hint(directory)
    if hint:
        typer.echo(f"error: {hint}", err=True)
        raise typer.Exit(1)
    try:
        example = render_example(directory, show, vocab) if show is not None else []  # fails before any output
        summary = summarize(directory, sample=sample)
        if plot is not None:
            title = f"{summary['task'].upper()} sequence lengths, {summary['sampled_examples']:,} examples ({storage.name(directory)})"
            summary["histogram_png"] = write_length_histogram(plot, summary["length_histogram"], title)
        if as_json:
            typer.echo(json.dumps(summary, indent=2))
        else:
            render_summary(summary, console)
            console.print(LOAD_HINT.format(directory=directory))
            if plot is not None:
                console.print(f"histogram written to {plot}")
        for line in example:
            console.print(line)
    except (ShardError, IndexError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@app.command("verify")
def verify_command(
    directory: Annotated[str, typer.Argument(help="shard directory (holds manifest.json)")],
    vocab: Annotated[Optional[str], typer.Option("--vocab", help=VOCAB_HELP)] = None,
) -> None:
    """Check every checksum, schema, count and file; print each problem and exit 1 if there is any."""
    exit_if_missing(directory)
    hint = not_shards_hint(directory)
    problems = [hint] if hint else verify(directory, progress=True, vocab=vocab)
    for problem in problems:
        typer.echo(problem)
    if problems:
        typer.echo(f"{len(problems)} problem(s) in {directory}", err=True)
        raise typer.Exit(1)
    typer.echo(f"checked {what_verify_checks(directory, vocab=vocab)}")
    typer.echo(f"{directory}: OK")
