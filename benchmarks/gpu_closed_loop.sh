#!/usr/bin/env bash
# One prepared GPU session (device tool): the CUDA tests, then the closed loop on the issue's
# ~320M-parameter GPT (24 blocks, width 1024, 16 heads, sequence 512, vocab 8192, global batch 32)
# at microbatch 1-8 in fp32 and bf16, with and without recomputation. Results go to $OUT
# (closed_loop_gpu.json, the profiles as profiles.tgz, the logs), after benchmarks/step_vs_profile.py (PROBE=1,
# ~40 s). Device time on an H100 (session 16): profiling both precisions with REPEATS=4 SWEEPS=2 and
# --time-recomputed ~2 min each, a plan ~20 s: the whole 16-plan matrix needs ~8-9 minutes;
# PRECISIONS=bf16 STEPS=4 ran in 325 s. Session 20 (H100): CUDA tests 46 s, PROBE 86 s, the bf16
# matrix 275 s (profile 104 s): 407 s with PRECISIONS=bf16 STEPS=4 REPEATS=4 SWEEPS=2; both
# precisions do not fit one 600 s call. CLOSED_LOOP=0 skips the closed loop (e.g. PROBE only).
set -u
source "$(dirname "$0")/gpu_env.sh"  # $OUT, PYTHONPATH, the allocator, device.txt, SECONDS=0
if [ "${CUDA_TESTS:-1}" = 1 ]; then
  timeout 180 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_cuda.py > "$OUT/cuda_tests.txt" 2>&1
  tail -3 "$OUT/cuda_tests.txt"
fi
if [ "${PROBE:-1}" = 1 ]; then  # whole-model microbatch: isolated vs back-to-back (benchmarks/step_vs_profile.py)
  timeout "${PROBE_S:-180}" python3 benchmarks/step_vs_profile.py --device cuda --layers 24 --width 1024 --heads 16 \
      --seq 512 --vocab 8192 --mbs 1 2 4 8 --repeats 3 --microbatches 8 > "$OUT/probe.txt" 2>&1
  echo "probe rc=$? after ${SECONDS}s"; cp benchmarks/results/step_vs_profile.json "$OUT/" 2>/dev/null; tail -10 "$OUT/probe.txt"
fi
[ "${CLOSED_LOOP:-1}" = 1 ] && timeout "${CLOSED_LOOP_S:-300}" python3 benchmarks/closed_loop.py --device cuda --layers 24 --width 1024 --heads 16 \
    --seq 512 --vocab 8192 --gbs 32 --mbs 1 2 4 8 --steps ${STEPS:-6} --precisions ${PRECISIONS:-bf16 fp32} --repeats ${REPEATS:-5} --sweeps ${SWEEPS:-2} --warmup 1 --time-recomputed \
    --profile-dir "$OUT/prof" --out closed_loop_gpu ${CLOSED_LOOP_ARGS:-} > "$OUT/closed_loop.txt" 2>&1
echo "closed loop rc=$? after ${SECONDS}s"
cp benchmarks/results/closed_loop_gpu.json "$OUT/" 2>/dev/null
[ -d "$OUT/prof" ] && tar czf "$OUT/profiles.tgz" -C "$OUT" prof && rm -rf "$OUT/prof"
tail -25 "$OUT/closed_loop.txt"
