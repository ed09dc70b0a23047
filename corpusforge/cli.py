"""The ``corpusforge`` command line: build, config, docs inspect, shards inspect/verify, train, export, finetune, generate."""

from __future__ import annotations

import gc
import logging
import re
import tomllib
from pathlib import Path
from typing import NoReturn, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from corpusforge import __version__, progress
from corpusforge.config_reference import explain_error, format_value, keys, reference_markdown
from corpusforge.core import storage
from corpusforge.core.config import Config, load_config
from corpusforge.core.layout import Layout
from corpusforge.corpora.document import InputFormatError
from corpusforge.pipeline import collector
from corpusforge.pipeline.cluster_warmup import warm_runner

# Beam's optional GCP modules announce at import that they are not installed; nothing here uses them.
logging.getLogger().addFilter(lambda record: "apitools not found" not in record.getMessage())
from corpusforge.shards.cli import app as shards_app  # noqa: E402  (after the filter: it imports Beam)
from corpusforge.trainer.cli import export_command, finetune_command, generate_command, train_command  # noqa: E402

# Plain help (no rich markup): "[train]" stays literal and long option help wraps instead of being cut with "…".
PLAIN = {"rich_markup_mode": None, "no_args_is_help": True}
app = typer.Typer(add_completion=False, help=__doc__, **PLAIN)


def console_script() -> None:
    """The console script: ``app``, then an exit that does not walk what the command loaded. Python's exit runs the
    cyclic collector over every object still alive (Beam's modules alone are ~230k): 0.8 s at the end of every
    command that imported Beam, for memory the system takes back whole."""
    try:
        app()
    finally:
        gc.freeze()


docs_app = typer.Typer(help="Look inside written documents and rejects.", **PLAIN)
config_app = typer.Typer(help="The resolved configuration and the key reference.", **PLAIN)
app.add_typer(docs_app, name="docs")
app.add_typer(config_app, name="config")
app.add_typer(shards_app, name="shards")
app.command("train")(train_command)
app.command("export")(export_command)
app.command("finetune")(finetune_command)
app.command("generate")(generate_command)
console = Console()

# Shipped inside the package so a wheel install has it; configs/demo.toml in the checkout links to it.
DEMO_CONFIG = Path(__file__).resolve().parent / "configs" / "demo.toml"
CONFIG_HELP = f"TOML configuration (default: the bundled demo, {DEMO_CONFIG})."
SET_HELP = "Override a key, e.g. --set clean.min_words=50 (repeatable; keys: corpusforge config show)."
_BEAM_STEP = re.compile(r" \[while running '[^\n]*'\]$")  # Beam appends the step to a re-raised error
_WRAPPED_FORMAT_ERROR = re.compile(r"InputFormatError: ([^\n]+)")


def fail(message: str) -> NoReturn:
    """One clear line instead of a traceback for errors a user can fix."""
    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"corpusforge {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Build BERT/GPT pre-training corpora and train small models on them."""


def resolve_config(path: Optional[Path], overrides: list[str]) -> Config:
    """The configuration ``build`` would run, or one line saying which flag or file is wrong. Light: the
    stage names are checked by ``check_stages``, which imports Beam."""
    path = path or DEMO_CONFIG
    try:
        return load_config(path, overrides)
    except ValidationError as error:
        fail(explain_error(error, overrides, path))
    except tomllib.TOMLDecodeError as error:
        fail(f"{path}: not valid TOML ({error})")
    except ValueError as error:  # a --set without "="
        fail(str(error))
    except OSError as error:
        fail(f"{path}: {error.strerror or type(error).__name__}")


def check_stages(cfg: Config) -> None:
    """One line for a stage ``run.stages`` names that no declaration knows (the declarations import Beam)."""
    from corpusforge.stages import check_stage_names

    try:
        check_stage_names(cfg)
    except ValueError as error:
        fail(str(error))


def source_inputs(cfg: Config) -> list[tuple[str, str]]:
    """(source, path) for every input path that the sources ``run.stages`` names read; webtext's capture
    folder only offline (online the stage makes it)."""
    offline_captures = [cfg.webtext.warc_dir] if cfg.webtext.offline and cfg.webtext.warc_dir else []
    paths = {
        "books": cfg.books.paths,
        "wikipedia": [*cfg.wikipedia.paths, *cfg.wikipedia.index_paths],
        "webtext": [*cfg.webtext.dumps, *offline_captures],
        "records": cfg.records.paths,
    }
    return [(source, path) for source, listed in paths.items() if source in cfg.run.stages for path in listed]


def check_inputs(cfg: Config) -> None:
    """One line for the first input path that is missing or an empty folder: before Beam is imported and
    before the output folder is made, so a typo costs a second and leaves nothing behind."""
    for source, path in source_inputs(cfg):
        if not storage.exists(path):
            fail(f"{source} path does not exist: {path}")
        if storage.is_dir(path) and not storage.listdir(path):
            fail(f"{source} folder is empty: {path}")
    if cfg.clean.decontaminate:
        from corpusforge.corpora.decontaminate import Decontaminator

        for path in cfg.clean.decontaminate:
            if not storage.is_file(path):
                fail(f"clean.decontaminate file does not exist: {path}")
        try:  # read here once, so a bad file is one line now rather than a traceback in every worker
            Decontaminator.from_files(cfg.clean.decontaminate, cfg.clean.decontaminate_ngram, cfg.clean.decontaminate_min_words)
        except ValueError as error:
            fail(f"clean.decontaminate: {error}")


@app.command()
def build(
    config: Optional[Path] = typer.Argument(None, help=CONFIG_HELP, show_default=False),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP, show_default=False),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show INFO lines of every library (Beam's own included)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Errors, and at the end where the outputs are: no stage lines and no summary."),
    force: bool = typer.Option(False, "--force", help="Run every requested stage, even those whose earlier outputs still match."),
) -> None:
    """Run the stages the configuration asks for, then print a summary and write OUT/report.html.

    A stage whose outputs in OUT were made from the same configuration and inputs is reused, not run
    again (OUT/.stages/ records what each was made from); --force runs them all.
    """
    progress.configure_logging(-1 if quiet else int(verbose))
    cfg = resolve_config(config, set_)
    check_inputs(cfg)
    warm_runner(cfg.run)  # before Beam is imported here (next): a cluster's processes import it alongside this one
    with collector.paused():  # Beam's import, 0.4 CPU-s less
        check_stages(cfg)
        from corpusforge.build import run_build
        from corpusforge.report import print_build_summary

    try:
        with progress.display(console, live=console.is_terminal and not quiet):
            result = run_build(cfg, force=force)
    except Exception as error:
        message = user_error(error)
        if message is None:
            raise
        fail(message)
    if quiet:
        print_outputs(result.output_dir)
    else:
        print_build_summary(console, result)


def print_outputs(output_dir: str) -> None:
    """All that -q prints of a build that worked: where its outputs are."""
    layout = Layout.at(output_dir)
    typer.echo(f"outputs in {layout.out}")
    if storage.is_file(layout.report):
        typer.echo(f"report: {layout.report}")


@config_app.command("show")
def config_show(
    config: Optional[Path] = typer.Argument(None, help=CONFIG_HELP, show_default=False),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP, show_default=False),
) -> None:
    """Print the resolved configuration as TOML: every key, its value and what it means."""
    cfg = resolve_config(config, set_)
    check_stages(cfg)
    section = None
    for key in keys(cfg):
        head, leaf = key.name.rsplit(".", 1)
        if head != section:
            typer.echo(("\n" if section else "") + f"[{head}]")
            section = head
        line = f"{leaf} = {format_value(key.value)}"
        if key.value is None:
            line = f"# {leaf} unset"  # TOML has no null: an unset key is left out
        typer.echo(f"{line:<40} # {key.meaning}")


@config_app.command("reference")
def config_reference() -> None:
    """Print the key reference as Markdown (docs/config.md is this output)."""
    typer.echo(reference_markdown(), nl=False)


def user_error(error: BaseException) -> str | None:
    """The one line for an error a user can fix (a missing path, a bad value, a source file in the
    wrong format), however a Beam runner wrapped it; None for anything else (a bug: full traceback)."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, InputFormatError):
            return _BEAM_STEP.sub("", str(cause).splitlines()[0])
        cause = cause.__cause__ or cause.__context__
    wrapped = _WRAPPED_FORMAT_ERROR.search(str(error))  # a worker process's error arrives as text
    if wrapped:
        return _BEAM_STEP.sub("", wrapped.group(1))
    if isinstance(error, (FileNotFoundError, NotADirectoryError, ValueError)):
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    return None


@docs_app.command("inspect")
def docs_inspect(
    path: str = typer.Argument(
        ..., help="A build output directory, its documents/ or rejects/ folder, or one Parquet file (a path or URI)."
    ),
    show: Optional[str] = typer.Option(None, "--show", help="Print one record: its row number or id."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable summary."),
) -> None:
    """Counts per source, length statistics, reject reasons, and one document (or reject)."""
    from corpusforge.report import inspect_documents

    try:
        inspect_documents(console, path, show=show, as_json=json_out)
    except (FileNotFoundError, ValueError, KeyError) as error:
        fail(str(error).splitlines()[0].strip("'\""))
