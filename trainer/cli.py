"""``train``, ``export``, ``finetune`` and ``generate`` commands. Multi-GPU: ``torchrun --nproc-per-node 8 $(which corpusforge) train ...``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from pydantic import ValidationError

from corpusforge.core import storage
from corpusforge.core.config import PRECISION_HELP, FinetuneConfig, TrainConfig, load_config
from corpusforge.core.layout import Layout
from corpusforge.shards.cache import DEFAULT_DIR, DEFAULT_GB, DIR_ENV, GB_ENV, using
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
    shards: Annotated[str, typer.Option("--shards", help="training shard directory (holds manifest.json), local or a URI (s3://...)")],
    out: Annotated[Optional[str], typer.Option("--out", help="run directory (default: <run.output_dir>/train/<model>)")] = None,
    model: Annotated[
        Optional[str],
        typer.Option(
            help="bert-tiny|mini|small|medium|base, gpt-tiny|small, gpt2-124M [default: train.model when set, else "
            f"{DEFAULT_MODEL['bert']} for BERT shards, {DEFAULT_MODEL['gpt']} for GPT shards]"
        ),
    ] = None,
    steps: Annotated[Optional[int], typer.Option(help="optimizer steps" + _default("steps"))] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="examples per micro-batch per process" + _default("batch_size"))] = None,
    global_batch_size: Annotated[
        Optional[int], typer.Option(help="examples per optimizer step (gradient accumulation); unset: batch size x processes")
    ] = None,
    lr: Annotated[Optional[float], typer.Option(help="peak learning rate [default: the family's recipe]")] = None,
    warmup_steps: Annotated[Optional[int], typer.Option(help="linear warm-up steps [default: 1% of the steps]")] = None,
    eval_shards: Annotated[
        Optional[str],
        typer.Option(
            "--eval-shards", help="held-out shard directory evaluated at the end [default: the last train.holdout_examples of --shards]"
        ),
    ] = None,
    holdout_examples: Annotated[
        Optional[int],
        typer.Option(help="without --eval-shards: hold out the last min(this, N // 10) examples; 0: none" + _default("holdout_examples")),
    ] = None,
    eval_every: Annotated[
        Optional[int], typer.Option("--eval-every", help="evaluate the whole held-out set every N steps" + _default("eval_every"))
    ] = None,
    resume: Annotated[Optional[str], typer.Option(help="checkpoint directory, or a run directory (its newest checkpoint)")] = None,
    compile: Annotated[Optional[bool], typer.Option("--compile/--no-compile", help="torch.compile on CUDA" + _default("compile"))] = None,
    device: Annotated[Optional[str], typer.Option(help="cuda or cpu [default: cuda when available]")] = None,
    vocab: Annotated[
        Optional[str],
        typer.Option(
            "--vocab", help="vocabulary directory or tokenizer.json, when the shards were moved without the one their manifest names"
        ),
    ] = None,
    cache_dir: Annotated[
        Optional[str],
        typer.Option("--cache-dir", help=f"local cache of shards read from a URI [default: ${DIR_ENV}, else {DEFAULT_DIR}]"),
    ] = None,
    cache_gb: Annotated[
        Optional[float],
        typer.Option(
            "--cache-gb",
            help=f"size limit of the shard cache, least recently used shards go first [default: ${GB_ENV}, else {DEFAULT_GB:g}]",
        ),
    ] = None,
    config: Annotated[Optional[Path], typer.Option("--config", help="TOML configuration; its [train] section is the base")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="override a key, e.g. --set train.grad_clip=0.5", show_default=False)] = [],
) -> None:
    """Pre-train a model; logs, checkpoints, curves.png and eval.json (held-out figures) go to the run directory.

    --shards, --eval-shards, --out and --resume may be URIs: shards are streamed through a local cache
    (checked against the manifest's sha256 on download, reused by later runs), run files are written there."""
    from corpusforge.trainer.loop import train
    from corpusforge.trainer.sizes import get_size

    try:
        cfg = load_config(config, set_)
        task = read_manifest(shards).task
        model = model or (cfg.train.model if "model" in cfg.train.model_fields_set else DEFAULT_MODEL[task])
        if get_size(model).family != task:
            fail(
                f"--model {model} is a {get_size(model).family.upper()} model but {shards} holds {task.upper()} shards (e.g. --model {DEFAULT_MODEL[task]})"
            )
        given = {
            "model": model,
            "steps": steps,
            "batch_size": batch_size,
            "global_batch_size": global_batch_size,
            "lr": lr,
            "warmup_steps": warmup_steps,
            "compile": compile,
            "holdout_examples": holdout_examples,
            "eval_every": eval_every,
            "vocab": vocab,
        }
        values = {**cfg.train.model_dump(), **{k: v for k, v in given.items() if v is not None}}
        train_cfg = TrainConfig.model_validate({**values, "task": get_size(values["model"]).family})
        run_dir = out or Layout.at(cfg.run.output_dir).train(train_cfg.model)
        with using(cache_dir, cache_gb):
            train(train_cfg, shards, run_dir, eval_shards=eval_shards, resume=resume, device=device)
    except ValidationError as error:
        fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))
    except (ShardError, ValueError, FileNotFoundError) as error:
        fail(str(error))
    except KeyboardInterrupt as error:  # the loop's message names the checkpoint it wrote; a second signal writes none
        typer.echo(f"interrupted: {error}" if str(error) else "interrupted before a checkpoint was written", err=True)
        raise typer.Exit(130)
    typer.echo(f"run written to {run_dir}")


@app.command("export")
def export_command(
    checkpoint: Annotated[str, typer.Argument(help="checkpoint directory, or a run directory (its newest checkpoint)")],
    out: Annotated[str, typer.Argument(help="output directory")],
    format: Annotated[str, typer.Option("--format", help="hf: a transformers directory")] = "hf",
    force: Annotated[bool, typer.Option("--force", help="replace a previous export in OUT (never other files)")] = False,
) -> None:
    """Write a checkpoint as a transformers model directory with its tokenizer."""
    from corpusforge.trainer.export import export_hf

    if format != "hf":
        fail(f"unknown export format {format!r} (supported: hf)")
    try:
        path = export_hf(checkpoint, out, force=force)
    except (ValueError, FileNotFoundError) as error:
        fail(str(error))
    typer.echo(f"exported to {path}")


@app.command("finetune")
def finetune_command(
    checkpoint: Annotated[str, typer.Argument(help="BERT checkpoint directory, or a run directory (its newest checkpoint)")],
    task: Annotated[str, typer.Option("--task", help="sst2 | cola | mrpc")],
    glue_dir: Annotated[str, typer.Option("--glue-dir", help="folder holding SST-2/, CoLA/, MRPC/ in GLUE's original format")],
    out: Annotated[str, typer.Option("--out", help="folder for results.json and dev_curve.png")],
    epochs: Annotated[int, typer.Option(help="passes over the training set")] = FinetuneConfig().epochs,
    lr: Annotated[float, typer.Option(help="peak learning rate (miniatures: 1e-4, 5e-5 or 3e-5)")] = FinetuneConfig().lr,
    batch_size: Annotated[int, typer.Option(help="examples per step")] = FinetuneConfig().batch_size,
    max_seq_length: Annotated[int, typer.Option(help="tokens per example, [CLS] and [SEP]s included")] = FinetuneConfig().max_seq_length,
    max_train_examples: Annotated[Optional[int], typer.Option(help="train on a seeded subset of this many examples")] = None,
    seed: Annotated[int, typer.Option(help="classifier init, data order, dropout and subset")] = 0,
    seeds: Annotated[
        int, typer.Option(min=1, help="runs with seeds SEED..SEED+N-1, each in OUT/seed-<s>/; OUT/results.json: per seed, mean and std")
    ] = 1,
    random_init: Annotated[
        bool, typer.Option("--random-init", help="same architecture and vocabulary, untrained weights (the baseline)")
    ] = False,
    device: Annotated[Optional[str], typer.Option(help="cuda or cpu (default: cuda when available)")] = None,
    precision: Annotated[str, typer.Option(help=f"auto | fp32 | bf16: {PRECISION_HELP}")] = FinetuneConfig().precision,
) -> None:
    """Fine-tune a BERT checkpoint on a GLUE task; prints and writes the dev metric beside the majority-class baseline (OUT/results.json)."""
    from corpusforge.trainer.finetune import finetune, finetune_seeds

    try:
        cfg = FinetuneConfig(
            task=task,
            epochs=epochs,
            lr=lr,
            batch_size=batch_size,
            max_seq_length=max_seq_length,
            max_train_examples=max_train_examples,
            seed=seed,
            random_init=random_init,
            precision=precision,
        )
        if seeds > 1:
            results = finetune_seeds(checkpoint, glue_dir, out, cfg, seeds, device=device)
        else:
            results = finetune(checkpoint, glue_dir, out, cfg, device=device)
    except ValidationError as error:
        fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))
    except (ValueError, FileNotFoundError) as error:
        fail(str(error))
    for line in describe_finetune(results, storage.join(out, "results.json")):
        typer.echo(line)


def describe_finetune(results: dict[str, Any], path: str) -> list[str]:
    """The dev figures beside those of always answering the commoner label, and a plain verdict when they are no better."""
    baseline, metric = results["majority_baseline"], results["metric"]
    spread = results.get("dev_metrics_std")  # several seeds: mean +- std
    figures = ", ".join(f"{k} {v:.4f}" + (f" +- {spread[k]:.4f}" if spread else "") for k, v in results["dev_metrics"].items())
    trivial = ", ".join(f"{k} {v:.4f}" for k, v in baseline.items() if k != "label")
    runs = f", mean of seeds {', '.join(map(str, results['seeds']))}" if "seeds" in results else ""
    lines = [
        f"{results['task']} dev ({results['dev_examples']} examples{runs}): {figures}; majority-class baseline {trivial}; written to {path}"
    ]
    if results["dev"] <= baseline[metric]:
        lines.append(
            f"dev {metric} {results['dev']:.4f} is not above the majority-class baseline {baseline[metric]:.4f} "
            f"(always predicting label {baseline['label']}): the model has learnt nothing yet (more pre-training/fine-tuning steps)"
        )
    return lines


@app.command("generate")
def generate_command(
    checkpoint: Annotated[str, typer.Argument(help="GPT checkpoint directory, or a run directory (its newest checkpoint)")],
    prompt: Annotated[str, typer.Option("--prompt", help="text to continue")],
    max_new_tokens: Annotated[int, typer.Option(help="tokens to sample")] = 100,
    temperature: Annotated[float, typer.Option(help="softmax temperature (below 1: more conservative)")] = 1.0,
    top_k: Annotated[Optional[int], typer.Option(help="sample among the k most likely tokens only")] = None,
    seed: Annotated[int, typer.Option(help="same seed, same continuation")] = 0,
    device: Annotated[Optional[str], typer.Option(help="cuda or cpu (default: cuda when available)")] = None,
) -> None:
    """Print the prompt followed by a continuation sampled from a GPT checkpoint."""
    from corpusforge.trainer.generate import generate

    try:
        text = generate(checkpoint, prompt, max_new_tokens, temperature=temperature, top_k=top_k, seed=seed, device=device)
    except (ValueError, FileNotFoundError) as error:
        fail(str(error))
    typer.echo(text)
