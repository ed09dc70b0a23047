# Sourced by the GPU scripts (glue_gpu.sh, glue_sweep.sh, glue_epochs.sh): the GPU machine has torch but neither
# Beam nor pydantic, and the project is not installed there. Needs ROOT (the checkout) and OUT; PY defaults to python3.
# pydantic and its needs come as cp312 wheels in $WHEELS (default .whl/, how to fetch them: glue_gpu.sh's header);
# a folder of symlinks maps corpusforge.<layer> to <layer>/ as pyproject's package-dir does. Writes OUT/env.txt.
PY=${PY:-python3}
WHEELS=${WHEELS:-$ROOT/.whl}
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
SHIM=$(mktemp -d)
mkdir "$SHIM/corpusforge"
ln -s "$ROOT"/corpusforge/* "$SHIM/corpusforge/"
for layer in core corpora encoding shards pipeline trainer; do ln -s "$ROOT/$layer" "$SHIM/corpusforge/$layer"; done
export PYTHONPATH=$SHIM${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
  nproc
  $PY -P -c 'import sys, torch, pydantic, corpusforge.trainer.cli as c; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name(0), pydantic.__version__, c.__file__)'
} 2>&1 | tee "$OUT/env.txt"
