"""Fine-tune a pre-trained BERT checkpoint on a GLUE task and score it on the dev set.

The BERT paper's recipe (appendix A.3) as the BERT miniatures apply it to small models: a linear
classifier on the pooled [CLS] vector (dropout 0.1), AdamW with weight decay 0.01, lr 1e-4 by
default, linear warmup over 10% of the steps then linear decay to 0, batch 32, 3 epochs. The dev
metric is computed after every epoch; ``dev`` in results.json is the last epoch's (no choosing the
best epoch on the dev set it is reported on). ``random_init`` keeps architecture and vocabulary but
not the weights: the baseline that shows what pre-training bought. ``majority_baseline`` in results.json
is the floor below both: the dev metrics of always answering the dev set's commoner label.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn
from tqdm import tqdm

from corpusforge.core import storage
from corpusforge.core.config import FinetuneConfig, Precision
from corpusforge.trainer.checkpoint import WEIGHTS_NAME, load_weights, read_state, resolve_checkpoint, run_tokenizer
from corpusforge.trainer.device import autocast, pick_device
from corpusforge.trainer.glue import Example, encode, get_task, load_task, majority_baseline, score, subset
from corpusforge.trainer.models import Bert, ModelConfig
from corpusforge.trainer.optim import Recipe, make_optimizer, make_scheduler

EVAL_BATCH = 128


class Classifier(nn.Module):
    """The pre-trained encoder and pooler, then dropout and a new linear layer over the labels."""

    def __init__(self, encoder: Bert, labels: int = 2) -> None:
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(encoder.cfg.dropout)
        self.head = nn.Linear(encoder.cfg.n_embd, labels)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        x = self.encoder.encode(input_ids, attention_mask, token_type_ids)
        pooled = torch.tanh(self.encoder.pooler(x[:, 0]))
        return self.head(self.dropout(pooled))


def load_encoder(checkpoint: storage.PathLike, cfg: FinetuneConfig) -> tuple[Bert, dict[str, Any], dict[str, Any]]:
    """(encoder, its checkpoint's state.json, the checkpoint's identity) — pre-trained unless ``cfg.random_init``."""
    ckpt = resolve_checkpoint(checkpoint)
    state = read_state(ckpt)
    model_cfg = ModelConfig(**{**state["model_config"], "dropout": cfg.dropout})
    if model_cfg.family != "bert":
        raise ValueError(f"{ckpt}: a {model_cfg.family.upper()} checkpoint; GLUE fine-tuning needs a BERT checkpoint")
    torch.manual_seed(cfg.seed)
    encoder = Bert(model_cfg)
    if not cfg.random_init:
        load_weights(ckpt, encoder)
    identity = {
        "path": storage.resolve(ckpt),
        "step": state.get("step"),
        "model": state.get("train_config", {}).get("model"),
        "weights_sha256": storage.sha256(storage.join(ckpt, WEIGHTS_NAME)),
        "vocab_sha256": state["vocab"].get("sha256"),
    }
    return encoder, state, identity


def finetune(
    checkpoint: storage.PathLike,
    glue_dir: storage.PathLike,
    out_dir: storage.PathLike,
    cfg: FinetuneConfig,
    *,
    device: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train the classifier, score dev after every epoch; writes OUT/results.json, dev_predictions.txt, dev_curve.png
    (several seeds: ``finetune_seeds``)."""
    task = get_task(cfg.task)
    train_examples, dev_examples = load_task(glue_dir, task)
    train_examples = subset(train_examples, cfg.max_train_examples, cfg.seed)
    encoder, state, identity = load_encoder(checkpoint, cfg)
    if cfg.max_seq_length > encoder.cfg.max_positions:
        raise ValueError(f"--max-seq-length {cfg.max_seq_length} exceeds the model's {encoder.cfg.max_positions} positions")
    dev = pick_device(device)
    batcher = Batcher(run_tokenizer(state["vocab"]), state["vocab"]["special_ids"], cfg.max_seq_length, dev, cfg.precision)
    model = Classifier(encoder).to(dev)

    steps_per_epoch = -(-len(train_examples) // cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    r = Recipe(cfg.lr, max(1, round(cfg.warmup_fraction * total)), cfg.weight_decay, (0.9, 0.999), 1e-6, "linear")
    optimizer = make_optimizer(model, r, dev)
    scheduler = make_scheduler(optimizer, total, r)
    order_rng = np.random.default_rng(cfg.seed)
    started = time.perf_counter()
    epochs: list[dict[str, Any]] = []
    bar = tqdm(total=total, disable=not progress, desc=f"finetune {task.name}")
    for epoch in range(1, cfg.epochs + 1):
        order = order_rng.permutation(len(train_examples))
        losses = train_epoch(model, train_examples, order, batcher, cfg.batch_size, optimizer, scheduler, bar)
        predictions = predict(model, dev_examples, batcher)
        metrics = score(task, predictions, [e.label for e in dev_examples])
        epochs.append({"epoch": epoch, "train_loss": float(np.mean(losses)), **metrics})
        bar.set_postfix({task.metric: f"{metrics[task.metric]:.4f}"})
    bar.close()

    results = {
        "task": task.name,
        "metric": task.metric,
        "dev": epochs[-1][task.metric],
        "dev_metrics": {k: v for k, v in epochs[-1].items() if k not in ("epoch", "train_loss")},
        "majority_baseline": majority_baseline(task, [e.label for e in dev_examples]),
        "epochs": epochs,
        "train_examples": len(train_examples),
        "dev_examples": len(dev_examples),
        "settings": {**cfg.model_dump(mode="json"), "steps": total, "warmup_steps": r.warmup_steps},
        "checkpoint": identity,
        "glue_dir": storage.resolve(glue_dir),
        "device": str(dev),
        "seconds": round(time.perf_counter() - started, 1),
    }
    storage.write_json(storage.join(out_dir, "results.json"), results)
    storage.write_bytes(
        storage.join(out_dir, "dev_predictions.txt"), "".join(f"{p}\n" for p in predictions).encode()
    )  # the last epoch's, in dev-file order
    plot_dev(
        epochs,
        task.metric,
        f"{task.name} dev {task.metric}" + (" (random init)" if cfg.random_init else ""),
        storage.join(out_dir, "dev_curve.png"),
    )
    return results


def finetune_seeds(
    checkpoint: storage.PathLike,
    glue_dir: storage.PathLike,
    out_dir: storage.PathLike,
    cfg: FinetuneConfig,
    seeds: int,
    *,
    device: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """``finetune`` with ``seeds`` consecutive seeds from ``cfg.seed``, each into OUT/seed-<s>/; OUT/results.json
    holds each seed's dev metrics and their mean and sample standard deviation (a single run is noise)."""
    runs = [
        finetune(
            checkpoint,
            glue_dir,
            storage.join(out_dir, f"seed-{seed}"),
            cfg.model_copy(update={"seed": seed}),
            device=device,
            progress=progress,
        )
        for seed in range(cfg.seed, cfg.seed + seeds)
    ]
    first = runs[0]
    names = list(first["dev_metrics"])
    values = {name: [run["dev_metrics"][name] for run in runs] for name in names}
    results = {
        "task": first["task"],
        "metric": first["metric"],
        "seeds": list(range(cfg.seed, cfg.seed + seeds)),
        "dev_per_seed": values[first["metric"]],
        "dev": float(np.mean(values[first["metric"]])),
        "dev_std": float(np.std(values[first["metric"]], ddof=1)) if seeds > 1 else 0.0,
        "dev_metrics": {name: float(np.mean(v)) for name, v in values.items()},
        "dev_metrics_std": {name: float(np.std(v, ddof=1)) if seeds > 1 else 0.0 for name, v in values.items()},
        "majority_baseline": first["majority_baseline"],
        "dev_examples": first["dev_examples"],
        "train_examples": first["train_examples"],
        "runs": [f"seed-{seed}" for seed in range(cfg.seed, cfg.seed + seeds)],
        "checkpoint": first["checkpoint"],
    }
    storage.write_json(storage.join(out_dir, "results.json"), results)
    return results


@dataclass(frozen=True)
class Batcher:
    """Turns examples into model inputs on the device: the run's tokenizer, its special ids, the length cap."""

    tokenizer: Tokenizer
    special_ids: dict[str, int]
    max_seq_length: int
    device: torch.device
    precision: Precision = "auto"

    def __call__(self, examples: list[Example]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        batch = {k: v.to(self.device) for k, v in encode(examples, self.tokenizer, self.special_ids, self.max_seq_length).items()}
        return batch, batch.pop("labels")


def batches(examples: list[Example], order: np.ndarray, size: int) -> Iterator[list[Example]]:
    for start in range(0, len(order), size):
        yield [examples[i] for i in order[start : start + size]]


def train_epoch(
    model: Classifier,
    examples: list[Example],
    order: np.ndarray,
    batcher: Batcher,
    batch_size: int,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    bar: tqdm,
) -> list[float]:
    """One pass over ``examples`` in ``order`` (the last batch may be smaller); returns the batch losses."""
    model.train()
    losses = []
    for chunk in batches(examples, order, batch_size):
        batch, labels = batcher(chunk)
        with autocast(batcher.device, batcher.precision):
            logits = model(**batch)
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        bar.update(1)
    return losses


@torch.no_grad()
def predict(model: Classifier, examples: list[Example], batcher: Batcher) -> list[int]:
    """Arg-max label of every example, in order."""
    model.eval()
    predictions: list[int] = []
    for chunk in batches(examples, np.arange(len(examples)), EVAL_BATCH):
        batch, _ = batcher(chunk)
        with autocast(batcher.device, batcher.precision):
            predictions += model(**batch).argmax(-1).tolist()
    return predictions


def plot_dev(epochs: list[dict[str, Any]], metric: str, title: str, png_path: storage.PathLike) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([e["epoch"] for e in epochs], [e[metric] for e in epochs], marker="o")
    ax.set(xlabel="epoch", ylabel=f"dev {metric}", title=title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    with storage.local_output(png_path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return os.fspath(png_path)
