#!/usr/bin/env bash
# Issue 26: longer SST-2 fine-tuning on the 2,000-example subset, on one GPU (report: bench/glue_gpu.md, "Fine-tuning epochs").
#
# Pre-trains bert-mini once with the `base` recipe of bench/glue_sweep.sh (4,740 x 32 x 64 = 9.7M tokens, lr 1e-3:
# the CPU budget) through bench/glue.py --trainer-only, then fine-tunes SST-2 (--max-train-examples 2000) from that
# checkpoint and from random init for each SETTINGS entry (epochs:seeds per arm), every run at once on the one GPU.
# Each setting is its own glue.py in its own WORK (the fine-tuning folders carry no epoch count); the later ones
# start when the first one's pre-training has written eval.json, with WORK/pretrain a link to that checkpoint.
# Same set-up as bench/glue_gpu.sh and bench/glue_sweep.sh (.gpu/ shards, vocabulary and GLUE files; .whl/ wheels).
# A collector writes every finished run to OUT/runs.json every 10 s, so a run cut off still returns what finished.
#
#   OUT=/tmp/glue_epochs_out bash bench/glue_epochs.sh
#   knobs: SETTINGS STEPS BATCH LR SST2_MAX LIMIT_S WORK BASE WHEELS PY
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/glue_epochs_out}
WORK=${WORK:-$ROOT/.gpu/work}         # holds corpus/ (shards and vocabulary)
BASE=${BASE:-/tmp/glue_epochs}        # one WORK per EPOCHS setting: $BASE/e<N>
PY=${PY:-python3}
SETTINGS=${SETTINGS:-"10:10 20:5"}   # epochs:seeds-per-arm; the first one pre-trains
STEPS=${STEPS:-4740}                  # 4,740 x 32 x 64 = 9,707,520 tokens: 60 CPU-minutes at ~2.7k tokens/s
BATCH=${BATCH:-32}
LR=${LR:-0.001}
SEQ=64
SST2_MAX=${SST2_MAX:-2000}
LIMIT_S=${LIMIT_S:-175}               # every glue.py is stopped by then (from the start of this script)
DEADLINE=$(($(date +%s) + LIMIT_S))
left() { local s=$((DEADLINE - $(date +%s))); echo $((s > 1 ? s : 1)); }
T0=$(date +%s)
stamp() { echo "$(date +%T) +$(($(date +%s) - T0))s $*" | tee -a "$OUT/progress.txt"; }
mkdir -p "$OUT" "$BASE"

source "$ROOT/bench/gpu_env.sh"  # wheels, the corpusforge shim, OUT/env.txt
stamp "set-up done"

# every finished fine-tuning run (dev accuracy, per-epoch curve, seconds) and the pre-training record -> OUT/runs.json
collect() {
  $PY - "$BASE" "$OUT/runs.json" "$SETTINGS" <<'EOF'
import json, statistics, sys
from pathlib import Path
base, out = Path(sys.argv[1]), Path(sys.argv[2])
settings = [tuple(map(int, spec.split(":"))) for spec in sys.argv[3].split()]
first = base / f"e{settings[0][0]}" / "pretrain"
record = {"pretrain": {}, "settings": {}}
if (first / "eval.json").is_file():
    record["pretrain"]["held_out_final"] = json.loads((first / "eval.json").read_text())
if (first / "metrics.jsonl").is_file():
    lines = [json.loads(l) for l in (first / "metrics.jsonl").read_text().splitlines() if l.strip()]
    record["pretrain"]["held_out"] = [m for m in lines if m.get("split") == "held_out"]
    record["pretrain"]["train_last"] = [m for m in lines if m.get("split") == "train"][-1:]
for e, seeds in settings:
    entry = record["settings"][f"epochs{e}"] = {"seeds_per_arm": seeds, "runs": {}}
    for arm in ("pretrained", "random"):
        vals = {}
        for s in range(seeds):
            f = base / f"e{e}" / "finetune" / f"sst2-{arm}-seed{s}" / "results.json"
            if f.is_file():
                r = json.loads(f.read_text())
                vals[s] = r["dev"]
                entry["runs"][f"{arm}-seed{s}"] = {"dev": r["dev"], "seconds": r.get("seconds"), "steps": r["settings"].get("steps"),
                    "epochs": [{"epoch": x["epoch"], "train_loss": round(x["train_loss"], 4), "accuracy": x.get("accuracy")} for x in r["epochs"]]}
        entry[arm] = vals
        if len(vals) > 1:
            entry[f"{arm}_mean_std"] = [statistics.mean(vals.values()), statistics.stdev(vals.values())]
    p, r = list(entry["pretrained"].values()), list(entry["random"].values())
    if min(len(p), len(r)) > 1:
        try:
            from scipy.stats import ttest_ind
            entry["welch_p_one_sided"] = float(ttest_ind(p, r, equal_var=False, alternative="greater").pvalue)
        except Exception as error:  # noqa: BLE001
            entry["welch_p_one_sided"] = repr(error)
        entry["gain_points"] = 100 * (statistics.mean(p) - statistics.mean(r))
tmp = out.with_suffix(".tmp")
tmp.write_text(json.dumps(record, indent=1))
tmp.replace(out)
EOF
}
( while sleep 10; do collect 2>>"$OUT/collect.err" || true; done ) &
COLLECTOR=$!

read -r -a settings <<<"$SETTINGS"
first=${settings[0]%%:*}
setting() {  # epochs seeds
  local e=$1 seeds=$2 w=$BASE/e$1
  mkdir -p "$w" && ln -sfn "$WORK/corpus" "$w/corpus"
  if [[ $e != "$first" ]]; then  # wait for the first setting's pre-training, then share it
    until [[ -f $BASE/e$first/pretrain/eval.json ]]; do
      (($(date +%s) < DEADLINE)) || { stamp "e$e: no pre-trained checkpoint in time"; return; }
      sleep 2
    done
    sleep 1
    ln -sfn "$BASE/e$first/pretrain" "$w/pretrain"
  fi
  stamp "e$e: glue.py starts"
  timeout "$(left)" $PY bench/glue.py --trainer-only --work "$w" --glue-dir "$ROOT/.gpu/glue" --tasks sst2 --seeds "$seeds" \
    --epochs "$e" --seq-len "$SEQ" --max-train-examples "$SST2_MAX" --pretrain-steps "$STEPS" --pretrain-batch "$BATCH" \
    --pretrain-lr "$LR" --pretrain-dropout 0.1 --jobs $((2 * seeds)) --results-json "$OUT/e$e.json" >"$OUT/e$e.log" 2>&1 \
    || { rc=$?; stamp "e$e: glue.py exit $rc"; return; }
  stamp "e$e: done"
}
for spec in "${settings[@]}"; do setting "${spec%%:*}" "${spec##*:}" & done
( until [[ -f $BASE/e$first/pretrain/eval.json ]]; do sleep 1; (($(date +%s) < DEADLINE)) || exit 0; done; stamp "pre-training done (eval.json)" ) &
for pid in $(jobs -p); do [[ $pid == "$COLLECTOR" ]] || wait "$pid" || true; done
kill "$COLLECTOR" 2>/dev/null || true
collect || true
stamp "all settings finished"
grep -hE "^corpus|^fine-tuning|^sst2 |gain:" "$OUT"/e*.log 2>/dev/null | tee "$OUT/summary.txt" || true
(cd "$BASE" && tar czf "$OUT/epochs_files.tar.gz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' --exclude='corpus' --exclude='*.png' \
  ./*/*.log ./*/finetune/*/results.json "e$first/pretrain/eval.json" "e$first/pretrain/metrics.jsonl" "e$first/pretrain"/*.log 2>/dev/null) || true
ls -la "$OUT"
