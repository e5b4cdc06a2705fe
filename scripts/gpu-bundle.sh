#!/usr/bin/env bash
# scripts/gpu-bundle.sh: the GPU build and everything it needs at run time, in one archive for a
# GPU machine that can reach no package registry (the lent device machines: docs/cuda.md).
#
#   scripts/gpu-bundle.sh [ARCHIVE]      (default: build-gpu/zt-gpu-bundle.tar.xz)
#
# Builds StarPU with CUDA and the -DZT_USE_CUDA=ON tree here (scripts/build-starpu-cuda.sh,
# CUDA archs 80 and 90), then packs, with paths relative to the repository root:
#   - build-cuda's programs and test programs, StarPU's library and every CTestTestfile.cmake
#     (the absolute paths in them are this checkout's: scripts/gpu-check.sh links them);
#   - data/fortunes.bin (the demo corpus, for bench/gpu_step.py);
#   - build-gpu/sysroot: the Debian libraries those programs load that a CUDA image may lack
#     (cJSON, liburing, OpenBLAS, hwloc, ...) and Open MPI with PMIx, its programs and plugins,
#     each under its Debian path, relocated at run time through OPAL_PREFIX.
# Left out on purpose: glibc, libstdc++ (the newer system's work for binaries built here, which
# ask for GLIBC_2.34 at most) and the CUDA libraries (cudart, cuBLAS, NCCL: the device's own
# toolkit and driver, found by scripts/gpu-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
archive=${1:-build-gpu/zt-gpu-bundle.tar.xz}
case "$archive" in /*) ;; *) archive=$root/$archive ;; esac
jobs=${ZT_JOBS:-$(nproc)}

bash scripts/build-starpu-cuda.sh build-cuda
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DZT_USE_CUDA=ON > /dev/null
cmake --build build-cuda -j"$jobs" --target zt-train zt-trace test_cuda_kernels
[ -f data/fortunes.bin ] || bash scripts/prepare-demo.sh

sys=build-gpu/sysroot
rm -rf "$sys" && mkdir -p "$sys"
progs=(build-cuda/apps/zt-train build-cuda/apps/zt-trace build-cuda/tests/kernels/test_cuda_kernels)
mpi_pkgs="libopenmpi3 openmpi-bin openmpi-common libpmix2"

# the packaged files of Open MPI and PMIx, under their own paths (docs are not needed)
dpkg -L $mpi_pkgs | grep -v -e '^/usr/share/doc' -e '^/usr/share/man' -e '^/usr/share/lintian' |
  while read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done > build-gpu/files.txt
# every shared library the programs and those files load, less glibc, the C++ runtime and CUDA
skip='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libcusparse|libnvJitLink|libcufft|libcurand|libnvrtc)\.so'
{ printf '%s\n' "${progs[@]}" build-cuda/starpu/lib/libstarpu-1.3.so.9; cat build-gpu/files.txt; } |
  while read -r f; do
    file -L "$f" | grep -q ELF || continue
    ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
  done | sort -u | grep -v -E "$skip" | awk '{print $2}' >> build-gpu/files.txt
sort -u build-gpu/files.txt | while read -r f; do
  real=$(readlink -f "$f")
  dest=$sys$(dirname "$f" | sed 's#^/lib/#/usr/lib/#')/$(basename "$f")
  mkdir -p "$(dirname "$dest")"
  cp -L "$real" "$dest"
done
# Debian's mpirun is a chain of alternatives to orterun: one real program under both names
cp -L /usr/bin/orterun "$sys/usr/bin/mpirun"
cp -L /usr/bin/orterun "$sys/usr/bin/mpiexec"

mkdir -p "$(dirname "$archive")"
find build-cuda -name CTestTestfile.cmake > build-gpu/pack.txt
printf '%s\n' "${progs[@]}" data/fortunes.bin "$sys" >> build-gpu/pack.txt
ls build-cuda/starpu/lib/libstarpu-1.3.so* >> build-gpu/pack.txt
tar -cJf "$archive" -T build-gpu/pack.txt
echo "gpu-bundle: $archive ($(du -h "$archive" | cut -f1)), built from $(git rev-parse --short HEAD)"
