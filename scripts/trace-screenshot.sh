#!/usr/bin/env bash
# scripts/trace-screenshot.sh: regenerate docs/img/trace-viewer.png, the picture of a trace in
# docs/traces.md. Records `zt-train --trace` of a 2-rank ZeRO stage 2 run
# (configs/demo_zero2_ds.json, bench/configs/small_model.json, 2 steps, a checkpoint after the
# last) in a temporary directory, embeds the trace in a copy of docs/trace-viewer.html (offline:
# ui.perfetto.dev needs the network) and screenshots it, 1600x900, with headless Chromium: the
# end of step 2's backward pass, its reduce-scatters and all-gathers, and the checkpoint writes,
# one reduce-scatter selected. Needs `scripts/setup-deps.sh --docs` (Chromium) and
# data/fortunes.bin (made here with scripts/prepare-demo.sh when missing).
# Usage: scripts/trace-screenshot.sh [PATH/TO/zt-train [OUT.png]]
#        (defaults build/apps/zt-train, docs/img/trace-viewer.png)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
train="$(realpath "${1:-$root/build/apps/zt-train}")"
out="$(realpath -m "${2:-$root/docs/img/trace-viewer.png}")"
# the window: step 2's all-gathers and 100 ms either side
view="step=2&focus=comm_allgather&pad=100&select=comm_reduce_scatter"

if [[ ! -x "$train" ]]; then
  echo "zerotask: error: zt-train not found at $train (build first: cmake --build build)" >&2
  exit 1
fi
if ! command -v chromium >/dev/null; then
  echo "zerotask: error: chromium not found (run scripts/setup-deps.sh --docs)" >&2
  exit 1
fi
bash "$root/scripts/prepare-demo.sh" "$(dirname "$train")/zt-prepare" >/dev/null

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

# 2 ranks, 2 CPU workers each: two worker lanes and an I/O thread lane per rank
mpirun --allow-run-as-root --oversubscribe -np 2 -x STARPU_NCPU=2 "$train" \
    --ds-config "$root/configs/demo_zero2_ds.json" --model "$root/bench/configs/small_model.json" \
    --data "$root/data/fortunes.bin" --steps 2 --save-dir ckpt --trace trace.json --quiet

# the trace goes in at the viewer's zt-trace-embed line (the JSON is a JavaScript expression)
awk -v f=trace.json '
  /<!-- zt-trace-embed -->/ {
    print "<script>window.ztTraceName = \"zt-train, 2 ranks, ZeRO stage 2\";"
    printf "window.ztTrace = "
    while ((getline line < f) > 0) print line
    print ";</script>"
    next
  }
  { print }' "$root/docs/trace-viewer.html" > view.html

# the viewer draws while the page loads, so the screenshot taken at load shows it;
# --no-sandbox: Chromium's sandbox cannot start as root or in most containers
mkdir -p "$(dirname "$out")"
if ! chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1600,900 \
    --screenshot="$out" "file://$tmp/view.html?$view" >chromium.log 2>&1; then
  cat chromium.log >&2
  echo "zerotask: error: chromium failed" >&2
  exit 1
fi
echo "trace-screenshot: wrote $out ($(stat -c %s "$out") bytes)"
