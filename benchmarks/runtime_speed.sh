#!/usr/bin/env bash
# One prepared GPU call (device tool) for issue 49: the compiled path's CUDA tests, then
# benchmarks/runtime_speed.py on the bundled 320M and 1.3B GPTs (bf16, global batch 32, microbatch 8:
# plain eager and plain torch.compile loops, heteroplan eager, graphs, compiled, compiled+graphs:
# iteration time, TFLOP/s, MFU, peak memory, closed-loop errors). Results go to $OUT
# (device.txt, cuda_tests.txt, speed_<model>.json and .txt). Not yet run on a GPU: the budget
# below is an estimate (320M ~3-4 min, 1.3B ~4-5 min on an H100); MODELS="320m" or "1.3b" splits it
# over two calls. Env: MODELS, PRECISION (bf16), GBS (32), MBS (8), STEPS (6), VARIANTS, CUDA_TESTS (1),
# SPEED_S (per-model timeout, 420), EXTRA (more flags for runtime_speed.py).
set -u
source "$(dirname "$0")/gpu_env.sh"  # $OUT, PYTHONPATH, the allocator, device.txt, SECONDS=0
if [ "${CUDA_TESTS:-1}" = 1 ]; then  # compiled (alone and graphed) against eager, float64
  timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_cuda.py -k compiled > "$OUT/cuda_tests.txt" 2>&1
  echo "cuda tests rc=$? after ${SECONDS}s"; tail -3 "$OUT/cuda_tests.txt"
fi
for model in ${MODELS:-320m 1.3b}; do
  timeout "${SPEED_S:-420}" python3 benchmarks/runtime_speed.py --device cuda --models "$model" \
      --precision "${PRECISION:-bf16}" --gbs "${GBS:-32}" --mbs "${MBS:-8}" --steps "${STEPS:-6}" \
      --variants ${VARIANTS:-eager graphs compiled compiled+graphs} --out "$OUT/speed_$model.json" ${EXTRA:-} \
      > "$OUT/speed_$model.txt" 2>&1
  echo "$model rc=$? after ${SECONDS}s"; tail -12 "$OUT/speed_$model.txt"
done
