#!/usr/bin/env python3
"""Full fine-tuning (stage pt, f32, CPU) throughput and peak memory: `unillm train` against a plain
PyTorch Llama trainer (bench/train_reference_torch.py) on the same random-weight model, token
blocks, batch, sequence length and thread count, with model FLOPs utilisation.

  bench/.venv/bin/python bench/train_bench.py [--shapes stories15M,stories110M] [--threads 2]
      [--ckpt on,off] [--unillm build-tb/unillm] [--gemm-bench build-tb/bench/gemm_bench]
      [--lora 8]

--lora R: LoRA instead of full fine-tuning, still stage pt on the same blocks: unillm gets
`finetuning_type: lora, lora_rank: R, lora_alpha: 2R, lora_target: all, lora_dropout: 0`, the
PyTorch side `--lora-rank R` (train_reference_torch.py's plain-torch LoRA on q, k, v, o, gate, up,
down; base frozen; AdamW over the adapters only), the GEMM-only bound drops every dW GEMM of the
frozen weights and adds the adapters' small GEMMs. Targets then: stories15M 2.0x, stories110M 1.6x;
MFU is 4 x N x tok/s / peak (forward + dX; no dW), recompute not counted.

For each shape it writes an untied HF model dir (random N(0, 0.02) f32 weights from
bench/make_models.py, the Llama 2 tokenizer of assets/llama2-tokenizer) under
bench/models/train-<shape>/, then for each gradient-checkpointing mode:
  * unillm: `/usr/bin/time -v unillm train CFG.yaml --threads N` on data/tinyshakespeare
    (cutoff_len 256, disable_shuffling, logging_steps 1, no saving, no eval); tokens/s of each step
    from output_dir/trainer_log.jsonl, peak RSS from /usr/bin/time;
  * PyTorch: train_reference_torch.py (separate process) on the same packed blocks in the same
    order (tinyshakespeare tokenised here with sentencepiece, packed by LLaMA-Factory's rule), with
    torch.utils.checkpoint per layer when checkpointing is on. It refuses to run unless torch's
    sgemm is OpenBLAS; this script also refuses to compare when torch's 1024^3 sgemm is under
    25% of the FMA peak (the reference BLAS reaches a few percent).
Step time = median of the steps after the first (warm-up). MFU = 6 x N x tokens/s / peak, with
N = the non-embedding parameters (every parameter but embed_tokens; the lm_head GEMM is counted)
and the peak the 2-thread FMA GFLOP/s that bench/gemm_bench measures in the same run. The
6N rule leaves out attention's score/value FLOPs (12 x layers x seq x dim per token, reported as
`attn_share`).

Also per shape: a GEMM-only bound (train_reference_torch.py --gemm-bound: every projection and
lm_head GEMM of one step in unillm's layout, timed with OpenBLAS through torch.mm; tok/s if the
step were nothing else), with/without layer recompute and logits recompute in the CE backward.
The load average is checked at the start; each run also reports the CPU share other processes
used during it (> 5%: distorted).
"""
import argparse
import json
import os
import re
import resource
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
import make_models  # noqa: E402  (the other benches' model writer: hf_tensors, write_hf_dir)

BATCH = {"stories15M": 8, "stories110M": 4}
STEPS = {"stories15M": 8, "stories110M": 5}
SEQ = 256
TARGET = {"stories15M": 1.8, "stories110M": 1.4}
TARGET_LORA = {"stories15M": 2.0, "stories110M": 1.6}


def sh(cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()


def load_str():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def check_load(limit=1.5):
    """At the start: warns when the 1-minute load average is above `limit`."""
    l1 = os.getloadavg()[0]
    if l1 > limit:
        print(f"WARNING: 1-minute load average {l1:.2f} > {limit}: other processes are running and "
              f"will distort the timings (uptime: {sh(['uptime'])})", flush=True)
    return l1


def cpu_busy(seconds=2.0):
    """Fraction of all CPUs busy over `seconds` (from /proc/stat). Between runs the load average
    still carries this bench's own previous run, so this is the check used there."""
    def snap():
        v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = snap()
    time.sleep(seconds)
    t1, i1 = snap()
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


class Contention:
    """CPU time that processes other than this bench's children used during a run, as a share of
    the machine (all CPUs x the run's wall time): /proc/stat busy time minus the children's
    rusage. Above ~5% the run's timings are distorted."""

    def __enter__(self):
        self.t, self.busy, self.own = time.time(), self._busy(), self._own()
        return self

    def __exit__(self, *exc):
        hz = os.sysconf("SC_CLK_TCK")
        wall = time.time() - self.t
        other = (self._busy() - self.busy) / hz - (self._own() - self.own)
        self.share = max(0.0, other) / (wall * os.cpu_count())
        if self.share > 0.05:
            print(f"WARNING: other processes used {100 * self.share:.0f}% of the CPUs during this run; "
                  f"its timings are distorted", flush=True)

    @staticmethod
    def _busy():
        v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return sum(v) - v[3] - v[4]

    @staticmethod
    def _own():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime


def check_quiet(limit=0.1):
    b = cpu_busy()
    if b > limit:
        print(f"WARNING: the CPUs were {100 * b:.0f}% busy just before this run (other processes); "
              f"its timings are distorted", flush=True)
    return b


# ----------------------------------------------------------------------------------- the model
def model_dir(shape, out):
    """bench/models/train-<shape>/: untied f32 Llama with make_models' weights and the repo's
    Llama 2 tokenizer (assets/llama2-tokenizer)."""
    d = Path(out) / f"train-{shape}"
    if (d / "model.safetensors").exists():
        return d
    s = dict(make_models.SHAPES[shape])
    t = make_models.hf_tensors(s, seed=0, tied=False)
    make_models.write_hf_dir(d, s, t, "f32", tied=False)
    tokdir = REPO / "assets/llama2-tokenizer"
    shutil.copyfile(tokdir / "tokenizer.model", d / "tokenizer.model")
    tc = json.loads((tokdir / "tokenizer_config.json").read_text())
    tc["model_max_length"] = s["seq"]
    (d / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")
    print(f"wrote {d}", flush=True)
    return d


def count_params(s):
    C, F, V, L, H, KV = s["dim"], s["hidden"], s["vocab"], s["layers"], s["heads"], s["kv_heads"]
    hd = C // H
    layer = C * H * hd * 2 + C * KV * hd * 2 + 3 * C * F + 2 * C
    non_emb = L * layer + C + V * C  # layers + final norm + lm_head
    return non_emb, non_emb + V * C


# ------------------------------------------------------------------------------------ the data
def packed_blocks(tok_model, rows_needed, block=SEQ, group=1000, bos=1, eos=2):
    """LLaMA-Factory's pt packing of data/tinyshakespeare.txt (one document per non-empty line,
    tokens + EOS concatenated per group of `group` documents, cut into blocks, remainder dropped,
    first token of each block replaced by BOS); the first rows_needed blocks, in order."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(tok_model))
    docs = [l for l in (REPO / "data/tinyshakespeare.txt").read_text().split("\n") if l]
    rows = []
    for g in range(0, len(docs), group):
        flat = []
        for ids in sp.encode(docs[g:g + group]):
            flat += ids + [eos]
        for i in range(0, len(flat) // block * block, block):
            rows.append([bos] + flat[i + 1:i + block])
        if len(rows) >= rows_needed:
            break
    return np.array(rows[:rows_needed], dtype=np.int64)


# ------------------------------------------------------------------------------------- the peak
def fma_peak(gemm_bench, threads):
    """The FMA peak of `threads` threads as bench/gemm_bench reports it. gemm_bench prints a
    measured peak (FMA chains) and a theoretical one (32 flop/cycle/core at its measured clock), and
    times ops::linear (OpenBLAS) at 1024^3. A measured "peak" below what that GEMM reaches is not a
    peak (the chain loop is then bound by something else), so the theoretical figure is used and
    the reason printed. Returns (GFLOP/s, what it is, the lines to show)."""
    out = sh([str(gemm_bench), f"--threads={threads}", "--benchmark_filter=FmaPeak|LinearF32/1024"])
    m = re.search(rf"FMA peak {threads} threads?\s+total\s+([\d.]+) GFLOP/s", out)
    th = re.search(r"theoretical: .* = ([\d.]+) GFLOP/s on", out)
    g = re.search(r"BM_LinearF32/1024\S*\s.*?GFLOP/s=([\d.]+)([kMG]?)/s", out)
    if not m:
        sys.exit(f"train_bench: no FMA peak in the output of {gemm_bench}:\n{out}")
    measured = float(m.group(1))
    gemm = float(g.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[g.group(2)] if g else 0.0
    lines = [l for l in out.splitlines() if l.startswith(("FMA peak", "theoretical"))]
    lines.append(f"ops::linear f32 1024^3: {gemm:.1f} GFLOP/s" if g else "ops::linear 1024^3: not parsed")
    if gemm > measured and th:
        lines.append(f"the measured FMA peak ({measured:.1f}) is below the 1024^3 GEMM ({gemm:.1f}): "
                     f"not a peak; using gemm_bench's theoretical figure")
        return float(th.group(1)), "theoretical (gemm_bench)", lines
    return measured, "measured FMA peak (gemm_bench)", lines


# ------------------------------------------------------------------------------------- the runs
def run_unillm(binary, mdir, shape, steps, threads, ckpt, workdir, lora=0, extra_cfg=None,
               extra_args=(), env_extra=None):
    out_dir = Path(workdir) / f"unillm-{shape}-{'ckpt' if ckpt else 'nockpt'}{f'-lora{lora}' if lora else ''}"
    cfg = {
        "model_name_or_path": str(mdir), "stage": "pt", "do_train": True, "finetuning_type": "full",
        "dataset": "tinyshakespeare", "dataset_dir": str(REPO / "data"), "cutoff_len": SEQ,
        "output_dir": str(out_dir), "overwrite_output_dir": True, "logging_steps": 1,
        "save_strategy": "no", "plot_loss": False, "per_device_train_batch_size": BATCH[shape],
        "gradient_accumulation_steps": 1, "max_steps": steps, "learning_rate": 5.0e-5,
        "lr_scheduler_type": "linear", "max_grad_norm": 1.0, "seed": 42, "disable_shuffling": True,
        "disable_gradient_checkpointing": not ckpt,
    }
    if lora:
        cfg.update({"finetuning_type": "lora", "lora_rank": lora, "lora_alpha": 2 * lora,
                    "lora_target": "all", "lora_dropout": 0.0})
    cfg.update(extra_cfg or {})
    yml = Path(workdir) / f"{out_dir.name}.yaml"
    yml.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in cfg.items()))
    cmd = ["/usr/bin/time", "-v", str(binary), "train", str(yml), "--threads", str(threads), *extra_args]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env_extra or {})))
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit(f"train_bench: unillm train failed ({p.returncode}):\n{p.stderr[-4000:]}")
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    logs = [json.loads(l) for l in (out_dir / "trainer_log.jsonl").read_text().splitlines() if l.strip()]
    tps = [l["tokens_per_s"] for l in logs if "tokens_per_s" in l]
    losses = [l["loss"] for l in logs if "loss" in l]
    mem = re.findall(r"mem (\d+) MB", p.stderr)
    shutil.rmtree(out_dir, ignore_errors=True)
    timed = tps[1:] if len(tps) > 1 else tps
    return {"tokens_per_s": statistics.median(timed), "steps_tps": tps, "losses": losses,
            "peak_rss_mb": rss_kb / 1024, "allocator_peak_mb": float(mem[-1]) if mem else None,
            "wall_s": wall}


def run_torch(python, mdir, ids_path, shape, steps, threads, ckpt, lora=0, env_extra=None):
    cmd = [python, str(HERE / "train_reference_torch.py"), "--model", str(mdir), "--ids", str(ids_path),
           "--batch", str(BATCH[shape]), "--steps", str(steps), "--threads", str(threads)]
    if ckpt:
        cmd.append("--grad-ckpt")
    if lora:
        cmd += ["--lora-rank", str(lora), "--lora-alpha", str(2 * lora)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    for k, v in (env_extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines or "summary" not in lines[-1]:
        sys.exit(f"train_bench: torch reference failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    s = lines[-1]["summary"]
    s["steps_tps"] = [l["tokens_per_s"] for l in lines[:-1]]
    s["losses"] = [l["loss"] for l in lines[:-1]]
    return s


def run_gemm_bound(python, mdir, ids_path, shape, threads, lora=0):
    cmd = [python, str(HERE / "train_reference_torch.py"), "--model", str(mdir), "--batch", str(BATCH[shape]),
           "--gemm-bound", str(SEQ), "--threads", str(threads), "--ids", str(ids_path),
           "--lora-rank", str(lora)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"train_bench: gemm bound failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["gemm_bound"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="stories15M,stories110M")
    ap.add_argument("--ckpt", default="on,off", help="gradient checkpointing modes to run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="override the steps per run (default 8 / 5)")
    ap.add_argument("--unillm", default=str(REPO / "build-tb/unillm"))
    ap.add_argument("--gemm-bench", default=str(REPO / "build-tb/bench/gemm_bench"))
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-unillm", action="store_true")
    ap.add_argument("--skip-bound", action="store_true", help="skip the GEMM-only bound")
    ap.add_argument("--out", default=str(HERE / "models"))
    ap.add_argument("--json", help="also write every result to this file")
    ap.add_argument("--lora", type=int, default=0, metavar="R",
                    help="LoRA of rank R (alpha 2R, all projections) instead of full fine-tuning")
    a = ap.parse_args()
    targets = TARGET_LORA if a.lora else TARGET
    flops_per_param = 4 if a.lora else 6

    print(f"date      {time.strftime('%Y-%m-%d %H:%M')}")
    model = [l.split(":", 1)[1].strip() for l in sh(["lscpu"]).splitlines() if l.startswith("Model name")]
    print(f"cpu       {model[0] if model else '?'}, {os.cpu_count()} cpus; threads {a.threads}")
    print("mode      " + (f"LoRA r {a.lora} alpha {2 * a.lora}, all projections, base frozen" if a.lora
                          else "full fine-tuning"))
    print(f"load      {load_str()}")
    check_load()
    peak, peak_kind, peak_lines = fma_peak(a.gemm_bench, a.threads)
    for l in peak_lines:
        print("          " + l)
    print(f"peak      {peak:.1f} GFLOP/s ({a.threads} threads, {peak_kind})", flush=True)

    results, bounds = [], {}
    with tempfile.TemporaryDirectory(prefix="train_bench-") as work:
        for shape in a.shapes.split(","):
            s = make_models.SHAPES[shape]
            mdir = model_dir(shape, a.out)
            steps = a.steps or STEPS[shape]
            ids = packed_blocks(mdir / "tokenizer.model", steps * BATCH[shape])
            ids_path = Path(work) / f"ids-{shape}.npy"
            np.save(ids_path, ids)
            n_non_emb, n_all = count_params(s)
            attn_flops = 12 * s["layers"] * SEQ * s["dim"]  # per token, fwd+bwd, causal not halved
            if not a.skip_bound:
                with Contention() as c:
                    bounds[shape] = run_gemm_bound(a.torch_python, mdir, ids_path, shape, a.threads, a.lora)
                bounds[shape]["others_cpu_share"] = c.share
                print(f"[{shape}] GEMM-only bound {json.dumps(bounds[shape]['bound_tokens_per_s'])}", flush=True)
            for mode in a.ckpt.split(","):
                ckpt = mode == "on"
                r = {"shape": shape, "ckpt": ckpt, "batch": BATCH[shape], "seq": SEQ, "steps": steps,
                     "params": n_all, "non_embedding_params": n_non_emb,
                     "attn_share": attn_flops / (6 * n_non_emb + attn_flops), "peak_gflops": peak,
                     "peak_kind": peak_kind, "lora_rank": a.lora}
                if not a.skip_unillm:
                    r["load_before_unillm"] = load_str()
                    r["busy_before_unillm"] = check_quiet()
                    with Contention() as c:
                        r["unillm"] = run_unillm(a.unillm, mdir, shape, steps, a.threads, ckpt, work, a.lora)
                    r["unillm"]["others_cpu_share"] = c.share
                    print(f"[{shape} ckpt {mode}] unillm {json.dumps(r['unillm'])}", flush=True)
                if not a.skip_torch:
                    r["load_before_torch"] = load_str()
                    r["busy_before_torch"] = check_quiet()
                    with Contention() as c:
                        r["torch"] = run_torch(a.torch_python, mdir, ids_path, shape, steps, a.threads, ckpt,
                                               a.lora)
                    r["torch"]["others_cpu_share"] = c.share
                    print(f"[{shape} ckpt {mode}] torch {json.dumps(r['torch'])}", flush=True)
                    b = r["torch"]["blas"]
                    if not b["openblas"] or b["sgemm1024_gflops"] < 0.25 * peak:
                        sys.exit(f"train_bench: refusing to compare: torch BLAS {b['libs']} reaches "
                                 f"{b['sgemm1024_gflops']:.1f} GFLOP/s at 1024^3 (peak {peak:.1f})")
                for k in ("unillm", "torch"):
                    if k in r:
                        r[k]["mfu"] = flops_per_param * n_non_emb * r[k]["tokens_per_s"] / (peak * 1e9)
                results.append(r)

    print(f"\nload after {load_str()}")
    if any("torch" in r for r in results):
        b = next(r["torch"]["blas"] for r in results if "torch" in r)
        print(f"torch     {next(r['torch']['torch'] for r in results if 'torch' in r)}, BLAS "
              f"{', '.join(b['libs'])}, sgemm 1024^3 {b['sgemm1024_gflops']:.1f} GFLOP/s "
              f"({100 * b['sgemm1024_gflops'] / peak:.0f}% of peak)")
    print(f"\n{'shape':<12}{'ckpt':<5}{'B x T':>8}{'unillm tok/s':>14}{'torch tok/s':>13}{'ratio':>7}"
          f"{'MFU u':>7}{'MFU t':>7}{'RSS u MB':>10}{'RSS t MB':>10}{'RSS ratio':>10}{'others u/t':>12}")
    for r in results:
        u, t = r.get("unillm"), r.get("torch")
        f = lambda d, k, fmt: format(d[k], fmt) if d else "-"  # noqa: E731
        ratio = f"{u['tokens_per_s'] / t['tokens_per_s']:.2f}" if u and t else "-"
        rss = f"{u['peak_rss_mb'] / t['peak_rss_mb']:.2f}" if u and t else "-"
        mfu_u = f"{100 * u['mfu']:.0f}%" if u else "-"
        mfu_t = f"{100 * t['mfu']:.0f}%" if t else "-"
        oth = "/".join(f"{100 * d['others_cpu_share']:.0f}%" if d else "-" for d in (u, t))
        print(f"{r['shape']:<12}{'on' if r['ckpt'] else 'off':<5}{r['batch']:>4}x{r['seq']:<3}"
              f"{f(u, 'tokens_per_s', '.0f'):>14}{f(t, 'tokens_per_s', '.0f'):>13}{ratio:>7}"
              f"{mfu_u:>7}{mfu_t:>7}{f(u, 'peak_rss_mb', '.0f'):>10}{f(t, 'peak_rss_mb', '.0f'):>10}{rss:>10}"
              f"{oth:>12}")
    print("\nper run: load average (1/5/15 min) before unillm | before torch; first losses unillm | torch")
    for r in results:
        u, t = r.get("unillm"), r.get("torch")
        ls = lambda d: " ".join(f"{x:.4f}" for x in d["losses"][:3]) if d else "-"  # noqa: E731
        print(f"  {r['shape']:<12}{'on' if r['ckpt'] else 'off':<4} load {r.get('load_before_unillm', '-')} | "
              f"{r.get('load_before_torch', '-')}; losses {ls(u)} | {ls(t)}")
    if a.lora:
        print("(LoRA: A is initialised from each side's own RNG, so the losses agree at step 1 (B = 0) "
              "and stay close, not identical, after it)")
    print(f"\nMFU = {flops_per_param} x non-embedding params x tok/s / {peak:.1f} GFLOP/s; non-embedding params: "
          + ", ".join(f"{r['shape']} {r['non_embedding_params'] / 1e6:.2f}M (attention adds "
                      f"{100 * r['attn_share']:.0f}% more FLOPs)" for r in results[::len(a.ckpt.split(','))]))
    print("others u/t: CPU share other processes used during the unillm / torch run (> 5%: distorted)")
    print("targets: tok/s ratio >= " + ", ".join(f"{k} {v}x" for k, v in targets.items())
          + "; peak RSS ratio <= 0.8")
    if bounds:
        print("\nGEMM-only bound (tok/s if a step were only its projection + lm_head GEMMs, OpenBLAS via "
              "torch.mm on the real shapes; attention and everything else excluded):")
        print(f"{'shape':<12}{'ckpt on':>10}{'on, CE recompute':>18}{'ckpt off':>10}{'off, CE recompute':>19}"
              f"{'others':>8}")
        for shape, b in bounds.items():
            t = b["bound_tokens_per_s"]
            print(f"{shape:<12}{t['ckpt_on']:>10.0f}{t['ckpt_on_ce_recompute']:>18.0f}{t['ckpt_off']:>10.0f}"
                  f"{t['ckpt_off_ce_recompute']:>19.0f}{100 * b['others_cpu_share']:>7.0f}%")
        print("(lm_head GEMMs over the scored positions only, as unillm's cross-entropy: "
              + ", ".join(f"{k} {100 * b['labelled']:.0f}%" for k, b in bounds.items())
              + "; unillm's cross-entropy computes its gradient in the forward (no logits recompute, since "
              "15af7ad): compare with the plain columns)")
        for r in results:
            b, u = bounds.get(r["shape"]), r.get("unillm")
            if b and u:
                k = "ckpt_on" if r["ckpt"] else "ckpt_off"
                print(f"  {r['shape']:<12}{'on' if r['ckpt'] else 'off':<4} unillm at "
                      f"{100 * u['tokens_per_s'] / b['bound_tokens_per_s'][k]:.0f}% of the bound")
    if a.json:
        Path(a.json).write_text(json.dumps({"runs": results, "gemm_bound": bounds}, indent=1) + "\n")


if __name__ == "__main__":
    main()
