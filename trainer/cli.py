"""``train`` and ``export`` commands. Multi-GPU: ``torchrun --nproc-per-node 8 $(which corpusforge) train ...``."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import ValidationError

from corpusforge.config import TrainConfig, load_config
from corpusforge.shards.reader import ShardError, read_manifest

# rich_markup_mode=None: plain help, so "[train]" is not eaten as markup and long help wraps instead of "…"
app = typer.Typer(help="Pre-train BERT/GPT models on shards and export them.", no_args_is_help=True, rich_markup_mode=None)
# without --model (and without train.model in the configuration) the shards' task picks the model
DEFAULT_MODEL = {"bert": TrainConfig.model_fields["model"].default, "gpt": "gpt-small"}


def _default(key: str) -> str:
    """Help suffix with the value an option falls back to: the [train] section's, whose default is this."""
    value = TrainConfig.model_fields[key].default
    return f" [default: train.{key} = {'unset' if value is None else value}]"


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@app.command("train")
def train_command(
    shards: Annotated[Path, typer.Option("--shards", help="training shard directory (holds manifest.json)")],
    out: Annotated[Optional[Path], typer.Option("--out", help="run directory (default: <run.output_dir>/train/<model>)")] = None,
    model: Annotated[Optional[str], typer.Option(help="bert-tiny|mini|small|medium|base, gpt-tiny|small, gpt2-124M [default: train.model when set, else "
                                                      f"{DEFAULT_MODEL['bert']} for BERT shards, {DEFAULT_MODEL['gpt']} for GPT shards]")] = None,
    steps: Annotated[Optional[int], typer.Option(help="optimizer steps" + _default("steps"))] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="examples per micro-batch per process" + _default("batch_size"))] = None,
    global_batch_size: Annotated[Optional[int], typer.Option(help="examples per optimizer step (gradient accumulation); unset: batch size x processes")] = None,
    lr: Annotated[Optional[float], typer.Option(help="peak learning rate [default: the family's recipe]")] = None,
    warmup_steps: Annotated[Optional[int], typer.Option(help="linear warm-up steps [default: 1% of the steps]")] = None,
    eval_shards: Annotated[Optional[Path], typer.Option("--eval-shards", help="held-out shard directory evaluated at the end [default: the last train.holdout_examples of --shards]")] = None,
    holdout_examples: Annotated[Optional[int], typer.Option(help="without --eval-shards: hold out the last min(this, N // 10) examples; 0: none" + _default("holdout_examples"))] = None,
    resume: Annotated[Optional[Path], typer.Option(help="checkpoint directory, or a run directory (its newest checkpoint)")] = None,
    compile: Annotated[Optional[bool], typer.Option("--compile/--no-compile", help="torch.compile on CUDA" + _default("compile"))] = None,
    device: Annotated[Optional[str], typer.Option(help="cuda or cpu [default: cuda when available]")] = None,
    vocab: Annotated[Optional[Path], typer.Option("--vocab", help="vocabulary directory or tokenizer.json, when the shards were moved without the one their manifest names")] = None,
    config: Annotated[Optional[Path], typer.Option("--config", help="TOML configuration; its [train] section is the base")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="override a key, e.g. --set train.grad_clip=0.5", show_default=False)] = [],
) -> None:
    """Pre-train a model; logs, checkpoints, curves.png and eval.json (held-out figures) go to the run directory."""
    from corpusforge.trainer.loop import train
    from corpusforge.trainer.sizes import get_size

    try:
        cfg = load_config(config, set_)
        task = read_manifest(shards).task
        model = model or (cfg.train.model if "model" in cfg.train.model_fields_set else DEFAULT_MODEL[task])
        if get_size(model).family != task:
            fail(f"--model {model} is a {get_size(model).family.upper()} model but {shards} holds {task.upper()} shards (e.g. --model {DEFAULT_MODEL[task]})")
        given = {
            "model": model,
            "steps": steps,
            "batch_size": batch_size,
            "global_batch_size": global_batch_size,
            "lr": lr,
            "warmup_steps": warmup_steps,
            "compile": compile,
            "holdout_examples": holdout_examples,
            "vocab": vocab,
        }
        values = {**cfg.train.model_dump(), **{k: v for k, v in given.items() if v is not None}}
        train_cfg = TrainConfig.model_validate({**values, "task": get_size(values["model"]).family})
        run_dir = out or cfg.run.output_dir / "train" / train_cfg.model
        train(train_cfg, shards, run_dir, eval_shards=eval_shards, resume=resume, device=device)
    except ValidationError as error:
        fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))
    except (ShardError, ValueError, FileNotFoundError) as error:
        fail(str(error))
    typer.echo(f"run written to {run_dir}")


@app.command("export")
def export_command(
    checkpoint: Annotated[Path, typer.Argument(help="checkpoint directory, or a run directory (its newest checkpoint)")],
    out: Annotated[Path, typer.Argument(help="output directory")],
    format: Annotated[str, typer.Option("--format", help="hf: a transformers directory")] = "hf",
) -> None:
    """Write a checkpoint as a transformers model directory with its tokenizer."""
    from corpusforge.trainer.export import export_hf

    if format != "hf":
        fail(f"unknown export format {format!r} (supported: hf)")
    try:
        path = export_hf(checkpoint, out)
    except (ValueError, FileNotFoundError) as error:
        fail(str(error))
    typer.echo(f"exported to {path}")
