"""``shards`` commands: inspect a shard directory, verify it before training (exit code 1 on a problem)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from corpusforge.shards.inspect import SAMPLE, render_summary, show_example, summarize, write_length_histogram
from corpusforge.shards.reader import ShardError
from corpusforge.shards.verify import verify

app = typer.Typer(help="Inspect and verify Arrow shard directories.", no_args_is_help=True)


@app.command("inspect")
def inspect_command(
    directory: Annotated[Path, typer.Argument(help="shard directory (holds manifest.json)")],
    show: Annotated[Optional[int], typer.Option("--show", help="print example N decoded, masks highlighted")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable summary on stdout")] = False,
    sample: Annotated[int, typer.Option(help="examples read for the statistics")] = SAMPLE,
) -> None:
    """Summary figures, sequence-length histogram (also written as length_histogram.png), examples."""
    console = Console(highlight=False, soft_wrap=True)
    try:
        summary = summarize(directory, sample=sample)
        summary["histogram_png"] = str(write_length_histogram(directory, summary["length_histogram"]))
        if as_json:
            typer.echo(json.dumps(summary, indent=2))
        else:
            render_summary(summary, console)
            console.print(f"histogram written to {summary['histogram_png']}")
        if show is not None:
            show_example(directory, show, console)
    except (ShardError, IndexError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@app.command("verify")
def verify_command(directory: Annotated[Path, typer.Argument(help="shard directory (holds manifest.json)")]) -> None:
    """Check every checksum, schema, count and file; print each problem and exit 1 if there is any."""
    problems = verify(directory, progress=True)
    for problem in problems:
        typer.echo(problem)
    if problems:
        typer.echo(f"{len(problems)} problem(s) in {directory}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{directory}: OK")
