#!/usr/bin/env bash
# scripts/gpu-check.sh: everything a GPU machine can tell about zerotask's GPU path, in one call
# of about 10 minutes (docs/cuda.md).
#
#   scripts/gpu-check.sh --pack    on a CPU machine: build the GPU tree and its bundle
#                                  (scripts/gpu-bundle.sh), then run the checks: the device
#                                  steps skip, so the script itself is checked before device time
#   scripts/gpu-check.sh           on the GPU machine: unpack the carried bundle
#                                  (build-gpu/zt-gpu-bundle.tar.xz) when build-cuda is absent,
#                                  then run the checks
#
# The device machines reach no package registry, so what they need comes built in the bundle
# rather than installed there. Every step has its own time limit, so one that hangs leaves the
# rest their time. Results go to $OUT (default build-gpu/out), at most 8 files:
#   summary.txt   one line per step: ok, FAIL or skip, its seconds and what it says
#   env.txt       the machine: nvidia-smi, CPU, libraries each program resolves
#   ctest.log     ctest -L cuda: every CUDA kernel against its CPU twin, nvcc for sm_80/sm_90,
#                 the small model's whole step on the GPU (test_cuda_model)
#   sweep.log     bench/gpu_sweep.py: gpt2-124M's step under several settings (graph chunks,
#                 CUDA pipeline, streams, offload, bf16) and the GPU time per kind of task
#   gpu_step.log, gpu_step.json   bench/gpu_step.py against PyTorch on the same GPU
#   nccl.log      two ranks on the one GPU: NCCL against MPI
#   model.log     tests/graph/test_cuda_model.py on gpt2-124M: GPU vs CPU, ZeRO-Offload, bf16,
#                 then zt-trace summary of its GPU run
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
OUT=${OUT:-$root/build-gpu/out}
mkdir -p "$OUT" build-gpu/work
summary=$OUT/summary.txt
: > "$summary"
start=$(date +%s)

say() { echo "gpu-check: $*" | tee -a "$summary"; }

# step NAME LIMIT_S LOG CMD...: run CMD with a time limit, its output into LOG; one summary line.
# Exit 77 is a skip (CTest's code); 124 the time limit.
step() {
  local name=$1 limit=$2 log=$3 t0 rc verdict
  shift 3
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >> "$log" 2>&1
  rc=$?
  case $rc in
    0) verdict=ok ;;
    77) verdict=skip ;;
    124|137) verdict="FAIL (time limit ${limit}s)" ;;
    *) verdict="FAIL (exit $rc)" ;;
  esac
  printf '%-10s %-24s %4ds  %s\n' "$verdict" "$name" $(($(date +%s) - t0)) \
    "$(grep -v '^\s*$' "$log" | tail -n 1 | cut -c1-160)" | tee -a "$summary"
  return 0
}

has_gpu() { nvidia-smi -L 2>/dev/null | grep -q GPU; }

[ "${1:-}" = --pack ] && { bash scripts/gpu-bundle.sh || exit 1; }
if [ ! -x build-cuda/apps/zt-train ] && [ -f build-gpu/zt-gpu-bundle.tar.xz ]; then
  say "unpacking build-gpu/zt-gpu-bundle.tar.xz"
  tar -xJf build-gpu/zt-gpu-bundle.tar.xz || exit 1
fi
[ -x build-cuda/apps/zt-train ] || {
  say "error: no build-cuda/apps/zt-train: run scripts/gpu-check.sh --pack on a CPU machine" \
      "and carry build-gpu/zt-gpu-bundle.tar.xz"
  exit 1
}
# the CTest files name this checkout's paths as the bundle was built: make them resolve here
origin=$(sed -n 's/^# Build directory: //p' build-cuda/CTestTestfile.cmake | head -n 1)
origin=${origin%/build-cuda}
if [ -n "$origin" ] && [ "$origin" != "$root" ] && [ ! -e "$origin" ]; then
  mkdir -p "$(dirname "$origin")" && ln -s "$root" "$origin" && say "linked $origin -> $root"
fi

# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh

{
  date -u; uname -a; nvidia-smi 2>&1 | head -n 20; nvidia-smi -L 2>&1
  lscpu | grep -E 'Model name|^CPU\(s\)|Flags'; free -g | head -n 2
  echo "nvcc: $(command -v nvcc) $(nvcc --version 2>/dev/null | tail -n 1)"
  echo "python3: $(command -v python3) $(python3 -c 'import torch; print(torch.__version__,
  torch.cuda.is_available())' 2>&1 | tail -n 1)"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; echo "CUDA library dirs: $ZT_CUDA_LIBDIRS"
  for p in build-cuda/apps/zt-train build-cuda/tests/kernels/test_cuda_kernels "$(command -v mpirun)"; do
    echo "== ldd $p"; ldd "$p" 2>&1
  done
} > "$OUT/env.txt" 2>&1
missing=$(ldd build-cuda/apps/zt-train build-cuda/tests/kernels/test_cuda_kernels | grep -c 'not found')
say "$(nvidia-smi -L 2>/dev/null | head -n 1 || echo 'no GPU'); $missing libraries not found"

# the kernels, then the whole step on the small model first: when that fails on a GPU, the
# gpt2-124M steps would only repeat it, and the device time they would take is saved
(cd build-cuda && step "ctest -L cuda" 200 "$OUT/ctest.log" \
  ctest -L cuda --output-on-failure -j2)
if has_gpu && grep -q "test_cuda_model .*\(Failed\|Timeout\)" "$OUT/ctest.log"; then
  say "skipping the gpt2-124M steps and gpu_step: the small model failed on the GPU (ctest.log)"
  heavy=0
else
  heavy=1
fi
if has_gpu && [ "$heavy" = 1 ]; then
  step "settings sweep" 200 "$OUT/sweep.log" python3 bench/gpu_sweep.py --build build-cuda \
    --out build-gpu/work/sweep
  step "gpu_step vs PyTorch" 200 "$OUT/gpu_step.log" python3 bench/gpu_step.py \
    --build build-cuda --peer python3 --configs gpt2-124M --steps 6 --json "$OUT/gpu_step.json"
else
  echo "no GPU: bench/gpu_sweep.py and bench/gpu_step.py need one" > "$OUT/gpu_step.log"
  step "gpu_step vs PyTorch" 10 "$OUT/gpu_step.log" sh -c 'exit 77'
fi
step "NCCL, 2 ranks, 1 GPU" 60 "$OUT/nccl.log" bash scripts/gpu-nccl-check.sh build-gpu/work/nccl
if [ "$heavy" = 1 ]; then
  ZT_TEST_RUN_LIMIT=60 step "gpt2-124M GPU vs CPU" 240 "$OUT/model.log" \
    python3 tests/graph/test_cuda_model.py build-cuda/apps/zt-train \
    bench/configs/gpt2-124M_model.json build-gpu/work/model 3
fi
trace=build-gpu/work/model/fp32_gpu_trace.json
if [ -f "$trace" ]; then
  step "trace summary" 60 "$OUT/model.log" build-cuda/apps/zt-trace summary "$trace"
fi
say "done in $(($(date +%s) - start)) s; results in $OUT"
! grep -q '^FAIL' "$summary"
