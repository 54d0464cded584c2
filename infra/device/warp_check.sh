#!/usr/bin/env bash
# The warp backend's device checks, for the GPU machine (../shared/device/README.md: how mujoco, mujoco-warp and
# warp-lang travel there): the full env against Warp physics alone (`llp bench sim --backend warp --device cuda`)
# at 4096, 16384 and 32768 envs on the locomotion terrain, one JSON line each. Figures go to $OUT (default:
# ./device-out). Run from the project root after the recipe's installs: bash infra/device/warp_check.sh
set -euo pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-/tmp/site:$PWD} PYTHONUNBUFFERED=1
python3 -c "import warp as wp; wp.init(); assert wp.is_cuda_available(), 'no GPU visible to Warp'"
for n in 4096 16384 32768; do
  python3 - "$n" <<'PY' | tail -1 | tee -a "$OUT/bench_sim_warp.jsonl"
import json, sys
from llp.bench.sim import run
print(json.dumps(run(num_envs=int(sys.argv[1]), steps=20, depth_steps=0, backend="warp", device="cuda")))
PY
done
# the co-located layout: the device env (task in torch on the GPU), physics alone, whole teacher iterations and
# the PPO update, one JSON line (llp bench gpu)
python3 - <<'PY' | tail -1 | tee "$OUT/bench_gpu.json"
import json
from llp.bench.gpu import run
print(json.dumps(run(device="cuda", num_envs=(4096, 16384, 32768), steps=50, iterations=3)))
PY
