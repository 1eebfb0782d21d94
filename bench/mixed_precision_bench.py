#!/usr/bin/env python3
"""bf16 / fp16 mixed precision against f32 in the same run: `unillm train` tokens/s, peak RSS and
the loss curve, on bench/models/train-<shape>/ (the random-weight untied Llama that
train_bench.py writes) and data/tinyshakespeare (stage pt, cutoff_len 256, disable_shuffling).

  python3 bench/mixed_precision_bench.py [--shape stories15M] [--variants full-ckpt,full-nockpt,lora-ckpt]
      [--batch 8] [--steps 8] [--runs 3] [--dtypes bf16] [--unillm build/unillm] [--threads 2]
  python3 bench/mixed_precision_bench.py --curve 50        # 50-step loss curves, f32 vs bf16 vs fp16

Issue targets: bf16 >= 0.9x f32 tokens/s, <= 0.6x f32 peak memory, 50 steps of loss within 1%.
Runs alternate f32 / low precision so both see the same machine load; medians over --runs.
tokens/s = median over the steps after the first of trainer_log.jsonl's tokens_per_s; peak RSS
as unillm measures it (VmHWM, printed at the end of training).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))


def model_dir(shape):
    d = HERE / "models" / f"train-{shape}"
    if not (d / "model.safetensors").exists():
        import train_bench  # writes it (needs numpy: bench/.venv)
        train_bench.model_dir(shape, HERE / "models")
    return d


def run(binary, mdir, variant, dtype, batch, steps, threads, workdir, seed=42):
    kind, ckpt = variant.split("-")
    out = Path(workdir) / f"{variant}-{dtype}"
    cfg = {
        "model_name_or_path": str(mdir), "stage": "pt", "do_train": True, "finetuning_type": "full",
        "dataset": "tinyshakespeare", "dataset_dir": str(REPO / "data"), "cutoff_len": 256,
        "output_dir": str(out), "overwrite_output_dir": True, "logging_steps": 1,
        "save_strategy": "no", "per_device_train_batch_size": batch, "max_steps": steps,
        "learning_rate": 3.0e-4 if kind == "full" else 1.0e-3, "lr_scheduler_type": "cosine",
        "warmup_steps": 2, "seed": seed, "disable_shuffling": True,
        "disable_gradient_checkpointing": ckpt == "nockpt",
    }
    if kind == "lora":
        cfg.update({"finetuning_type": "lora", "lora_rank": 8, "lora_target": "all"})
    if dtype != "f32":
        cfg[dtype] = True
    yml = Path(workdir) / f"{out.name}.yaml"
    yml.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in cfg.items()))
    t0 = time.time()
    p = subprocess.Popen([str(binary), "train", str(yml), "--threads", str(threads)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, _, ru = os.wait4(p.pid, 0)
    err = p.stderr.read()
    wall = time.time() - t0
    logs = [json.loads(l) for l in (out / "trainer_log.jsonl").read_text().splitlines() if l.strip()] \
        if (out / "trainer_log.jsonl").exists() else []
    if not logs:
        sys.exit(f"mixed_precision_bench: unillm train failed:\n{err[-4000:]}")
    tps = [l["tokens_per_s"] for l in logs if "tokens_per_s" in l]
    plan = [l for l in err.splitlines() if "memory" in l.lower()]
    shutil.rmtree(out, ignore_errors=True)
    # The peak RSS unillm measures itself (VmHWM): the rusage of a forked child also counts the
    # parent's resident set at fork time (this script's, ~220 MiB once torch was imported).
    own = re.search(r"measured (\d+) MiB", err)
    rss = int(own.group(1)) if own else ru.ru_maxrss / 1024
    return {"tps": statistics.median(tps[1:] or tps), "rss_mb": rss,
            "losses": [l["loss"] for l in logs if "loss" in l],
            "grad_norms": [l["grad_norm"] for l in logs if "grad_norm" in l], "wall": wall, "plan": plan}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="stories15M")
    ap.add_argument("--variants", default="full-ckpt,full-nockpt,lora-ckpt")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--curve", type=int, default=0, help="N: print N-step loss curves (full-ckpt) instead")
    ap.add_argument("--unillm", default=str(REPO / "build/unillm"))
    a = ap.parse_args()
    mdir = model_dir(a.shape)
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    with tempfile.TemporaryDirectory() as work:
        if a.curve:
            runs = {d: run(a.unillm, mdir, "full-ckpt", d, a.batch, a.curve, a.threads, work)
                    for d in ["f32", "bf16", "fp16"]}
            curves = {d: r["losses"] for d, r in runs.items()}
            print(f"{a.shape} full fine-tuning, {a.curve} steps, batch {a.batch} x 256")
            print(f"{'step':>4} {'f32':>8} {'bf16':>8} {'rel':>9} {'fp16':>8} {'rel':>9}")
            for i, l in enumerate(curves["f32"]):
                b, h = curves["bf16"][i], curves["fp16"][i]
                print(f"{i + 1:>4} {l:8.4f} {b:8.4f} {(b - l) / l:+9.2e} {h:8.4f} {(h - l) / l:+9.2e}")
            for d in ["bf16", "fp16"]:
                worst = max(abs(x - y) / y for x, y in zip(curves[d], curves["f32"]))
                gn = max(abs(x - y) / y for x, y in zip(runs[d]["grad_norms"], runs["f32"]["grad_norms"]))
                print(f"{d}: largest relative loss difference {worst:.2e} (target <= 1e-2); "
                      f"grad_norm {gn:.2e} (the logged loss has 4 decimals)")
            return
        for variant in a.variants.split(","):
            res = {d: [] for d in ["f32"] + a.dtypes.split(",")}
            for _ in range(a.runs):
                for d in res:
                    res[d].append(run(a.unillm, mdir, variant, d, a.batch, a.steps, a.threads, work))
            f = res["f32"]
            tps32, rss32 = statistics.median(r["tps"] for r in f), statistics.median(r["rss_mb"] for r in f)
            print(f"\n{a.shape} {variant}, batch {a.batch} x 256, {a.steps} steps, {a.runs} runs")
            print(f"  f32 : {tps32:8.1f} tok/s  peak RSS {rss32:8.1f} MiB")
            for d in res:
                if d == "f32":
                    continue
                tps = statistics.median(r["tps"] for r in res[d])
                rss = statistics.median(r["rss_mb"] for r in res[d])
                print(f"  {d}: {tps:8.1f} tok/s  peak RSS {rss:8.1f} MiB   ratio tok/s {tps / tps32:.2f} "
                      f"(target >= 0.9), memory {rss / rss32:.2f} (target <= 0.6)")
            for d in res:
                for line in res[d][-1]["plan"][-2:]:
                    print(f"  [{d}] {line}")
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
