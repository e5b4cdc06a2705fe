#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [READER...]: fuzzes the readers of untrusted files with libFuzzer
# (docs/fuzzing.md). Builds build-fuzz (clang, -DZT_FUZZ=ON, AddressSanitizer +
# UndefinedBehaviorSanitizer), then runs each target for SECONDS (default 60), two at a time,
# starting from its seed corpus (tests/fuzz/corpus/<reader>, never modified) plus what earlier
# runs found (build-fuzz/corpus/<reader>). A crash, leak, sanitizer report, timeout or
# out-of-memory input is a finding: it is kept as build-fuzz/findings/<reader>-*, and the script
# exits 1. Readers: safetensors tokens data_spec config ckpt_meta ckpt_shard replay tokenizer prompts
# serve_request (default: all).
# ZT_FUZZ_JOBS sets how many targets run at once, ZT_FUZZ_BUILD the build folder (build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
readers=("$@")
[ ${#readers[@]} -gt 0 ] ||
  readers=(safetensors tokens data_spec config ckpt_meta ckpt_shard replay tokenizer prompts serve_request)
case "$secs" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, got '$secs'" >&2
                            exit 2 ;; esac
b=${ZT_FUZZ_BUILD:-build-fuzz}
CC=clang cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZT_FUZZ=ON \
  -DZT_SANITIZE=address,undefined >/dev/null
cmake --build "$b" -j2 --target $(printf 'fuzz_%s ' "${readers[@]}")
mkdir -p "$b/findings" "$b/logs"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TMPDIR=${TMPDIR:-/tmp}
fuzz_one() {
  local r=$1 log=$b/logs/$1.log
  mkdir -p "$b/corpus/$r"
  # -timeout: one input over 10 s is a hang finding; -rss_limit_mb: one over 2 GB a memory one
  if "$b/tests/fuzz/fuzz_$r" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$b/findings/$r-" \
       "$b/corpus/$r" "tests/fuzz/corpus/$r" >"$log" 2>&1; then
    echo "fuzz $r: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | \
      grep -o '[0-9]*$') runs, $(grep -o 'cov: [0-9]*' "$log" | tail -1), no finding"
  else
    echo "fuzz $r: FINDING (log $log; input $b/findings/$r-*)"
    grep -m5 -E "ERROR|fuzz finding|runtime error|SUMMARY" "$log" || tail -20 "$log"
    return 1
  fi
}
export -f fuzz_one
export secs b
printf '%s\n' "${readers[@]}" | xargs -P "${ZT_FUZZ_JOBS:-2}" -I{} bash -c 'fuzz_one {}'
