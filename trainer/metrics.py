"""Training metrics: accuracy counters, throughput and MFU, TensorBoard + JSON-lines logs, curve plots.

Model FLOPs per token follow PaLM (appendix B) as nanoGPT does: 6N for the weights' forward and
backward plus 12 * layers * width * sequence for attention scores. For BERT this slightly overstates
the MLM decoder, which only runs on the masked positions.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import torch

from corpusforge.core import storage

# Dense bf16 peak, TFLOP/s, by substring of torch.cuda.get_device_name().
PEAK_BF16_TFLOPS: dict[str, float] = {"H200": 989.0, "H100": 989.0, "A100": 312.0}


def flops_per_token(n_params: int, n_layer: int, n_embd: int, seq_len: int) -> float:
    return 6.0 * n_params + 12.0 * n_layer * n_embd * seq_len


def device_peak_flops(device: torch.device) -> float | None:
    """bf16 peak in FLOP/s for a known GPU; None on CPU or an unknown device (then MFU is not reported)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, tflops in PEAK_BF16_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None


def bert_counts(out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[mlm correct (weighted), mlm weight, nsp correct, nsp examples]; summed on device, read once per log."""
    with torch.no_grad():
        w = batch["masked_lm_weights"]
        mlm_hit = (out["mlm_logits"].argmax(-1) == batch["masked_lm_ids"]).float()
        nsp_hit = (out["nsp_logits"].argmax(-1) == batch["next_sentence_label"]).float()
        return torch.stack([(mlm_hit * w).sum(), w.sum(), nsp_hit.sum(), torch.tensor(float(nsp_hit.numel()), device=w.device)])


def gpt_counts(out: dict[str, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """[next-token correct, predicted tokens]."""
    with torch.no_grad():
        valid = targets != -100
        hit = (out["logits"].argmax(-1) == targets) & valid
        return torch.stack([hit.sum().float(), valid.sum().float()])


class MetricsLog:
    """One record per log interval to ``metrics.jsonl`` and TensorBoard (rank 0 only)."""

    def __init__(self, run_dir: storage.PathLike, enabled: bool = True) -> None:
        self.enabled = enabled
        self.path = storage.join(run_dir, "metrics.jsonl")
        self.writer = None
        self._uploads = contextlib.ExitStack()
        if enabled:
            from torch.utils.tensorboard import SummaryWriter

            storage.makedirs(run_dir)
            self.writer = SummaryWriter(log_dir=self._event_folder(storage.join(run_dir, "tensorboard")))

    def _event_folder(self, folder: str) -> str:
        """Where TensorBoard appends its event files by path: the run folder's own locally; for a URI a local
        folder uploaded there when the log closes."""
        return folder if storage.is_local(folder) else self._uploads.enter_context(storage.local_output(folder))

    def log(self, step: int, record: dict[str, Any], prefix: str = "train") -> None:
        if not self.enabled:
            return
        with storage.open_file(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"step": step, "split": prefix, **record}) + "\n")
        for key, value in record.items():
            if isinstance(value, (int, float)):
                self.writer.add_scalar(f"{prefix}/{key}", value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self._uploads.close()


def read_log(path: storage.PathLike) -> list[dict[str, Any]]:
    if not storage.is_file(path):
        return []
    return [json.loads(line) for line in storage.read_text(path).splitlines() if line.strip()]


def plot_curves(metrics_path: storage.PathLike, png_path: storage.PathLike) -> str:
    """Loss, accuracy and learning rate against step from the JSON-lines log: training lines, held-out points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_log(metrics_path)
    train = [r for r in records if r.get("split") == "train"]
    held_out = [r for r in records if r.get("split") == "held_out"]
    fig, (loss_ax, acc_ax, lr_ax) = plt.subplots(1, 3, figsize=(16, 4))
    for ax, keys in ((loss_ax, ("loss", "mlm_loss", "nsp_loss")), (acc_ax, ("mlm_accuracy", "nsp_accuracy", "accuracy"))):
        for key in keys:
            points = [(r["step"], r[key]) for r in train if key in r]
            if points:
                (line,) = ax.plot(*zip(*points), label=f"train {key}")
                held = [(r["step"], r[key]) for r in held_out if key in r]
                if held:
                    ax.plot(*zip(*held), "o--", color=line.get_color(), label=f"held-out {key}")
    lr_points = [(r["step"], r["lr"]) for r in train if "lr" in r]
    if lr_points:
        lr_ax.plot(*zip(*lr_points), label="lr")
    loss_ax.set(xlabel="step", ylabel="loss", title="loss")
    acc_ax.set(xlabel="step", ylabel="accuracy", title="accuracy", ylim=(0, 1))
    lr_ax.set(xlabel="step", ylabel="learning rate", title="learning rate (the rate each logged step used)")
    for ax in (loss_ax, acc_ax, lr_ax):
        ax.grid(alpha=0.3)
        if ax.get_lines():
            ax.legend()
    fig.tight_layout()
    with storage.local_output(png_path, suffix=".png") as tmp:  # savefig picks the format from the suffix
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return os.fspath(png_path)
