#!/usr/bin/env bash
# The GPU check: run on a machine with a CUDA device, from the repository root, in an environment where the project is
# installed (pip install -e '.[test]'). About 5 minutes. Prints, and writes under ${OUT:-gpu_check}/:
#   1. the device-marked tests (tests/core/test_device.py: every space samples, scores and trains on CUDA, and its
#      log-densities match the CPU's);
#   2. one short run of every single-run experiment with --device cuda (the run-folder contract, metrics.json), and one
#      of JSP-GFN with the solver head;
#   3. the time of the same hypergrid run on CUDA and on one CPU thread, as a ratio.
# Nothing here is asserted beyond the tests and the runs' exit codes: put the figures in docs/results.md with the GPU's name.
set -euo pipefail
OUT="${OUT:-gpu_check}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device visible to torch'; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
python -m pytest -m device -q -p no:cacheprovider 2>&1 | tee "$OUT/device_tests.txt" || echo "device tests FAILED (see $OUT/device_tests.txt); the runs go on"
declare -A SHORT=(
  [hypergrid]="steps=300 eval_every=100"
  [quarter-disc]="steps=200 eval_every=100 eval_samples=2000"
  [sde]="steps=200 eval_every=100"
  [jsp-gfn]="steps=200 eval_every=100 prefill=100"
)
for exp in "${!SHORT[@]}"; do
  /usr/bin/time -f "$exp cuda %e s" gflownet-measure run "$exp" --preset quick --device cuda --out "$OUT/$exp" --overwrite --set ${SHORT[$exp]} > "$OUT/$exp.log" 2>&1 \
    || { echo "$exp FAILED (see $OUT/$exp.log)"; tail -5 "$OUT/$exp.log"; }
  tail -1 "$OUT/$exp.log"
done
# JSP-GFN's solver head and lookahead on the GPU (d = 5, linear: Newton steps through the closed-form precision)
/usr/bin/time -f "jsp-gfn solver cuda %e s" gflownet-measure run jsp-gfn --preset quick --device cuda --out "$OUT/jsp-solver" --overwrite --set d=5 theta_head=solver lookahead=on steps=200 eval_every=100 prefill=100 > "$OUT/jsp-solver.log" 2>&1 \
  || { echo "jsp-gfn solver FAILED (see $OUT/jsp-solver.log)"; tail -5 "$OUT/jsp-solver.log"; }
tail -1 "$OUT/jsp-solver.log"
for device in cuda cpu; do
  /usr/bin/time -f "hypergrid quick, $device: %e s" gflownet-measure run hypergrid --preset quick --device "$device" --threads 1 --out "$OUT/speed-$device" --overwrite > /dev/null 2>> "$OUT/speed.txt" || true
done
cat "$OUT/speed.txt"
