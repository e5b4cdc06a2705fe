#!/usr/bin/env python3
"""tests/apps/test_trace.py: `zt-train --trace` writes a Chrome trace-event JSON that Perfetto
opens: one complete ("X") event per task with kind, layer, micro-batch, worker, start and
duration; per-worker events never overlap; every step has the same task census; and the task
kinds of a training step (forward, backward, gradient norm, AdamW) are all there. Every task
also carries its id, submit time, memory node, bytes read and written and the ids it depends
on: each dependency is a task of the trace that ended before the task started, every task after
the first step has one, and each has a flow arrow (an "s" and an "f" event with one id, on the
two tasks' threads). The replay file (trace.ztr, version 4) has one line per task with the same
id, times, recompute mark (none here: nothing is checkpointed; an event's name is its kind) and
dependencies.

Usage: test_trace.py ZT_TRAIN WORKDIR
"""
import collections
import json
import os
import struct
import subprocess
import sys

ZT, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
model, ds, data, trace = (os.path.join(WORK, f) for f in
                          ("model.json", "ds.json", "tokens.bin", "trace.json"))
with open(model, "w") as f:
    json.dump({"vocab_size": 32, "seq_len": 8, "n_embd": 16, "n_layer": 2, "n_head": 2}, f)
with open(ds, "w") as f:
    json.dump({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}, f)
toks = [i % 32 for i in range(500)]
with open(data, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))

STEPS = 3
p = subprocess.run([ZT, "--ds-config", ds, "--model", model, "--data", data, "--steps",
                    str(STEPS), "--trace", trace, "--quiet"], capture_output=True, text=True,
                   timeout=300)
bad = []
if p.returncode != 0:
    print("FAIL zt-train exit %d: %s" % (p.returncode, p.stderr))
    sys.exit(1)
with open(trace) as f:
    doc = json.load(f)
ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
meta = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
ncpu = int(os.environ.get("STARPU_NCPU", "2"))
if not any(e["name"] == "thread_name" for e in meta):
    bad.append("no thread_name metadata (Perfetto would show bare thread ids)")
for e in ev:
    a = e.get("args", {})
    for k in ("kind", "step", "layer", "mb", "worker", "node", "id", "submit", "bytes_read",
              "bytes_written", "prio", "deps"):
        if k not in a:
            bad.append("event %s lacks args.%s" % (e.get("name"), k))
            break
    if not (isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))
            and e["ts"] >= 0 and e["dur"] >= 0):
        bad.append("event %s has bad ts/dur" % e.get("name"))
    if not 0 <= a.get("worker", -1) < ncpu or e.get("tid") != a.get("worker"):
        bad.append("event %s: worker %s outside 0..%d" % (e.get("name"), a.get("worker"), ncpu - 1))
    if not 1 <= a.get("step", 0) <= STEPS:
        bad.append("event %s: step %s" % (e.get("name"), a.get("step")))
# a worker runs one task at a time: its events must not overlap (1 us slack for rounding)
by_tid = collections.defaultdict(list)
for e in ev:
    by_tid[e["tid"]].append((e["ts"], e["ts"] + e["dur"], e["name"]))
for tid, xs in by_tid.items():
    xs.sort()
    for (s0, e0, n0), (s1, e1, n1) in zip(xs, xs[1:]):
        if s1 < e0 - 1.0:
            bad.append("worker %d runs %s and %s at once" % (tid, n0, n1))
            break
census = [collections.Counter(e["args"]["kind"] for e in ev if e["args"]["step"] == s)
          for s in range(1, STEPS + 1)]
if any(c != census[0] for c in census):
    bad.append("steps differ in their tasks: %s" % census)
need = {"encoder_forward", "layernorm_forward", "matmul_forward", "attention_forward",
        "gelu_forward", "crossentropy", "attention_backward", "matmul_backward_weight",
        "layernorm_backward", "encoder_backward", "grad_sumsq", "adamw"}
missing = need - set(census[0])
if missing:
    bad.append("task kinds missing from a step: %s" % sorted(missing))
layers = {e["args"]["layer"] for e in ev if e["args"]["kind"] == "attention_forward"}
if layers != {0, 1}:
    bad.append("attention tasks name layers %s, expected 0 and 1" % sorted(layers))
mbs = {e["args"]["mb"] for e in ev if e["args"]["kind"] == "crossentropy"}
if mbs != {0, 1}:
    bad.append("crossentropy tasks name micro-batches %s, expected 0 and 1" % sorted(mbs))
# dependencies: known tasks that ended before; every task after step 1 waits for something
by_id = {e["args"]["id"]: e for e in ev}
if len(by_id) != len(ev) or 0 in by_id:
    bad.append("task ids are not unique and nonzero")
ndeps = 0
for e in ev:
    a = e["args"]
    if a["submit"] > e["ts"] + 1.0:
        bad.append("%s %d starts before it was submitted" % (e["name"], a["id"]))
    if a["step"] > 1 and not a["deps"]:
        bad.append("%s %d (step %d) depends on nothing" % (e["name"], a["id"], a["step"]))
    for d in a["deps"]:
        ndeps += 1
        de = by_id.get(d)
        if de is None:
            bad.append("%s %d depends on task %s, not in the trace" % (e["name"], a["id"], d))
        elif de["ts"] + de["dur"] > e["ts"] + 0.01:
            bad.append("%s %d started before its dependency %s %d ended" % (
                e["name"], a["id"], de["name"], d))
flows = collections.defaultdict(dict)
for e in doc["traceEvents"]:
    if e.get("ph") in ("s", "f"):
        flows[e["id"]][e["ph"]] = e
if len(flows) != ndeps or any(set(f) != {"s", "f"} for f in flows.values()):
    bad.append("%d flow arrows for %d dependencies" % (len(flows), ndeps))
# the replay file: a line per task, the same fields
rows = {}
with open(os.path.join(WORK, "trace.ztr")) as f:
    head = f.readline()
    if not head.startswith("# zerotask replay 4:") or " prio recompute ndeps " not in head:
        bad.append("replay file header: %r" % head)
    meta = dict(kv.split("=", 1) for kv in f.readline().split()[2:])
    if meta.get("world") != "1" or meta.get("workers") != str(ncpu) or meta.get("stage") != "0" \
            or meta != doc.get("otherData"):
        bad.append("replay file's meta line %s (JSON otherData %s)" % (meta, doc.get("otherData")))
    for line in f:
        x = line.split()
        rows[int(x[1])] = x
if set(rows) != set(by_id):
    bad.append("replay file: %d tasks, the JSON %d" % (len(rows), len(by_id)))
cpu_sum = wall_sum = 0.0
for i, x in rows.items():
    e = by_id.get(i)
    if e is None:
        continue
    deps = [int(d) for d in x[19:]]
    cpu = float(x[12])
    if (x[2] != e["args"]["kind"] or x[2] != e["name"] or x[17] != "0" or
            "recompute" in e["args"] or int(x[18]) != len(deps) or deps != e["args"]["deps"] or
            int(x[16]) != e["args"]["prio"] or
            abs(float(x[10]) - e["ts"]) > 0.01 or
            abs(float(x[11]) - float(x[10]) - e["dur"]) > 0.01 or
            abs(cpu - e["args"].get("cpu_us", -1)) > 0.01 or
            abs(float(x[13]) - e["args"].get("waited_us", -1)) > 0.01 or
            int(x[14]) != e["args"]["bytes_read"] or int(x[15]) != e["args"]["bytes_written"]):
        bad.append("replay file line for task %d differs from the JSON: %s" % (i, " ".join(x)))
        break
    # a worker's CPU time in the task: measured around the same body as the wall time
    if not 0 <= cpu <= e["dur"] + 100:
        bad.append("task %d: CPU time %.3f us outside [0, its wall time %.3f us + 100]" % (
            i, cpu, e["dur"]))
        break
    cpu_sum += cpu
    wall_sum += e["dur"]
# the tasks computed on their cores (how much of their wall time depends on the machine's load:
# with other jobs on the cores a worker waits for one, so only a CPU time is asserted)
if not 0 < cpu_sum <= wall_sum + 100 * len(rows):
    bad.append("tasks' CPU time %.0f us against their wall time %.0f us" % (cpu_sum, wall_sum))
for b in bad[:20]:
    print("FAIL", b)
print("%d task events over %d steps on %d workers; %d problems" % (len(ev), STEPS, len(by_tid),
                                                                    len(bad)))
sys.exit(1 if bad else 0)
