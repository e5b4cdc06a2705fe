#!/usr/bin/env bash
# scripts/build-starpu-cuda.sh: StarPU 1.3 with CUDA, for zerotask's GPU build (-DZT_USE_CUDA=ON).
#
# Debian's libstarpu has no CUDA (and STARPU_MAXCPUS=4), so this builds Debian's own source
# package (apt-get source starpu, through scripts/setup-deps.sh --starpu-src) with the CUDA
# Toolkit in /usr/local/cuda and the fixes CUDA 13 needs
# (scripts/patches/starpu-1.3.10-cuda13.patch: cudaDeviceProp.computeMode is gone; cublas.h and
# cublas_v2.h may no longer meet in one file),
# and installs it into a prefix inside the build tree, never over Debian's:
#
#   scripts/build-starpu-cuda.sh [BUILD_DIR]        (default: build-cuda)
#     -> BUILD_DIR/starpu/{include,lib,lib/pkgconfig/starpu-1.3.pc}
#   cmake -S . -B build-cuda -DZT_USE_CUDA=ON       (finds that prefix by itself; rpath to it)
#
# Limits (PLATFORM.md items 1, 3, 4): 64 CPU workers, 8 CUDA devices, 16 memory nodes; no MPI,
# OpenCL, FFT, Fortran or examples (zerotask uses none of them). nvcc needs no GPU to build, and
# the driver library is the toolkit's stub here, so the result links on a machine without a GPU;
# StarPU then starts with no CUDA worker. Idempotent: an existing CUDA-enabled prefix is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
b=${1:-build-cuda}
case "$b" in /*) ;; *) b=$root/$b ;; esac
cuda=${CUDA_HOME:-/usr/local/cuda}
prefix=$b/starpu
conf=$prefix/include/starpu/1.3/starpu_config.h
if [ -f "$prefix/lib/pkgconfig/starpu-1.3.pc" ] &&
   grep -q "define STARPU_USE_CUDA 1" "$conf" 2>/dev/null; then
  echo "build-starpu-cuda: $prefix already has StarPU with CUDA"
  exit 0
fi
if [ ! -x "$cuda/bin/nvcc" ]; then
  echo "build-starpu-cuda: error: no nvcc in $cuda/bin (set CUDA_HOME to the CUDA Toolkit)" >&2
  exit 1
fi
bash scripts/setup-deps.sh --starpu-src "$b/starpu-src"
src=$(ls -d "$b"/starpu-src/starpu-1.3*/ | head -n 1)
src=${src%/}
if [ ! -f "$src/.zt-cuda13-patched" ]; then
  patch -d "$src" -p1 --forward < scripts/patches/starpu-1.3.10-cuda13.patch
  touch "$src/.zt-cuda13-patched"
fi
libdir=$cuda/lib64
[ -d "$libdir" ] || libdir=$cuda/lib
echo "build-starpu-cuda: configuring $src (CUDA in $cuda) -> $prefix"
(cd "$src" && ./configure --prefix="$prefix" \
   --enable-cuda --with-cuda-dir="$cuda" --with-cuda-lib-dir="$libdir" \
   --enable-maxcpus=64 --enable-maxcudadev=8 --enable-maxnodes=16 \
   --disable-opencl --disable-socl --disable-starpufft --disable-mpi --without-fxt \
   --disable-build-doc --disable-build-tests --disable-build-examples --disable-fortran \
   --disable-sc-hypervisor --disable-starpurm --disable-mlr --disable-openmp \
   > "$b/starpu-configure.log" 2>&1) || {
  echo "build-starpu-cuda: error: configure failed, see $b/starpu-configure.log" >&2
  exit 1
}
grep -q "CUDA   enabled: yes" "$b/starpu-configure.log" || {
  echo "build-starpu-cuda: error: configure did not enable CUDA, see $b/starpu-configure.log" >&2
  exit 1
}
echo "build-starpu-cuda: building (make -j${ZT_JOBS:-2}; a few minutes)"
(cd "$src" && make -j"${ZT_JOBS:-2}" > "$b/starpu-make.log" 2>&1 &&
   make install >> "$b/starpu-make.log" 2>&1) || {
  echo "build-starpu-cuda: error: the build failed, see $b/starpu-make.log" >&2
  exit 1
}
grep -q "define STARPU_USE_CUDA 1" "$conf"
ver=$(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/starpu-1.3.pc")
echo "build-starpu-cuda: installed StarPU $ver with CUDA in $prefix"
