#!/usr/bin/env bash
# scripts/test.sh: README command 2 (and what .ci/run calls). Installs dependencies if missing,
# builds, and runs every test with CTest; then builds again with AddressSanitizer +
# UndefinedBehaviorSanitizer and runs the whole suite under them. Between the two, the GPU build
# (StarPU with CUDA, -DZT_USE_CUDA=ON) is built and checked where nvcc exists.
# Last, each reader of untrusted files is fuzzed for a bounded time (scripts/fuzz.sh,
# docs/fuzzing.md). ZT_TEST_SANITIZE=0 skips the sanitizer pass, ZT_TEST_CUDA=0 the GPU build,
# ZT_TEST_FUZZ=0 the fuzzing (quick local runs); ZT_TEST_FUZZ_SECONDS sets its time per target.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
jobs=${ZT_TEST_JOBS:-2}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
(cd build && ctest --output-on-failure -j"$jobs")
# The GPU build (docs/cuda.md): no GPU here or in CI, but every CUDA source and every
# ZT_USE_CUDA/ZT_USE_NCCL path of the C code must build; its device tests skip (77) without a
# device, and without one it must train exactly as the CPU build does. ZT_TEST_CUDA=0 skips it.
if [ "${ZT_TEST_CUDA:-1}" != 0 ] && [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
  bash scripts/build-starpu-cuda.sh build-cuda
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DZT_USE_CUDA=ON >/dev/null
  cmake --build build-cuda -j2
  (cd build-cuda && ctest --output-on-failure -R test_cuda_kernels)
  rc=0
  /usr/bin/python3 tests/graph/test_cuda_build.py build/apps/zt-train build-cuda/apps/zt-train \
    "$(command -v mpiexec)" build-cuda/test_cuda_build || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc" # 77: skipped (a GPU machine), said why
fi
if [ "${ZT_TEST_SANITIZE:-1}" != 0 ]; then
  # float-cast-overflow: gcc leaves it out of "undefined" (a float too large for its integer)
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DZT_SANITIZE=address,undefined,float-cast-overflow >/dev/null
  cmake --build build-asan -j2
  # slow unwinding: leaks inside hwloc plugins (dlclosed at exit) then show their libhwloc frame
  # and match tests/lsan.supp instead of an unnamed module; 24 frames reach those library frames
  # (16 do not), and each allocation's stack costs less than with the default 30
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1:fast_unwind_on_malloc=0:malloc_context_size=24
  export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  (cd build-asan && ctest --output-on-failure -j"$jobs" -LE nosan)
fi
if [ "${ZT_TEST_FUZZ:-1}" != 0 ]; then
  bash scripts/fuzz.sh "${ZT_TEST_FUZZ_SECONDS:-15}"
fi
