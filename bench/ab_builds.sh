#!/usr/bin/env bash
# bench/ab_builds.sh: one benchmark against two builds of zerotask, alternating, in one run (the
# machines are noisy: a before/after comparison is only fair within one session).
#
#   bench/ab_builds.sh BUILD_A BUILD_B ROUNDS COMMAND...
#
# COMMAND runs ROUNDS times per build, A then B each round; every {build} in it becomes the
# build directory and every {side} "a" or "b". Each run's output goes to stdout under a
# "=== round R a|b BUILD" line. E.g. the code before a change in a worktree, built there:
#   git worktree add ../before HEAD~3 && cmake -S ../before -B ../before/build ... && \
#   bench/ab_builds.sh ../before/build build 3 \
#     /usr/bin/python3 bench/train_vs_torch.py --build {build} --reps 1 --out /tmp/ab_{side}
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: bench/ab_builds.sh BUILD_A BUILD_B ROUNDS COMMAND... ({build}, {side} replaced)" >&2
  exit 2
fi
a=$1 b=$2 rounds=$3
shift 3
for dir in "$a" "$b"; do
  [ -x "$dir/apps/zt-train" ] || { echo "ab_builds: $dir/apps/zt-train missing (build it first)" >&2; exit 2; }
done
case $rounds in ''|*[!0-9]*) echo "ab_builds: ROUNDS must be a number, got '$rounds'" >&2; exit 2 ;; esac
for ((r = 1; r <= rounds; r++)); do
  for side in a b; do
    build=$a; [ "$side" = b ] && build=$b
    echo "=== round $r $side $build $(date -u +%H:%M:%S)"
    cmd=()
    for word in "$@"; do word=${word//\{build\}/$build}; cmd+=("${word//\{side\}/$side}"); done
    "${cmd[@]}"
  done
done
