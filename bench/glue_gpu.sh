#!/usr/bin/env bash
# Issue 26, GPU item: bench/glue.py's recipe with a larger pre-training budget on one GPU (report: bench/glue_gpu.md).
#
# The GPU machine has torch but no Beam, so the shards are built beforehand on the CPU with bench/glue.py's own
# build step (a smoke run with tiny step counts) and copied, with their vocabulary and the GLUE files, into .gpu/
# (ignored via .git/info/exclude; 29 MB):
#   .venv/bin/python bench/glue.py --work /tmp/glue_build --pretrain-steps 4 --pretrain-batch 8 --tasks mrpc --seeds 2 \
#       --epochs 1 --max-train-examples 64 --jobs 2
#   mkdir -p .gpu/work/corpus/shards && cp -r /tmp/glue_build/corpus/shards/bert .gpu/work/corpus/shards/ \
#       && cp -r /tmp/glue_build/corpus/vocab .gpu/work/corpus/
#   .gpu/glue/SST-2, MRPC: train.tsv dev.tsv; CoLA: train.tsv val.tsv dev.tsv (from ../shared/data/glue)
# pydantic and its needs travel as cp312 wheels in .whl/ (3 MB; installed with --target, no index):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#       pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0 typing_inspection==0.4.5 typing_extensions==4.16.0
# The package is not installed there: a folder of symlinks maps corpusforge.<layer> to <layer>/ as pyproject's
# package-dir does (and glue.py runs the trainer with python -P, so the checkout's corpusforge/ does not shadow it).
#
#   OUT=/tmp/glue_gpu_out bash bench/glue_gpu.sh       # knobs: STEPS BATCH JOBS TASKS SEEDS MAX_TRAIN LIMIT_S WORK WHEELS
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/glue_gpu_out}
WORK=${WORK:-$ROOT/.gpu/work}
STEPS=${STEPS:-5000}          # CPU recipe: 1000 steps x 32 = 2.0M tokens; default here 5000 x 128 = 41M tokens (20x)
BATCH=${BATCH:-128}
JOBS=${JOBS:-20}              # fine-tuning commands at once on the one GPU
TASKS=${TASKS:-mrpc,sst2}     # mrpc first: its short runs finish (and are written) before SST-2's
SEEDS=${SEEDS:-5}
MAX_TRAIN=${MAX_TRAIN:-0}     # 0: the whole training set
LIMIT_S=${LIMIT_S:-420}       # glue.py is stopped after this, so logs still come back
mkdir -p "$OUT"

source "$ROOT/bench/gpu_env.sh"  # wheels, the corpusforge shim, OUT/env.txt

status=0
timeout "$LIMIT_S" python3 bench/glue.py --trainer-only --work "$WORK" --glue-dir "$ROOT/.gpu/glue" --tasks "$TASKS" --seeds "$SEEDS" \
  --pretrain-steps "$STEPS" --pretrain-batch "$BATCH" --pretrain-dropout 0.1 --max-train-examples "$MAX_TRAIN" --jobs "$JOBS" \
  --results-json "$OUT/results.json" 2>&1 | tee "$OUT/glue.log" || status=$?

# what comes back: at most 8 files, two folders down
cp "$WORK/commands.log" "$OUT/commands.log" 2>/dev/null || true
for f in eval.json metrics.jsonl; do cp "$WORK/pretrain/$f" "$OUT/pretrain-$f" 2>/dev/null || true; done
(cd "$WORK" && tail -n 3 ./*.log > "$OUT/finetune-tails.log" 2>/dev/null) || true
exit "$status"
