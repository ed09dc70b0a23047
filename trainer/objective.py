"""One micro-batch through the model, and the figures it adds up to (shared by training and evaluation).

A batch contributes [batch-mean losses x examples..., examples, accuracy counters...]; sums over
batches of any size become means per example in ``summarize``.
"""

from __future__ import annotations

import torch
from torch import nn

from corpusforge.trainer.metrics import bert_counts, gpt_counts
from corpusforge.trainer.models import gpt_inputs


def forward(model: nn.Module, task: str, batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Loss outputs and the accuracy counters of one micro-batch."""
    if task == "bert":
        out = model(**batch)
        return out, bert_counts(out, batch)
    xy = gpt_inputs(batch["input_ids"], batch["length"])
    out = model(**xy)
    return out, gpt_counts(out, xy["targets"])


def summarize(task: str, sums: torch.Tensor) -> dict[str, float]:
    """Means per example from summed [losses x examples..., examples, counters...] (see ``batch_sums``)."""
    values = sums.tolist()
    if task == "bert":
        loss, mlm_loss, nsp_loss, examples, mlm_hit, mlm_w, nsp_hit, nsp_n = values
        return {
            "loss": loss / examples,
            "mlm_loss": mlm_loss / examples,
            "nsp_loss": nsp_loss / examples,
            "mlm_accuracy": mlm_hit / max(mlm_w, 1.0),
            "nsp_accuracy": nsp_hit / max(nsp_n, 1.0),
        }
    loss, examples, hit, n = values
    return {"loss": loss / examples, "accuracy": hit / max(n, 1.0)}


def loss_keys(task: str) -> tuple[str, ...]:
    return ("loss", "mlm_loss", "nsp_loss") if task == "bert" else ("loss",)


def batch_sums(task: str, out: dict[str, torch.Tensor], counts: torch.Tensor, examples: int) -> torch.Tensor:
    """[batch-mean losses x examples..., examples, counters...]: summed over batches of any size, then ``summarize``d."""
    losses = torch.stack([out[k].detach().float() for k in loss_keys(task)]) * examples
    return torch.cat([losses, torch.full((1,), float(examples), device=counts.device), counts])
