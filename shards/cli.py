"""``shards`` commands: inspect a shard directory, verify it before training (exit code 1 on a problem).

Both only read: the histogram PNG is written only where ``--plot PATH`` says, never into the shards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from corpusforge.shards.format import MANIFEST_NAME
from corpusforge.shards.inspect import SAMPLE, render_example, render_summary, summarize, write_length_histogram
from corpusforge.shards.reader import ShardError
from corpusforge.shards.verify import verify

app = typer.Typer(help="Inspect and verify Arrow shard directories.", no_args_is_help=True, rich_markup_mode=None)
VOCAB_HELP = "vocabulary directory or tokenizer.json, when the shards were moved without the one their manifest names"
LOAD_HINT = 'load with datasets: load_dataset("arrow", data_dir="{directory}", split="train")'


def not_shards_hint(directory: Path) -> str | None:
    """What ``directory`` is instead, with the command that reads it, when it holds no shard manifest."""
    if (directory / MANIFEST_NAME).is_file():
        return None
    if (directory / "documents").is_dir() or (directory / "shards").is_dir():
        shard_dirs = sorted(str(p.parent) for p in directory.glob(f"shards/*/{MANIFEST_NAME}"))
        found = f"; its shards: {', '.join(shard_dirs)}" if shard_dirs else ""
        return f"{directory} is a build output folder: for its documents use `corpusforge docs inspect {directory}`{found}"
    if any(directory.glob("part-*.parquet")):
        return f"{directory} holds Parquet documents or rejects, not shards: use `corpusforge docs inspect {directory}`"
    return None


@app.command("inspect")
def inspect_command(
    directory: Annotated[Path, typer.Argument(help="shard directory (holds manifest.json)")],
    show: Annotated[Optional[int], typer.Option("--show", help="print example N decoded, masks highlighted")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable summary on stdout")] = False,
    sample: Annotated[int, typer.Option(help="examples read for the statistics")] = SAMPLE,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="write the length histogram as a PNG here")] = None,
    vocab: Annotated[Optional[Path], typer.Option("--vocab", help=VOCAB_HELP)] = None,
) -> None:
    """Summary figures, the sequence-length histogram and decoded examples; changes nothing on disk unless --plot."""
    console = Console(highlight=False, soft_wrap=True)
    hint = not_shards_hint(directory)
    if hint:
        typer.echo(f"error: {hint}", err=True)
        raise typer.Exit(1)
    try:
        example = render_example(directory, show, vocab) if show is not None else []  # fails before any output
        summary = summarize(directory, sample=sample)
        if plot is not None:
            title = f"{summary['task'].upper()} sequence lengths, {summary['sampled_examples']:,} examples ({directory.name})"
            summary["histogram_png"] = str(write_length_histogram(plot, summary["length_histogram"], title))
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
    directory: Annotated[Path, typer.Argument(help="shard directory (holds manifest.json)")],
    vocab: Annotated[Optional[Path], typer.Option("--vocab", help=VOCAB_HELP)] = None,
) -> None:
    """Check every checksum, schema, count and file; print each problem and exit 1 if there is any."""
    hint = not_shards_hint(directory)
    problems = [hint] if hint else verify(directory, progress=True, vocab=vocab)
    for problem in problems:
        typer.echo(problem)
    if problems:
        typer.echo(f"{len(problems)} problem(s) in {directory}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{directory}: OK")
