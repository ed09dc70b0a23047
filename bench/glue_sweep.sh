#!/usr/bin/env bash
# Issue 26: a pre-training recipe sweep on one GPU at the CPU budget (report: bench/glue_gpu.md, "Recipe sweep").
#
# Every recipe pre-trains bert-mini on the same shards for the same number of tokens (TOKENS: 60 CPU-minutes at
# ~2.7k tokens/s), all recipes at once on the one GPU, each through bench/glue.py --trainer-only in its own WORK,
# then fine-tunes SST-2 on a 2,000-example subset and MRPC on its whole training set, SEEDS seeds each.
# The random-init arm (same architecture and vocabulary, no pre-trained weights) is fine-tuned once, in the
# first recipe's WORK, and the others read it (glue.py --random-from): one baseline shared by every recipe.
# Same set-up as bench/glue_gpu.sh (.gpu/ shards, vocabulary and GLUE files; .whl/ pydantic wheels; no Beam).
#
#   OUT=/tmp/glue_sweep_out bash bench/glue_sweep.sh
#   knobs: TOKENS SEEDS JOBS SST2_MAX MRPC_MAX EPOCHS LIMIT_S RECIPES WORK SWEEP WHEELS PY
#   RECIPES: "name:batch:lr:key=value,key=value ..." (keys of [train], passed as --set train.KEY=VALUE);
#   steps = TOKENS / (batch x 64); the first recipe holds the random-init arm.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/glue_sweep_out}
WORK=${WORK:-$ROOT/.gpu/work}         # holds corpus/ (shards and vocabulary)
SWEEP=${SWEEP:-/tmp/glue_sweep}       # one WORK per recipe
PY=${PY:-python3}
TOKENS=${TOKENS:-9707520}             # 4,740 x 32 x 64: 60 CPU-minutes at ~2.7k tokens/s
SEQ=64                                # the shards' sequence length (and the fine-tuning max length)
SEEDS=${SEEDS:-5}
JOBS=${JOBS:-5}                       # fine-tuning commands at once per recipe (twice that for the first recipe)
SST2_MAX=${SST2_MAX:-2000}            # SST-2 training subset (issue 26's measurement)
MRPC_MAX=${MRPC_MAX:-0}               # 0: MRPC's whole training set
EPOCHS=${EPOCHS:-3}
LIMIT_S=${LIMIT_S:-360}               # every glue.py is stopped by then, so the logs still come back
RECIPES=${RECIPES:-"base:32:0.001: nodrop:32:0.001:dropout=0.0 lr2e-3:32:0.002: nodrop-lr2e-3:32:0.002:dropout=0.0 bs128-lr2e-3:128:0.002:"}
mkdir -p "$OUT" "$SWEEP"
RESULTS=$SWEEP/results
mkdir -p "$RESULTS"

source "$ROOT/bench/gpu_env.sh"  # wheels, the corpusforge shim, OUT/env.txt

DEADLINE=$(($(date +%s) + LIMIT_S))
left() { local s=$((DEADLINE - $(date +%s))); echo $((s > 1 ? s : 1)); }

read -r -a recipes <<<"$RECIPES"
first=${recipes[0]%%:*}
recipe() {  # name batch lr sets
  local name=$1 batch=$2 lr=$3 sets=$4 w=$SWEEP/$1 steps extra=() shared=() jobs=$JOBS
  steps=$((TOKENS / (batch * SEQ)))
  mkdir -p "$w" && ln -sfn "$WORK/corpus" "$w/corpus"
  for kv in ${sets//,/ }; do extra+=(--pretrain-set "$kv"); done
  if [[ $name == "$first" ]]; then jobs=$((2 * JOBS)); else shared=(--random-from "$SWEEP/$first"); fi
  local common=(--trainer-only --work "$w" --glue-dir "$ROOT/.gpu/glue" --seeds "$SEEDS" --epochs "$EPOCHS" --seq-len "$SEQ"
    --pretrain-steps "$steps" --pretrain-batch "$batch" --pretrain-lr "$lr" --pretrain-dropout 0.1 "${extra[@]}" "${shared[@]}" --jobs "$jobs")
  echo "$(date +%T) $name: $steps steps x $batch x $SEQ = $((steps * batch * SEQ)) tokens, lr $lr, ${sets:-no other setting}"
  timeout "$(left)" $PY bench/glue.py "${common[@]}" --tasks sst2 --max-train-examples "$SST2_MAX" \
    --results-json "$RESULTS/$name-sst2.json" >"$SWEEP/$name.log" 2>&1 || { rc=$?; echo "$(date +%T) $name sst2 failed: exit $rc"; }
  timeout "$(left)" $PY bench/glue.py "${common[@]}" --tasks mrpc --max-train-examples "$MRPC_MAX" \
    --results-json "$RESULTS/$name-mrpc.json" >>"$SWEEP/$name.log" 2>&1 || { rc=$?; echo "$(date +%T) $name mrpc failed: exit $rc"; }
  echo "$(date +%T) $name done"
}
started=$(date +%s)
for spec in "${recipes[@]}"; do
  IFS=: read -r name batch lr sets <<<"$spec"
  recipe "$name" "$batch" "$lr" "$sets" &
done
wait
echo "all recipes: $(($(date +%s) - started)) s"

# what comes back (at most 8 files): the merged figures, the summary lines, every log and curve in one archive
$PY - "$SWEEP" "$RESULTS" "$OUT/sweep_results.json" "$RECIPES" <<'EOF'
import json, sys
from pathlib import Path
sweep, results, out, recipes = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4].split()
merged = {}
for spec in recipes:
    name = spec.split(":")[0]
    entry = merged[name] = {"recipe": spec}
    for task in ("sst2", "mrpc"):
        f = results / f"{name}-{task}.json"
        if f.is_file():
            record = json.loads(f.read_text())
            entry.setdefault("settings", record["settings"]); entry.setdefault("device", record["device"])
            if task == "sst2": entry["pretrain"] = record["pretrain"]
            entry[task] = record["tasks"].get(task)
    metrics = sweep / name / "pretrain" / "metrics.jsonl"
    if metrics.is_file():
        lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        entry["pretrain_held_out"] = [m for m in lines if m.get("split") == "held_out"]
        entry["pretrain_train_last"] = [m for m in lines if m.get("split") == "train"][-1:]
out.write_text(json.dumps(merged, indent=1))
EOF
for spec in "${recipes[@]}"; do
  name=${spec%%:*}
  echo "== $name ($spec)"
  grep -E "^corpus|^(sst2|mrpc) |gain:|failed|Error" "$SWEEP/$name.log" 2>/dev/null | sed 's/^/  /' | head -30 || true
done | tee "$OUT/summary.txt"
(cd "$SWEEP" && tar czf "$OUT/sweep_files.tar.gz" --exclude='*.pt' --exclude='*.safetensors' --exclude='*.bin' --exclude='corpus' \
  ./*.log results ./*/pretrain/eval.json ./*/pretrain/metrics.jsonl ./*/pretrain/*.log ./*/finetune/*/results.json ./*/*.log 2>/dev/null) || true
ls -la "$OUT"
