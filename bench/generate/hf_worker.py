"""bench/generate/hf_worker.py: the Hugging Face `transformers` side of bench/generate_vs_peers,
run by the peer's Python (/work/venv/hf). One process per measurement round: loads the HF
directory in the dtype asked, then times greedy `generate` (KV cache on, torch threads as asked)
on the plan's prompts and prints one JSON line of figures.

  batch-1  the plan's single prompt, max_new_tokens = min_new_tokens = N (no early stop); a
           streamer stamps each token as generate hands it out: ms_first_token = first stamp
           minus the call's start (prefill + first token), decode tokens/s = (N - 1) over the
           time from the first to the last stamp
  batched  the plan's prompts in one left-padded batch (attention mask, pad id 0), N new tokens
           each: tokens/s = prompts x N over the call's wall time (prefill included)
Usage: PYTHON bench/generate/hf_worker.py --hf DIR --plan PLAN.json --dtype f32|bf16|f16
           [--threads 2] [--skip-batched]"""
import argparse
import json
import time

import torch
import transformers
from transformers import AutoModelForCausalLM
from transformers.generation.streamers import BaseStreamer

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


class Stamps(BaseStreamer):
    """perf_counter stamps of each put() after the first (the first put is the prompt)"""

    def __init__(self):
        self.calls, self.times = 0, []

    def put(self, value):
        self.calls += 1
        if self.calls > 1:
            self.times.append(time.perf_counter())

    def end(self):
        pass


def greedy(model, ids, mask, n, streamer=None):
    return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n,
                          min_new_tokens=n, do_sample=False, use_cache=True, num_beams=1,
                          pad_token_id=0, streamer=streamer)


def batch1(model, prompt, n):
    ids = torch.tensor([prompt])
    mask = torch.ones_like(ids)
    s = Stamps()
    t0 = time.perf_counter()
    out = greedy(model, ids, mask, n, s)
    gen = out[0, len(prompt):].tolist()
    assert len(gen) == n and len(s.times) == n, (len(gen), len(s.times))
    return {"ms_first_token": 1e3 * (s.times[0] - t0),
            "decode_tokens_per_s": (n - 1) / (s.times[-1] - s.times[0]), "ids": gen}


def batched(model, prompts, n):
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):
        ids[r, width - len(p):] = torch.tensor(p)
        mask[r, width - len(p):] = 1
    t0 = time.perf_counter()
    out = greedy(model, ids, mask, n)
    wall = time.perf_counter() - t0
    assert out.shape[1] == width + n, out.shape
    return {"batched_tokens_per_s": len(prompts) * n / wall, "batched_s": wall,
            "batched_first_ids": [out[r, width:width + 8].tolist() for r in range(len(prompts))]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-batched", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(a.plan) as f:
        plan = json.load(f)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a.hf, dtype=DTYPES[a.dtype]).eval()
    res = {"load_s": time.perf_counter() - t0, "torch": torch.__version__,
           "transformers": transformers.__version__, "threads": torch.get_num_threads()}
    with torch.inference_mode():
        greedy(model, torch.tensor([plan["prompt"]]), None, 2)  # warm-up: the same shapes
        res.update(batch1(model, plan["prompt"], plan["new"]))
        if not a.skip_batched:
            res.update(batched(model, plan["batch"], plan["batch_new"]))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
