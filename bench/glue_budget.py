"""Issue 26 on one GPU: the pre-training gain at each arm's best fine-tuning setting, per pre-training budget.

Stop 34 found the CPU recipe's +9.7 SST-2 points (3 epochs, lr 1e-4) to be a head start: with 5 epochs or lr 3e-4,
random init caught up with the 19.7M-token checkpoint. This asks whether a budget the CPU can reach with both cores
(two data-parallel processes for 60 minutes: about 40M tokens) or twice that changes the answer. For each
pre-training step count it pre-trains once (``bench/glue.py``'s recipe: bert-mini, batch 128 x 64 tokens, lr 1e-3,
dropout 0), then fine-tunes SST-2 (2,000-example subset) for every SETTING (epochs:lr) and seed, from the
checkpoint and from random init (the random arm once per setting, shared through ``--random-from``). Every
``glue.py`` runs at once on the one GPU; OUT/runs.json is rewritten every 10 s, so a run cut off keeps what
finished. The summary sets each arm's best setting (highest mean dev accuracy) against the other's.

Same set-up as ``bench/glue_gpu.sh`` (``.gpu/`` shards, vocabulary and GLUE files; ``.whl/`` wheels):

  OUT=/tmp/glue_budget_out bash -c 'ROOT=$PWD; source bench/gpu_env.sh; python3 bench/glue_budget.py --out $OUT'
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from glue import welch_p  # bench/glue.py's one-sided Welch test, beside this script

ROOT = Path(__file__).resolve().parents[1]
SEQ = 64


def work_dir(base: Path, steps: int, epochs: int, lr: str) -> Path:
    return base / f"s{steps}" / f"e{epochs}-lr{lr}"


def launch(args: argparse.Namespace, steps: int, setting: tuple[int, str], first: bool, deadline: float) -> None:
    """One glue.py: pre-trains (the first setting of a step count) or waits for that checkpoint and links it."""
    epochs, lr = setting
    work = work_dir(args.base, steps, epochs, lr)
    work.mkdir(parents=True, exist_ok=True)
    (work / "corpus").unlink(missing_ok=True)
    (work / "corpus").symlink_to(args.corpus)
    if not first:
        pretrain = work_dir(args.base, steps, *args.settings[0]) / "pretrain"
        while not (pretrain / "eval.json").is_file():
            if time.time() > deadline:
                return
            time.sleep(2)
        (work / "pretrain").unlink(missing_ok=True)
        (work / "pretrain").symlink_to(pretrain)
    extra, jobs = [], 2 * args.seeds
    if steps != args.steps[0]:  # the random arm is the same for every step count: fine-tuned once
        extra, jobs = ["--random-from", str(work_dir(args.base, args.steps[0], epochs, lr)), "--random-wait-s", "1800"], args.seeds
    command = [
        sys.executable, "bench/glue.py", "--trainer-only", "--work", str(work), "--glue-dir", str(args.glue_dir),
        "--tasks", "sst2", "--seeds", str(args.seeds), "--epochs", str(epochs), "--lr", lr, "--seq-len", str(SEQ),
        "--max-train-examples", str(args.sst2_max), "--pretrain-steps", str(steps), "--pretrain-batch", str(args.batch),
        "--pretrain-lr", str(args.pretrain_lr), "--pretrain-dropout", str(args.dropout), "--jobs", str(jobs), *extra,
    ]  # fmt: skip
    with open(args.out / f"s{steps}-e{epochs}-lr{lr}.log", "w", encoding="utf-8") as log:
        try:
            subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            log.write("stopped at the deadline\n")


def collect(args: argparse.Namespace) -> dict:
    """Every finished run and pre-training record, per arm and setting, and each arm's best setting against random's."""
    record: dict = {"settings": [f"{e}:{lr}" for e, lr in args.settings], "pretrain": {}, "arms": {}}
    for steps in args.steps:
        pretrain = work_dir(args.base, steps, *args.settings[0]) / "pretrain"
        if (pretrain / "eval.json").is_file():
            record["pretrain"][f"s{steps}"] = {
                "tokens": steps * args.batch * SEQ,
                "held_out": json.loads((pretrain / "eval.json").read_text()),
            }
        for epochs, lr in args.settings:
            for arm in ("pretrained", "random"):
                if arm == "random" and steps != args.steps[0]:
                    continue
                name = "random" if arm == "random" else f"pretrained s{steps}"
                runs = {}
                for seed in range(args.seeds):
                    path = work_dir(args.base, steps, epochs, lr) / "finetune" / f"sst2-{arm}-seed{seed}" / "results.json"
                    if path.is_file():
                        result = json.loads(path.read_text())
                        runs[seed] = {"dev": result["dev"], "per_epoch": [e.get("accuracy") for e in result["epochs"]]}
                record["arms"].setdefault(name, {})[f"{epochs}:{lr}"] = runs
    summary = {}
    for name, settings in record["arms"].items():
        means = {s: statistics.mean(r["dev"] for r in runs.values()) for s, runs in settings.items() if len(runs) >= 2}
        if means:
            best = max(means, key=means.__getitem__)
            values = [r["dev"] for r in settings[best].values()]
            summary[name] = {"best": best, "mean": means[best], "std": statistics.stdev(values), "n": len(values), "values": values}
    random_best = summary.get("random")
    for name, best in summary.items():
        if random_best and name != "random":
            best["gain_over_random_best_points"] = 100 * (best["mean"] - random_best["mean"])
            best["welch_p"] = welch_p(best["values"], random_best["values"])
    record["best"] = summary
    return record


def write(args: argparse.Namespace) -> dict:
    record = collect(args)
    tmp = args.out / "runs.json.tmp"
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(args.out / "runs.json")
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/glue_budget_out")))
    parser.add_argument("--base", type=Path, default=Path("/tmp/glue_budget"), help="one glue.py WORK per step count and setting")
    parser.add_argument(
        "--corpus", type=Path, default=ROOT / ".gpu" / "work" / "corpus", help="shards/ and vocab/ of bench/glue.py's build"
    )
    parser.add_argument("--glue-dir", type=Path, default=ROOT / ".gpu" / "glue")
    parser.add_argument("--steps", type=int, nargs="+", default=[5000, 10000], help="pre-training step counts (x batch x 64 tokens)")
    parser.add_argument("--settings", nargs="+", default=["3:1e-4", "5:1e-4", "5:3e-4", "10:3e-4"], help="fine-tuning epochs:lr")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--pretrain-lr", type=float, default=1e-3)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--sst2-max", type=int, default=2000)
    parser.add_argument("--limit-s", type=float, default=480, help="every glue.py is stopped by then")
    args = parser.parse_args()
    args.settings = [(int(e), lr) for e, lr in (s.split(":") for s in args.settings)]
    args.out.mkdir(parents=True, exist_ok=True)
    deadline, started = time.time() + args.limit_s, time.time()

    threads = [
        threading.Thread(target=launch, args=(args, steps, setting, i == 0, deadline))
        for steps in args.steps
        for i, setting in enumerate(args.settings)
    ]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        time.sleep(10)
        write(args)
        print(f"+{time.time() - started:.0f}s {sum(not t.is_alive() for t in threads)}/{len(threads)} glue.py done", flush=True)
    record = write(args)
    for name, best in record["best"].items():
        gain = (
            f"  gain over random's best {best['gain_over_random_best_points']:+.1f} points (p = {best['welch_p']})"
            if "welch_p" in best
            else ""
        )
        print(f"{name:20} best {best['best']:8} {best['mean']:.4f} +- {best['std']:.4f} (n={best['n']}){gain}")
    for name, settings in record["arms"].items():
        for setting, runs in settings.items():
            values = [r["dev"] for r in runs.values()]
            if values:
                print(f"{name:20} {setting:8} " + " ".join(f"{v:.4f}" for v in values) + f"   mean {statistics.mean(values):.4f}")


if __name__ == "__main__":
    main()
