"""What pre-training on our corpus buys on GLUE: fine-tune from our bert-mini and from random init.

1. Builds BERT shards from the shared books (25 Gutenberg works) and the English Wikipedia excerpt
   with ``corpusforge build`` (WordPiece vocabulary trained on that corpus), rejecting any document that shares a
   13-gram with the SST-2, MRPC or CoLA dev sets (``clean.decontaminate``; none does in this corpus).
2. Pre-trains bert-mini on them with ``corpusforge train`` for ``--pretrain-steps`` (the budget; its wall time and
   CPU-minutes are printed), evaluating the held-out tail along the way. The default recipe fits 60 CPU-minutes
   of one thread on this project's 2-core machine: 2,400 steps x 128 x 64 = 19.7M tokens, lr 1e-3, dropout off
   (Cramming), bf16 autocast (``auto``: the CPU has AMX), post-LN as in the paper.
3. Fine-tunes each task with ``corpusforge finetune`` from that checkpoint and with ``--random-init``
   (same architecture and vocabulary) for each seed, and prints both side by side: per-seed figures,
   mean, sample standard deviation, the gap in units of the larger spread, Welch's t-test of the two arms
   (unequal variances; one line per task: ``sst2 gain: +X.X points (p = P)``), and the BERT-Mini figure
   of the miniatures (Turc et al. 2019: full pre-training on BookCorpus + Wikipedia, full train set,
   scored on the GLUE *test* set; ours are dev-set figures, so the two are not the same measurement).

  .venv/bin/python bench/glue.py --work /tmp/glue_bench --jobs 2      # SST-2 (2,000 examples) and MRPC (whole), 5 seeds
  .venv/bin/python bench/glue.py --work /tmp/glue_bench --pretrain-steps 200 --tasks sst2 --max-train-examples 2000 --epochs 2

On a GPU machine without Beam (shards built elsewhere and copied to WORK/corpus, vocabulary beside them),
``--trainer-only`` runs train/finetune through ``corpusforge.trainer.cli`` with this interpreter and
``--jobs N`` runs N fine-tuning commands at once: bench/glue_gpu.sh, results in bench/glue_gpu.md.
``--pretrain-set`` and ``--random-from`` compare pre-training recipes against one random-init arm: bench/glue_sweep.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import get_args

from corpusforge.core.config import PRECISION_HELP, Precision
from corpusforge.shards.reader import read_manifest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
CLI = [str(Path(sys.executable).parent / "corpusforge")]  # the console script beside this interpreter
# --trainer-only: the trainer's own commands (train, finetune, ...) without the build's imports (Beam);
# -P: the checkout's corpusforge/ folder (cwd) must not shadow the installed package or its PYTHONPATH stand-in
TRAINER_CLI = [sys.executable, "-P", "-c", "from corpusforge.trainer.cli import app; app()"]
THREADS = 1  # one thread per command: on a shared 2-core machine a second OpenMP thread mostly spins
REFERENCE = {"sst2": ("accuracy", 0.859), "cola": ("mcc", 0.0), "mrpc": ("f1", 0.0)}  # BERT-Mini, GLUE test set, Turc et al. 2019
REFERENCE_NOTE = {
    "sst2": "85.9 (BERT-Mini, miniatures, GLUE test set; ours: dev set)",
    "cola": "n/a (miniatures report GLUE test only)",
    "mrpc": "n/a",
}


def run(command: list[str], log: Path) -> float:
    """Run a corpusforge command, its output appended to ``log``; returns the wall seconds."""
    started = time.perf_counter()
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"$ {shlex.join(command)}\n")
        handle.flush()
        done = subprocess.run(
            command, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": str(THREADS)}
        )
    if done.returncode:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}; see {log}")
    return time.perf_counter() - started


def build_shards(work: Path, args: argparse.Namespace, log: Path) -> Path:
    shards = work / "corpus" / "shards" / "bert"
    if (shards / "manifest.json").is_file():
        return shards
    config = work / "glue_bench.toml"
    config.write_text(
        f"""[run]
output_dir = "{work / "corpus"}"
stages = ["books", "wikipedia", "clean", "dedup", "documents", "vocab", "bert"]
seed = 12345

[books]
paths = ["{SHARED / "books" / "en"}"]

[wikipedia]
paths = ["{SHARED / "wikipedia" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"}"]

[clean]
min_words = 20
language = "en"
decontaminate = {json.dumps([str(args.glue_dir / name / "dev.tsv") for name in ("SST-2", "MRPC", "CoLA")])}

[vocab]
kinds = ["wordpiece"]
wordpiece_vocab_size = {args.vocab_size}

[bert]
max_seq_length = {args.seq_len}
max_predictions_per_seq = {max(2, round(args.seq_len * 0.15))}
dupe_factor = {args.dupe_factor}
""",
        encoding="utf-8",
    )
    seconds = run([*CLI, "build", str(config)], log)
    print(f"built shards in {seconds:.0f} s: {shards}", flush=True)
    return shards


def pretrain(shards: Path, work: Path, args: argparse.Namespace, log: Path) -> tuple[Path, float, float]:
    """The run folder, and the wall and CPU seconds of ``corpusforge train`` (NaN when an earlier run is reused)."""
    run_dir = work / "pretrain"
    if (run_dir / "eval.json").is_file():
        return run_dir, float("nan"), float("nan")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # nothing else runs from here meanwhile
    seconds = run(
        [
            *CLI,
            "train",
            "--shards",
            str(shards),
            "--out",
            str(run_dir),
            "--model",
            args.model,
            "--steps",
            str(args.pretrain_steps),
            "--batch-size",
            str(args.pretrain_batch),
            "--lr",
            str(args.pretrain_lr),
            "--warmup-steps",
            str(max(1, args.pretrain_steps // 10)),
            "--eval-every",
            str(max(1, args.pretrain_steps // 4)),
            "--set",
            "train.num_workers=0",
            "--set",
            f"train.checkpoint_every={args.pretrain_steps}",
            "--set",
            "train.log_every=25",
            "--compile" if args.compile else "--no-compile",
            "--set",
            f"train.precision={args.precision}",
            "--set",
            f"train.dropout={args.pretrain_dropout}",
            *(item for kv in args.pretrain_set for item in ("--set", f"train.{kv}")),
        ],
        log,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return run_dir, seconds, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def finetune(checkpoint: Path, task: str, seed: int, random_init: bool, work: Path, args: argparse.Namespace, log: Path) -> dict:
    out = work / "finetune" / f"{task}-{'random' if random_init else 'pretrained'}-seed{seed}"
    if random_init and args.random_from:  # another WORK's random-init arm (same corpus and model), shared by several recipes
        out, deadline = args.random_from / "finetune" / out.name, time.monotonic() + args.random_wait_s
        while not (out / "results.json").is_file():
            if time.monotonic() > deadline:
                raise SystemExit(f"no {out / 'results.json'} after {args.random_wait_s:.0f} s (--random-from)")
            time.sleep(2)
    if not (out / "results.json").is_file():
        log = log.with_name(f"{out.name}.log") if args.jobs > 1 else log  # one log per run when they run at once
        command = [
            *CLI,
            "finetune",
            str(checkpoint),
            "--task",
            task,
            "--glue-dir",
            str(args.glue_dir),
            "--out",
            str(out),
            "--epochs",
            str(args.epochs),
            "--seed",
            str(seed),
            "--max-seq-length",
            str(args.seq_len),
            "--lr",
            str(args.lr),
            "--precision",
            args.precision,
        ]
        if limit := subset_size(args.max_train_examples, task):
            command += ["--max-train-examples", str(limit)]
        run(command + (["--random-init"] if random_init else []), log)
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


def subset_size(spec: str, task: str) -> int | None:
    """``--max-train-examples``: N for every task, or ``task=N,...`` (tasks not named train on their whole set); 0 or None: whole."""
    if spec.isdigit():
        return int(spec) or None
    sizes = dict(item.split("=") for item in spec.split(",") if item)
    return int(sizes.get(task, 0)) or None


def welch_p(pretrained: list[float], random: list[float]) -> float:
    """One-sided p-value of Welch's t-test that pre-training beats random init (unequal variances)."""
    from scipy.stats import ttest_ind

    if min(len(pretrained), len(random)) < 2:
        return float("nan")
    return float(ttest_ind(pretrained, random, equal_var=False, alternative="greater").pvalue)


def spread(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def device_name() -> str:
    """What ``train`` and ``finetune`` run on by default: the first CUDA device's name, else CPU."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/glue_bench"))
    parser.add_argument("--tasks", default="sst2,mrpc")
    parser.add_argument("--seeds", type=int, default=5, help="fine-tuning seeds per arm (Welch's t-test needs at least 2)")
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--dupe-factor", type=int, default=2)
    parser.add_argument("--pretrain-steps", type=int, default=2400, help="the budget: 2,400 x 128 x 64 tokens is about 55 CPU-minutes here")
    parser.add_argument("--pretrain-batch", type=int, default=128)
    parser.add_argument("--pretrain-lr", type=float, default=1e-3)
    parser.add_argument("--pretrain-dropout", type=float, default=0.0, help="dropout in pre-training (Cramming: 0; BERT paper: 0.1)")
    parser.add_argument(
        "--pretrain-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another pre-training setting, passed as --set train.KEY=VALUE (e.g. dropout=0.0); repeatable",
    )
    parser.add_argument(
        "--random-from",
        type=Path,
        default=None,
        metavar="WORK2",
        help="read the random-init arm from WORK2/finetune (another run of this script on the same corpus and model, "
        "waited for) instead of fine-tuning it here: several pre-training recipes against one baseline",
    )
    parser.add_argument("--random-wait-s", type=float, default=900, help="how long to wait for --random-from's runs")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument(
        "--max-train-examples", default="sst2=2000", help="N for every task, or task=N,...: a seeded subset of the training set (0: whole)"
    )
    parser.add_argument("--glue-dir", type=Path, default=SHARED / "glue", help="folder holding SST-2/, CoLA/, MRPC/")
    parser.add_argument("--jobs", type=int, default=1, help="fine-tuning commands at once (a GPU has room for several)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the pre-training model (CUDA only)")
    parser.add_argument("--trainer-only", action="store_true", help="train/finetune via corpusforge.trainer.cli (no Beam needed)")
    parser.add_argument("--model", default="bert-mini", help="model size of both arms")
    parser.add_argument(
        "--precision",
        choices=get_args(Precision),
        default="auto",
        help=f"of pre-training and fine-tuning: {PRECISION_HELP}",
    )
    parser.add_argument("--results-json", type=Path, default=None, help="every figure as JSON [default: WORK/results.json]")
    args = parser.parse_args()
    if args.trainer_only:
        CLI[:] = TRAINER_CLI

    args.work.mkdir(parents=True, exist_ok=True)
    log = args.work / "commands.log"
    shards = build_shards(args.work, args, log)
    manifest = read_manifest(shards)
    run_dir, pretrain_seconds, pretrain_cpu = pretrain(shards, args.work, args, log)
    held_out = json.loads((run_dir / "eval.json").read_text(encoding="utf-8"))
    tokens = args.pretrain_steps * args.pretrain_batch * args.seq_len
    device = device_name()
    print(
        f"corpus: {manifest.examples:,} BERT examples of {args.seq_len} tokens, WordPiece {manifest.vocab.size:,}; "
        f"pre-training: {args.model}, {args.pretrain_steps} steps x {args.pretrain_batch} ({tokens / 1e6:.1f}M tokens, "
        f"{args.pretrain_steps * args.pretrain_batch / manifest.examples:.2f} epochs) in {pretrain_seconds / 60:.1f} min "
        f"and {pretrain_cpu / 60:.1f} CPU-minutes ({tokens / pretrain_seconds:,.0f} tokens/s of wall time, "
        f"{tokens / pretrain_cpu:,.0f} per CPU-second, start-up included) on {device}, precision {args.precision}; "
        f"held-out MLM accuracy {held_out['mlm_accuracy']:.3f}, NSP accuracy {held_out['nsp_accuracy']:.3f}",
        flush=True,
    )
    print(
        f"fine-tuning: training examples {args.max_train_examples} (0 or a task not named: all), {args.epochs} epochs, lr {args.lr}, batch 32, "
        f"max length {args.seq_len}, seeds 0..{args.seeds - 1}; figure = dev metric after the last epoch",
        flush=True,
    )

    width = max(26, 7 * args.seeds - 1)
    header = f"{'task':6} {'metric':8} {'init':11} {'per seed':{width}} {'mean':>7} {'std':>6}"
    rows = [header, "-" * len(header)]
    tasks = args.tasks.split(",")
    record = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "device": device,
        "corpus": {"examples": manifest.examples, "seq_len": args.seq_len, "vocab_size": manifest.vocab.size},
        "pretrain": {"tokens": tokens, "wall_s": round(pretrain_seconds, 1), "cpu_s": round(pretrain_cpu, 1), "held_out": held_out},
        "tasks": {},
    }
    results_json = args.results_json or args.work / "results.json"
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each job is a subprocess: threads only wait
        runs = {
            (task, random_init, seed): pool.submit(finetune, run_dir, task, seed, random_init, args.work, args, log)
            for task in tasks
            for random_init in (False, True)
            for seed in range(args.seeds)
        }
        started = time.perf_counter()
        for task in tasks:
            figures, seconds = {}, {}
            for random_init in (False, True):
                results = [runs[task, random_init, seed].result() for seed in range(args.seeds)]
                values = [r["dev"] for r in results]
                figures[random_init], seconds[random_init] = values, [r.get("seconds") for r in results]
                mean, std = spread(values)
                metric = REFERENCE[task][0]
                rows.append(
                    f"{task:6} {metric:8} {'random' if random_init else 'pretrained':11} "
                    f"{' '.join(f'{v:.4f}' for v in values):{width}} {mean:7.4f} {std:6.4f}"
                )
                print(rows[-1], flush=True)
            (pre_mean, pre_std), (rnd_mean, rnd_std) = spread(figures[False]), spread(figures[True])
            gap = pre_mean - rnd_mean
            rows.append(
                f"{task:6} gain of pre-training: {gap:+.4f} = {gap / max(pre_std, rnd_std, 1e-9):+.1f} x the larger std; "
                f"reference: {REFERENCE_NOTE[task]}"
                + (f"; ours/reference {pre_mean / REFERENCE[task][1]:.3f}" if REFERENCE[task][1] else "")
            )
            p = welch_p(figures[False], figures[True])
            rows.append(f"{task} gain: {100 * gap:+.1f} points (p = {p:.4f})")
            print("\n".join(rows[-2:]), flush=True)
            record["tasks"][task] = {
                "metric": REFERENCE[task][0],
                "pretrained": figures[False],
                "random": figures[True],
                "pretrained_mean_std": [pre_mean, pre_std],
                "random_mean_std": [rnd_mean, rnd_std],
                "gain": gap,
                "welch_p_one_sided": p,
                "reference": REFERENCE_NOTE[task],
                "run_seconds": {"pretrained": seconds[False], "random": seconds[True]},
                "finetune_wall_s_so_far": round(time.perf_counter() - started, 1),
            }
            results_json.write_text(json.dumps(record, indent=1), encoding="utf-8")  # after each task: a cut-off run keeps what finished
    print("\n".join(["", *rows]))
    print(f"figures written to {results_json}")


if __name__ == "__main__":
    main()
