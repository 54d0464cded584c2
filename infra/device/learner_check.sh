#!/usr/bin/env bash
# The learner's device checks, for the GPU machine (../shared/device/README.md has how its wheels travel):
# the host-traffic guard and the CPU<->GPU checkpoint test on CUDA, then the PPO update's samples/s for the
# teacher and depth-student networks at 4096 and 16384 envs. Figures go to $OUT (default: ./device-out).
# Run from the project root after the recipe's installs: bash infra/device/learner_check.sh
set -euo pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-/tmp/site:$PWD} PYTHONUNBUFFERED=1
python3 -c "import torch; assert torch.cuda.is_available(), 'no GPU visible to torch'; print(torch.cuda.get_device_name())"
python3 -m pytest -q -p no:cacheprovider tests/test_device.py 2>&1 | tee "$OUT/test_device.txt"
for n in 4096 16384; do
  python3 - "$n" <<'PY' | tee -a "$OUT/bench_learner.jsonl"
import json, sys
from llp.bench.learner import run
print(json.dumps(run(device="cuda", num_envs=int(sys.argv[1]))))
PY
done
