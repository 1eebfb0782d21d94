#!/usr/bin/env python3
"""Mixture-of-experts speed against the peers, in the same run: training (stage pt, full
fine-tuning, f32) against transformers' own Qwen2MoeForCausalLM trained with torch.optim.AdamW
(Debian's torch with OpenBLAS), and decode against llama.cpp (llama-cpp-python) on the GGUF that
`unillm export --format gguf` writes of the same weights.

  bench/.venv/bin/python bench/moe_bench.py [--threads 2] [--steps 6] [--runs 3] [--build build]
      [--ref-python .venv-ref/bin/python]

The model: a random qwen2_moe (hidden 512, 4 layers, 8 heads, 8 experts of width 512, top-2, a
shared expert of width 1024, stories260K's 512-token vocabulary, so that the experts and not the
lm_head dominate), initialised by `unillm init` (N(0, 0.02)). Training: batch 8 x 256 tokens,
recompute off on both sides; tokens/s = median over the steps after the first. transformers runs
its eager attention and its SparseMoeBlock (a loop over the experts with index_add). Decode: a
64-token prompt then 128 greedy tokens, interleaved runs, medians (bench/decode_bench.py's timers).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import decode_bench  # noqa: E402
import make_models  # noqa: E402

CONFIG = {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 512,
          "intermediate_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
          "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 512,
          "shared_expert_intermediate_size": 1024, "norm_topk_prob": False, "vocab_size": 512,
          "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
          "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02,
          "use_sliding_window": False}
BATCH, SEQ = 8, 256

TORCH_STEPS = r'''
import json, statistics, sys, time
import torch
from transformers import AutoModelForCausalLM
model_dir, steps, threads, batch, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=5e-5)
times = []
for s in range(steps):
    ids = torch.randint(3, model.config.vocab_size, (batch, seq))
    t0 = time.perf_counter()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    times.append(time.perf_counter() - t0)
print(json.dumps({"tokens_per_s": batch * seq / statistics.median(times[1:]), "blas": torch.__config__.show().count("openblas") > 0 or "OpenBLAS" in torch.__config__.show()}))
'''


def make_model(binary, work):
    d = work / "qwen2-moe"
    (work / "cfg.json").write_text(json.dumps(CONFIG))
    subprocess.run([str(binary), "init", "--config", str(work / "cfg.json"), "--out", str(d), "--tokenizer",
                    str(REPO / "assets" / "stories260K"), "--seed", "1", "--force"], check=True, capture_output=True)
    return d


def unillm_train(binary, model_dir, steps, threads, work):
    out = work / "unillm-train"
    cfg = {"model_name_or_path": str(model_dir), "stage": "pt", "do_train": True, "finetuning_type": "full",
           "dataset": "tinyshakespeare", "dataset_dir": str(REPO / "data"), "cutoff_len": SEQ,
           "output_dir": str(out), "overwrite_output_dir": True, "logging_steps": 1, "save_strategy": "no",
           "per_device_train_batch_size": BATCH, "max_steps": steps, "learning_rate": 5e-5,
           "disable_gradient_checkpointing": True, "disable_shuffling": True, "plot_loss": False}
    yml = work / "train.yaml"
    yml.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in cfg.items()))
    p = subprocess.run([str(binary), "train", str(yml), "--threads", str(threads)], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"moe_bench: unillm train failed:\n{p.stderr[-3000:]}")
    tps = [json.loads(l)["tokens_per_s"] for l in (out / "trainer_log.jsonl").read_text().splitlines()
           if '"tokens_per_s"' in l]
    shutil.rmtree(out, ignore_errors=True)
    return statistics.median(tps[1:])


def torch_train(python, model_dir, steps, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    p = subprocess.run([python, "-c", TORCH_STEPS, str(model_dir), str(steps), str(threads), str(BATCH), str(SEQ)],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"moe_bench: transformers training failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["tokens_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--ref-python", default=str(REPO / ".venv-ref" / "bin" / "python"))
    ap.add_argument("--skip-train", action="store_true")
    a = ap.parse_args()
    binary = Path(a.build) / "unillm"
    work = Path(tempfile.mkdtemp(prefix="moe_bench_"))
    decode_bench.print_env(binary, a.threads)
    model_dir = make_model(binary, work)
    if not a.skip_train:
        u, t = [], []
        for _ in range(a.runs):  # alternating, so both see the same load
            u.append(unillm_train(binary, model_dir, a.steps, a.threads, work))
            t.append(torch_train(a.ref_python, model_dir, a.steps, a.threads))
        um, tm = statistics.median(u), statistics.median(t)
        print(f"train (pt, full, f32, batch {BATCH} x {SEQ}, {a.threads} threads, median of {a.runs}): "
              f"unillm {um:.0f} tok/s, transformers Qwen2MoeForCausalLM {tm:.0f} tok/s, ratio {um / tm:.2f}x")
    gguf = work / "qwen2-moe.gguf"
    subprocess.run([str(binary), "export", "--format", "gguf", "--model", str(model_dir), "--output", str(gguf)],
                   check=True, capture_output=True)
    prompt = [1] + [int(x) for x in np.random.default_rng(7).integers(3, 512, 63)]
    llm = make_models.llama_cpp_open(gguf, a.threads, n_ctx=64 + 128 + 16, kv="f32")
    ur, lr = decode_bench.interleaved_medians(
        lambda: decode_bench.unillm_run(binary, model_dir, prompt, 128, a.threads, ["--kv-cache-dtype", "f32"]),
        lambda: decode_bench.llama_cpp_run(llm, prompt, 128), a.runs)
    print(f"prefill-64 tok/s: unillm {ur[0]:.0f}, llama.cpp {lr[0]:.0f}, ratio {ur[0] / lr[0]:.2f}x")
    print(f"decode-128 tok/s: unillm {ur[1]:.0f}, llama.cpp {lr[1]:.0f}, ratio {ur[1] / lr[1]:.2f}x")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
