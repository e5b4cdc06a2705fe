#!/usr/bin/env bash
# scripts/test.sh: README command 2 (and what .ci/run calls). Installs dependencies if missing,
# builds, and runs every test with CTest; then builds again with AddressSanitizer +
# UndefinedBehaviorSanitizer and runs the whole suite under them.
# ZT_TEST_SANITIZE=0 skips the sanitizer pass (for a quick local run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
jobs=${ZT_TEST_JOBS:-2}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
(cd build && ctest --output-on-failure -j"$jobs")
if [ "${ZT_TEST_SANITIZE:-1}" != 0 ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZT_SANITIZE=address,undefined >/dev/null
  cmake --build build-asan -j2
  # slow unwinding: leaks inside hwloc plugins (dlclosed at exit) then show their libhwloc frame
  # and match tests/lsan.supp instead of an unnamed module
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1:fast_unwind_on_malloc=0
  export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  (cd build-asan && ctest --output-on-failure -j"$jobs" -LE nosan)
fi
