#!/usr/bin/env python3
"""bench/deepspeed/ds_worker.py: the DeepSpeed side of bench/deepspeed/run, run under the
virtualenv's Python (bench/deepspeed/setup). One measurement per call, one result line
"ds_result key=value ..." on stdout; any failure is one line "ds_error <message>" and exit 1.

  ds_worker.py adam PARAMS STEPS WARMUP
      DeepSpeedCPUAdam (adamw_mode, lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01) on one
      flat fp32 tensor of PARAMS parameters with a gradient; median ms per optimizer.step()
  ds_worker.py aio DIR BYTES BLOCK QDEPTH REPS SINGLE_SUBMIT OVERLAP [new|allocated]
      DeepSpeed's async I/O handle (the aio op: libaio, O_DIRECT) writing then reading BYTES from
      one page-locked buffer to DIR/ds_aio.<pid>; median GB/s of each over REPS, data checked
  ds_worker.py pipe MODEL DS DATA STEPS STAGES   (one process per rank, as train)
      DeepSpeed's pipeline engine (PipelineModule, uniform partition, the embedding and the head
      one TiedLayerSpec) on the GPT-2 of train, engine.train_batch per step over the step's
      global batch in micro-batches; rank 0 prints the median ms per step after the first
  ds_worker.py train MODEL DS DATA STEPS   (one process per rank: RANK, WORLD_SIZE, MASTER_ADDR,
      MASTER_PORT in the environment)
      GPT-2 of MODEL's shape (the parameters and names of tests/ref/gpt2_torch.py, one module per
      block so that ZeRO-3 gathers per block), deepspeed.initialize with the DeepSpeed config DS
      (zerotask reads the same file), gloo; rank r trains rows r*B/W..(r+1)*B/W-1 of each step's
      global batch of DATA, as zerotask's rank r does; rank 0 prints the median ms per step (its
      wall clock between two barriers around forward, backward and step) after 2 warm-up steps;
      with ZT_DS_CKPT_DIR set it then saves the state there (engine.save_checkpoint) and loads
      it back (engine.load_checkpoint), each timed between barriers, and prints both times and
      the bytes written
"""
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import benchlib  # noqa: E402  (bench/benchlib.py: median_step_ms, drop_caches)

os.environ.setdefault("DS_ACCELERATOR", "cpu")


def fail(msg):
    print("ds_error %s" % " ".join(str(msg).split())[:2000], flush=True)
    sys.exit(1)


def adam(P, steps, warmup):
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.empty(P).uniform_(-5.0, 5.0))
    p.grad = torch.empty(P).uniform_(-0.5, 0.5)
    opt = DeepSpeedCPUAdam([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                           adamw_mode=True)
    print("ds_result ms_per_step=%.3f threads=%d" % (
        benchlib.median_step_ms(opt.step, steps, warmup), torch.get_num_threads()), flush=True)


def aio(d, nbytes, block, qd, reps, single, overlap, layout="new"):
    import torch
    from deepspeed.ops.op_builder import AsyncIOBuilder
    lib = AsyncIOBuilder().load(verbose=False)
    h = lib.aio_handle(block, qd, bool(single), bool(overlap), 1)
    buf = h.new_cpu_locked_tensor(nbytes, torch.empty(0, dtype=torch.uint8))
    back = h.new_cpu_locked_tensor(nbytes, torch.empty(0, dtype=torch.uint8))
    buf.copy_(torch.randint(0, 256, (nbytes,), dtype=torch.uint8))
    path = os.path.join(d, "ds_aio.%d" % os.getpid())
    w, r = [], []
    try:
        for k in range(reps):
            if os.path.exists(path):
                os.unlink(path)
            if layout == "allocated":  # the timed write overwrites allocated blocks
                if h.sync_pwrite(buf, path) < 0:
                    fail("aio sync_pwrite returned an error (untimed first write)")
                os.sync()
            t0 = time.perf_counter()
            rc = h.sync_pwrite(buf, path)
            t1 = time.perf_counter()
            if rc < 0:
                fail("aio sync_pwrite returned %s" % rc)
            os.sync()
            t2 = time.perf_counter()
            rc = h.sync_pread(back, path)
            t3 = time.perf_counter()
            if rc < 0:
                fail("aio sync_pread returned %s" % rc)
            if k == 0 and not torch.equal(buf, back):
                fail("aio: the data read back differs from what was written")
            w.append(nbytes / (t1 - t0) / 1e9)
            r.append(nbytes / (t3 - t2) / 1e9)
    finally:
        if os.path.exists(path):
            os.unlink(path)
        h.free_cpu_locked_tensor(buf)
        h.free_cpu_locked_tensor(back)
    print("ds_result write_GBps=%.4f read_GBps=%.4f" % (statistics.median(w),
                                                       statistics.median(r)), flush=True)


def gpt2_module(m, init):
    """the GPT-2 of tests/ref/gpt2_torch.py as a torch.nn.Module whose forward returns the loss,
    its parameters initialised from init (name -> tensor); shared with the autotuner's worker"""
    import torch
    import torch.nn.functional as F
    C, NH = m["n_embd"], m["n_head"]

    def P(name):
        return torch.nn.Parameter(init[name].clone())

    class Block(torch.nn.Module):
        def __init__(self, i):
            super().__init__()
            p = "transformer.h.%d." % i
            self.w = torch.nn.ParameterDict({k.replace(".", "_"): P(p + k) for k in (
                "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")})

        def forward(self, x):
            w, (Bb, Tt, _) = self.w, x.shape
            h = F.layer_norm(x, (C,), w["ln_1_weight"], w["ln_1_bias"], 1e-5)
            q, k, v = (h @ w["attn_c_attn_weight"] + w["attn_c_attn_bias"]).split(C, dim=2)
            q, k, v = (t.view(Bb, Tt, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).reshape(Bb, Tt, C)
            x = x + (y @ w["attn_c_proj_weight"] + w["attn_c_proj_bias"])
            h = F.layer_norm(x, (C,), w["ln_2_weight"], w["ln_2_bias"], 1e-5)
            h = F.gelu(h @ w["mlp_c_fc_weight"] + w["mlp_c_fc_bias"], approximate="tanh")
            return x + (h @ w["mlp_c_proj_weight"] + w["mlp_c_proj_bias"])

    class GPT2(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = P("transformer.wte.weight"), P("transformer.wpe.weight")
            self.h = torch.nn.ModuleList(Block(i) for i in range(m["n_layer"]))
            self.lnf_w, self.lnf_b = P("transformer.ln_f.weight"), P("transformer.ln_f.bias")

        def forward(self, idx, tgt):
            x = self.wte[idx] + self.wpe[:idx.shape[1]]
            for b in self.h:
                x = b(x)
            x = F.layer_norm(x, (C,), self.lnf_w, self.lnf_b, 1e-5)
            logits = x @ self.wte.t()
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))

    return GPT2()


def run_inputs(model_path, ds_path, data):
    """the project's PyTorch reference module (shapes, data rule, init), the model shape, the
    DeepSpeed config and the tokens; the thread count from ZT_DS_THREADS (default 1)"""
    import json
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "tests", "ref"))
    import gpt2_torch as ref
    torch.set_num_threads(int(os.environ.get("ZT_DS_THREADS", "1")))
    m = ref.load_model_shape(model_path)
    with open(ds_path) as f:
        ds = json.load(f)
    return ref, m, ds, ref.load_tokens(data, m["vocab_size"])


def train(model_path, ds_path, data, steps):
    import torch
    import deepspeed
    ref, m, ds, tok = run_inputs(model_path, ds_path, data)
    W, r = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    B, T = ds["train_batch_size"], m["seq_len"]
    rows = slice(r * (B // W), (r + 1) * (B // W))
    batches = [tuple(t[rows].contiguous() for t in ref.step_batch(tok, s, B, T))
               for s in range(1, steps + 1)]
    init = dict(ref.init_weights(m, ds.get("seed", 1)))

    deepspeed.init_distributed(dist_backend="gloo")
    model = gpt2_module(m, init)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=ds)
    dist = torch.distributed
    times = []
    for s in range(1, steps + 1):
        dist.barrier()
        t0 = time.perf_counter()
        loss = engine(*batches[s - 1])
        engine.backward(loss)
        engine.step()
        lv = loss.item()
        dist.barrier()
        times.append((time.perf_counter() - t0) * 1e3)
        if r == 0:
            print("step %d loss %.6f ms %.1f" % (s, lv, times[-1]), flush=True)
    ck = os.environ.get("ZT_DS_CKPT_DIR")
    extra = ""
    if ck:  # a checkpoint of the trained state: saved, then loaded back, each between barriers
        dist.barrier()
        t0 = time.perf_counter()
        engine.save_checkpoint(ck, tag="bench")
        dist.barrier()
        t1 = time.perf_counter()
        os.sync()
        if r == 0:
            benchlib.drop_caches()
        dist.barrier()
        t2 = time.perf_counter()
        engine.load_checkpoint(ck, tag="bench")
        dist.barrier()
        t3 = time.perf_counter()
        size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(ck) for f in fs)
        extra = " save_ms=%.1f load_ms=%.1f ckpt_bytes=%d" % (1e3 * (t1 - t0), 1e3 * (t3 - t2),
                                                            size)
    if r == 0:
        print("ds_result ms_per_step=%.3f steps=%d world=%d threads=%d optimizer=%s%s" % (
            statistics.median(times[2:]) if len(times) > 2 else times[-1], len(times) - 2, W,
            torch.get_num_threads(), type(engine.optimizer).__name__, extra), flush=True)
    dist.barrier()


def pipe_layers(m, init):
    """GPT-2 as DeepSpeed's PipelineModule sees it (bench/pipeline/run.py): the embedding and the
    head one TiedLayerSpec (wte; the head's forward is x @ wte^T), the blocks, the final norm"""
    import torch
    import torch.nn.functional as F
    from deepspeed.pipe import LayerSpec, TiedLayerSpec
    C = m["n_embd"]
    blocks = gpt2_module(m, init).h  # the same blocks as the ZeRO rows

    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(init["transformer.wte.weight"].clone())
            self.wpe = torch.nn.Parameter(init["transformer.wpe.weight"].clone())

        def forward(self, idx):
            return self.weight[idx] + self.wpe[:idx.shape[1]]

    class LnF(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(init["transformer.ln_f.weight"].clone())
            self.b = torch.nn.Parameter(init["transformer.ln_f.bias"].clone())

        def forward(self, x):
            return F.layer_norm(x, (C,), self.w, self.b, 1e-5)

    class Block(torch.nn.Module):  # a LayerSpec builds it: it takes its block from the list
        def __init__(self, i):
            super().__init__()
            self.b = blocks[i]

        def forward(self, x):
            return self.b(x)

    return ([TiedLayerSpec("wte", Embed)] + [LayerSpec(Block, i) for i in range(m["n_layer"])] +
            [LayerSpec(LnF), TiedLayerSpec("wte", Embed, forward_fn=lambda mod, x:
                                           x @ mod.weight.t())])


def pipe(model_path, ds_path, data, steps, stages):
    """DeepSpeed's pipeline engine on the same model, data and config: WORLD_SIZE ranks, stages
    stages (uniform partition), engine.train_batch per step; rank 0 prints the median ms"""
    import torch
    import torch.nn.functional as F
    import deepspeed
    from deepspeed.pipe import PipelineModule
    ref, m, ds, tok = run_inputs(model_path, ds_path, data)
    B, T, mb = ds["train_batch_size"], m["seq_len"], ds["train_micro_batch_size_per_gpu"]
    init = dict(ref.init_weights(m, ds.get("seed", 1)))
    deepspeed.init_distributed(dist_backend="gloo")
    net = PipelineModule(layers=pipe_layers(m, init), num_stages=stages,
                         partition_method="uniform",
                         loss_fn=lambda logits, tgt: F.cross_entropy(
                             logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1)))
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(),
                                           config=ds)

    def micro_batches(s):  # the step's global batch in micro-batches of mb rows
        x, y = ref.step_batch(tok, s, B, T)
        for k in range(0, B, mb):
            yield x[k:k + mb].contiguous(), y[k:k + mb].contiguous()

    dist, r, times = torch.distributed, int(os.environ["RANK"]), []
    for s in range(1, steps + 1):
        dist.barrier()
        t0 = time.perf_counter()
        loss = engine.train_batch(micro_batches(s))
        dist.barrier()
        times.append((time.perf_counter() - t0) * 1e3)
        if r == 0:
            print("step %d loss %.6f ms %.1f" % (s, float(loss), times[-1]), flush=True)
    if r == 0:
        print("ds_result ms_per_step=%.3f steps=%d stages=%d threads=%d" % (
            statistics.median(times[1:]), len(times) - 1, stages, torch.get_num_threads()),
            flush=True)
    dist.barrier()


def main():
    what, args = sys.argv[1], sys.argv[2:]
    try:
        if what == "adam":
            adam(int(args[0]), int(args[1]), int(args[2]))
        elif what == "aio":
            aio(args[0], *[int(x) for x in args[1:7]], *args[7:8])
        elif what == "train":
            train(args[0], args[1], args[2], int(args[3]))
        elif what == "pipe":
            pipe(args[0], args[1], args[2], int(args[3]), int(args[4]))
        else:
            fail("unknown measurement %s" % what)
    except SystemExit:
        raise
    except BaseException as e:  # the row records DeepSpeed's own error
        tb = traceback.format_exc().strip().splitlines()
        fail("%s: %s (at %s)" % (type(e).__name__, e, tb[-3].strip() if len(tb) > 2 else "?"))


if __name__ == "__main__":
    main()
