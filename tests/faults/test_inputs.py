#!/usr/bin/env python3
"""tests/faults/test_inputs.py: inputs that are not what they claim to be end with one clear line.

Cases:
  - every file zt-train reads given as a FIFO (nothing ever writes it: an open that blocks would
    hang until the timeout) or as a character device (/dev/zero, which would never end) is
    refused as "not a regular file" before anything reads it (exit 2 for the config and model
    files, 1 for data and weights);
  - every ZT_* knob of the table (`zt-train --help-env=markdown`, so a new knob cannot skip
    this) with a value its type refuses (an int or bool out of range or not a number, a size
    without a unit we know, a string outside its choices) stops the run with exit 2 and one line
    "NAME=value: expected ..." instead of falling back to a default;
  - a config key holding a newline (quoted in the message) still gives one error line.

Usage: test_inputs.py APPS_DIR MPIEXEC WORKDIR
"""
import os

import faultlib as F

F.setup()
ZT = F.prog("zt-train")
base = F.tiny_run()

for name, flag, what, code in (("data.fifo", "--data", "tokens", 1),
                               ("ds.fifo", "--ds-config", "config", 2),
                               ("model.fifo", "--model", "model shape", 2),
                               ("init.fifo", "--init-from", "safetensors", 1)):
    p = F.path(name)
    os.mkfifo(p)
    F.expect("%s a FIFO" % flag, [ZT] + F.with_arg(base, flag, p), code,
             [what, p, "not a regular file"])
for flag, what, code in (("--data", "tokens", 1), ("--init-from", "safetensors", 1),
                         ("--ds-config", "config", 2)):
    F.expect("%s /dev/zero" % flag, [ZT] + F.with_arg(base, flag, "/dev/zero"), code,
             [what, "/dev/zero", "not a regular file"])

ds_newline = F.write_json("ds_newline.json", {"train_batch_size": 2, "bad\nkey": 1})
F.expect("config key with a newline", [ZT] + F.with_arg(base, "--ds-config", ds_newline), 2,
         ["bad\\x0akey"])

# every knob of the table, strictly: values each type refuses
table = F.run([ZT, "--help-env=markdown"]).stdout
knobs = [(m[0], m[1]) for m in
         (l.strip("|").split("|")[:2] for l in table.splitlines() if l.startswith("| `ZT_"))]
knobs = [(n.strip().strip("`"), t.strip()) for n, t in knobs]
BAD = {"int": ["abc", "99999999999999999999", "1.5"], "bool": ["2", "yes", "-1"],
       "size": ["12Q", "-1", "lots"], "string": ["no-such-value"]}
F.check("knob table", len(knobs) >= 10, "%d ZT_* knobs" % len(knobs))
for name, typ in knobs:
    for value in BAD.get(typ, ["?"]):
        F.expect("%s=%s (%s)" % (name, value, typ), [ZT] + base, 2, [], env={name: value},
                 prefix="zerotask: error: %s=%s: expected" % (name, value))
F.finish()
