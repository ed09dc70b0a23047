"""Training-step throughput: our models against transformers' on the same batch, and real-data wait.

For each model (bert-tiny, bert-base: seq 128 with 20 predictions; gpt2-124M: seq 1024) it times
full optimizer steps (forward, backward, AdamW) of our model and of the transformers model with the
same architecture (BertForPreTraining / GPT2LMHeadModel), after warm-up steps, and prints tokens/s
side by side with the ratio ours / transformers (and MFU on a GPU with a known bf16 peak).
Then it trains bert-tiny on real batches streamed by ShardStream (shards built from a few books
unless --shards is given) to show the data-wait fraction next to the synthetic figure.

  .venv/bin/python bench/train_step.py --device cpu --steps 3
  .venv/bin/python bench/train_step.py --device cuda --steps 20 --compile
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from corpusforge.trainer.export import hf_config  # noqa: E402
from corpusforge.trainer.metrics import device_peak_flops, flops_per_token  # noqa: E402
from corpusforge.trainer.models import ModelConfig, build_model, count_params, gpt_inputs, model_config  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
SHAPES = {"bert-tiny": (128, 20, 30522), "bert-base": (128, 20, 30522), "gpt2-124M": (1024, 0, 50257)}
BATCH = {"cpu": {"bert-tiny": 32, "bert-base": 4, "gpt2-124M": 1}, "cuda": {"bert-tiny": 256, "bert-base": 64, "gpt2-124M": 16}}


def synthetic_batch(cfg: ModelConfig, batch: int, seq: int, preds: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    V = cfg.real_vocab_size
    if cfg.family == "gpt":
        return {
            "input_ids": torch.randint(0, V, (batch, seq + 1), generator=g).to(device),
            "length": torch.full((batch,), seq + 1).to(device),
        }
    positions = torch.stack([torch.randperm(seq - 2, generator=g)[:preds] + 1 for _ in range(batch)]).sort(-1).values
    return {
        "input_ids": torch.randint(1000, V, (batch, seq), generator=g).to(device),
        "attention_mask": torch.ones(batch, seq, dtype=torch.bool, device=device),
        "token_type_ids": (torch.arange(seq) >= seq // 2).long().expand(batch, -1).to(device),
        "masked_lm_positions": positions.to(device),
        "masked_lm_ids": torch.randint(1000, V, (batch, preds), generator=g).to(device),
        "masked_lm_weights": torch.ones(batch, preds, device=device),
        "next_sentence_label": torch.randint(0, 2, (batch,), generator=g).to(device),
    }


def our_loss(model: torch.nn.Module, cfg: ModelConfig) -> Callable[[dict], torch.Tensor]:
    if cfg.family == "gpt":
        return lambda b: model(**gpt_inputs(b["input_ids"], b["length"]))["loss"]
    return lambda b: model(**b)["loss"]


def hf_loss(model: torch.nn.Module, cfg: ModelConfig) -> Callable[[dict], torch.Tensor]:
    """transformers' own loss path: MLM labels over every position (-100 where not masked)."""
    if cfg.family == "gpt":

        def gpt(b: dict) -> torch.Tensor:
            xy = gpt_inputs(b["input_ids"], b["length"])
            logits = model(input_ids=xy["idx"]).logits
            return F.cross_entropy(logits.float().flatten(0, 1), xy["targets"].flatten(), ignore_index=-100)

        return gpt

    def bert(b: dict) -> torch.Tensor:
        labels = torch.full_like(b["input_ids"], -100).scatter_(1, b["masked_lm_positions"], b["masked_lm_ids"])
        return model(
            input_ids=b["input_ids"],
            attention_mask=b["attention_mask"].long(),
            token_type_ids=b["token_type_ids"],
            labels=labels,
            next_sentence_label=b["next_sentence_label"],
        ).loss

    return bert


def time_steps(
    model: torch.nn.Module, loss_fn: Callable, batches: Callable[[], dict], warmup: int, steps: int, device: torch.device
) -> tuple[float, float]:
    """(seconds per step, fraction of the time spent waiting for the next batch)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    waited = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start, waited = time.perf_counter(), 0.0
        began = time.perf_counter()
        batch = batches()
        waited += time.perf_counter() - began
        with autocast:
            loss = loss_fn(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    return elapsed / steps, waited / elapsed


def bench_model(name: str, args: argparse.Namespace, device: torch.device) -> None:
    from transformers import BertForPreTraining, GPT2LMHeadModel

    seq, preds, vocab = SHAPES[name]
    batch_size = args.batch_size or BATCH[device.type][name]
    cfg = model_config(name, vocab, dropout=0.0)
    torch.manual_seed(0)
    ours = build_model(cfg).to(device)
    hf_cls = GPT2LMHeadModel if cfg.family == "gpt" else BertForPreTraining
    special = {"eot": vocab - 1} if cfg.family == "gpt" else {"pad": 0}
    theirs = hf_cls(hf_config(cfg, special)).to(device)  # the real (unpadded) vocabulary, as HF ships it
    batch = synthetic_batch(cfg, batch_size, seq, preds, device)
    tokens = batch_size * seq
    peak = device_peak_flops(device)
    fpt = flops_per_token(count_params(ours), cfg.n_layer, cfg.n_embd, seq)
    losses = {"ours": our_loss, "transformers": hf_loss}
    models = {"ours": ours, "transformers": theirs}
    if args.compile and device.type == "cuda":
        models = {label: torch.compile(model) for label, model in models.items()}
    best = {label: float("inf") for label in models}
    for _ in range(args.rounds):  # alternate the two so a busy machine slows both alike; keep each one's best
        for label, model in models.items():
            seconds, _ = time_steps(model, losses[label](model, cfg), lambda: batch, args.warmup, args.steps, device)
            best[label] = min(best[label], seconds)
    rates = {label: tokens / seconds for label, seconds in best.items()}
    for label, seconds in best.items():
        mfu = f"  MFU {rates[label] * fpt / peak:6.1%}" if peak else ""
        print(
            f"  {name:10s} {label:12s} batch {batch_size:4d} x {seq:4d}  {seconds * 1000:9.1f} ms/step  {rates[label]:10.0f} tokens/s{mfu}",
            flush=True,
        )
    print(f"  {name:10s} ratio ours / transformers: {rates['ours'] / rates['transformers']:.2f}x", flush=True)


def books_shards(directory: Path) -> Path:
    """BERT shards (seq 128, 20 predictions, bert-base-uncased vocabulary) from three books."""
    import pyarrow.parquet as pq
    from apache_beam.options.pipeline_options import PipelineOptions
    from tokenizers.implementations import BertWordPieceTokenizer

    from corpusforge.core.config import BertConfig, ShardsConfig
    from corpusforge.corpora.books import read_book
    from corpusforge.pipeline.documents_io import documents_table
    from corpusforge.pipeline.examples_stage import write_bert_shards

    root = SHARED / "books" / "en"
    pq.write_table(documents_table([read_book(root / n, root) for n in ("11-0.txt", "46-0.txt", "43-0.txt")]), directory / "docs.parquet")
    vocab = directory / "vocab"
    vocab.mkdir()
    (vocab / "vocab.txt").write_bytes((SHARED / "vocab" / "bert-base-uncased" / "vocab.txt").read_bytes())
    BertWordPieceTokenizer(str(vocab / "vocab.txt"), lowercase=True).save(str(vocab / "tokenizer.json"))
    options = PipelineOptions([], runner="DirectRunner", direct_running_mode="in_memory")
    write_bert_shards(options, [directory / "docs.parquet"], vocab, directory / "shards", BertConfig(dupe_factor=1), ShardsConfig(), seed=0)
    return directory / "shards"


def bench_stream(args: argparse.Namespace, device: torch.device) -> None:
    """bert-tiny on ShardStream batches (DataLoader workers, host-to-device copy) against synthetic ones."""
    from torch.utils.data import DataLoader

    from corpusforge.trainer.data import ShardStream, to_model_inputs

    batch_size = args.batch_size or BATCH[device.type]["bert-tiny"]
    with tempfile.TemporaryDirectory() as tmp:
        shards = args.shards or books_shards(Path(tmp))
        stream = ShardStream(shards, batch_size, seed=0, epochs=None)
        seq = stream.manifest.shard_schema.max_seq_length
        cfg = model_config("bert-tiny", stream.manifest.vocab.size, dropout=0.0)
        torch.manual_seed(0)
        model = build_model(cfg).to(device)
        loader = iter(DataLoader(stream, batch_size=None, num_workers=args.num_workers, pin_memory=device.type == "cuda"))
        steps = max(args.steps, 20)
        real, wait = time_steps(
            model, our_loss(model, cfg), lambda: to_model_inputs(next(loader), device, "bert"), args.warmup, steps, device
        )
        fixed = to_model_inputs(next(loader), device, "bert")
        synthetic, _ = time_steps(model, our_loss(model, cfg), lambda: fixed, args.warmup, steps, device)
    tokens = batch_size * seq
    print(f"  bert-tiny  ShardStream  {tokens / real:10.0f} tokens/s  data-wait {wait:5.1%}  ({args.num_workers} workers)")
    print(f"  bert-tiny  one batch    {tokens / synthetic:10.0f} tokens/s  ratio streamed / in-memory: {synthetic / real:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--steps", type=int, default=3, help="timed steps per model (keep small on CPU)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per model pair; the best is kept")
    parser.add_argument("--batch-size", type=int, default=None, help="default: per model and device")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models (CUDA)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--shards", type=Path, default=None, help="BERT shard dir for the streaming run")
    parser.add_argument("--num-workers", type=int, default=2)
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = True
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else f'{torch.get_num_threads()} threads'}), torch {torch.__version__}"
    )
    print("synthetic batches, full optimizer steps (forward + backward + AdamW):")
    for name in args.models:
        bench_model(name, args, device)
    print("real batches from ShardStream:")
    bench_stream(args, device)


if __name__ == "__main__":
    main()
