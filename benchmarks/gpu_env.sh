# Sourced by the prepared GPU calls (gpu_closed_loop.sh, runtime_speed.sh): unbuffered logs, $OUT,
# the repository on PYTHONPATH, the allocator the runtime's ranks use (ALLOC_CONF= (empty) runs
# torch's default instead), and $OUT/device.txt (GPU, driver, torch, CUDA, triton).
export PYTHONUNBUFFERED=1  # partial logs come back if a step is cut off
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
export PYTORCH_CUDA_ALLOC_CONF=${ALLOC_CONF-expandable_segments:True}
[ -z "$PYTORCH_CUDA_ALLOC_CONF" ] && unset PYTORCH_CUDA_ALLOC_CONF
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  python3 -c "import triton; print('triton', triton.__version__)"
  echo "PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-}"; } > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
SECONDS=0
