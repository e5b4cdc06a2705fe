#!/usr/bin/env bash
# tests/kernels/cuda_compile.sh SRC_DIR OUT_DIR: compile every kernels/cuda/*.cu with nvcc for
# the GPU build's architectures (sm_80, sm_90), so the default CPU build and CI, which have no
# GPU and no CUDA-enabled StarPU, still prove the CUDA sources build. CTest skip code
# 77, saying so, when no nvcc is installed (CUDA_HOME, default /usr/local/cuda).
set -euo pipefail
src=$1 out=$2
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
if [ ! -x "$nvcc" ]; then
  echo "SKIP cuda_compile: no nvcc at $nvcc (set CUDA_HOME)"
  exit 77
fi
mkdir -p "$out"
n=0
for f in "$src"/kernels/cuda/*.cu; do
  o=$out/$(basename "$f" .cu).o
  "$nvcc" -c -O3 -Werror all-warnings -Xcompiler -Wall,-Wextra \
    -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
    -I "$src/kernels" "$f" -o "$o"
  echo "ok   $(basename "$f"): sm_80 and sm_90"
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "FAIL cuda_compile: no kernels/cuda/*.cu in $src"; exit 1; }
echo "cuda_compile: $n CUDA source(s) built"
