"""The ``corpusforge`` command line: build, docs inspect, shards inspect/verify, train, export, finetune, generate."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import typer
from pydantic import ValidationError
from rich.console import Console

from corpusforge.config import load_config

# Beam's optional GCP modules announce at import that they are not installed; nothing here uses them.
logging.getLogger().addFilter(lambda record: "apitools not found" not in record.getMessage())
from corpusforge.shards.cli import app as shards_app
from corpusforge.trainer.cli import export_command, finetune_command, generate_command, train_command

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
docs_app = typer.Typer(no_args_is_help=True, help="Look inside written documents.")
app.add_typer(docs_app, name="docs")
app.add_typer(shards_app, name="shards")
app.command("train")(train_command)
app.command("export")(export_command)
app.command("finetune")(finetune_command)
app.command("generate")(generate_command)
console = Console()

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.toml"


def fail(message: str) -> None:
    """One clear line instead of a traceback for errors a user can fix."""
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code=2)


@app.command()
def build(
    config: Optional[Path] = typer.Argument(None, help="TOML configuration (default: the bundled demo)."),
    set_: list[str] = typer.Option([], "--set", help="Override a key, e.g. --set clean.min_words=50"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show Beam's own log lines."),
) -> None:
    """Run the stages the configuration asks for and print a summary."""
    from corpusforge.build import run_build
    from corpusforge.report import print_build_summary

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    path = config or DEMO_CONFIG
    try:
        cfg = load_config(path, set_)
    except ValidationError as error:
        fail(f"{path}: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))
    except (OSError, ValueError) as error:
        fail(f"{path}: {str(error).splitlines()[0] if str(error) else type(error).__name__}")
    try:
        with console.status(f"building {', '.join(cfg.run.stages)} with {cfg.run.runner} ..."):
            result = run_build(cfg)
    except (FileNotFoundError, NotADirectoryError, ValueError) as error:
        fail(str(error).splitlines()[0])
    print_build_summary(console, result)


@docs_app.command("inspect")
def docs_inspect(
    path: Path = typer.Argument(..., help="A build output directory, its documents/ folder or one Parquet file."),
    show: Optional[str] = typer.Option(None, "--show", help="Print one document: its row number or id."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable summary."),
) -> None:
    """Counts per source, length statistics, reject reasons, and one document."""
    from corpusforge.report import inspect_documents

    try:
        inspect_documents(console, path, show=show, as_json=json_out)
    except (FileNotFoundError, ValueError, KeyError) as error:
        fail(str(error).splitlines()[0])
