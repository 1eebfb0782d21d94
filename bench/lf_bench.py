#!/usr/bin/env python3
"""LLaMA-Factory as a peer: the same LLaMA-Factory YAML, data and model through `unillm train` and
LLaMA-Factory (bench/.venv-lf, installed by bench/setup.sh) on this CPU; tokens/s, peak RSS and the
loss curves side by side.

  bench/.venv-lf/bin/python bench/lf_bench.py [--shape stories15M] [--modes full,lora] [--runs 3]
      [--steps 20] [--ckpt on|off] [--threads 2] [--unillm build-lf/unillm] [--json out.json]
      [--lf-launch callback|cli]

For each shape it writes (or reuses) bench/models/train-<shape>/ (bench/train_bench.py's model:
make_models' random N(0, 0.02) f32 weights, untied lm_head, the Llama 2 tokenizer of
assets/llama2-tokenizer) and, per mode, ONE YAML:

  stage pt, finetuning_type full | lora (rank 8, alpha 16, target all, dropout 0), dataset
  c4_demo from data/ (dataset_dir + dataset_info.json; 300 documents, 726 packed blocks),
  cutoff_len 256 (packed blocks: every row is 256 real tokens, no padding),
  per_device_train_batch_size 8 (stories110M: 4),
  gradient_accumulation_steps 1, learning_rate, linear schedule, max_grad_norm 1, max_steps,
  seed 42, logging_steps 1, disable_shuffling (both sides read the packed blocks in file order, so
  both see the same batches), gradient checkpointing as LLaMA-Factory's default (on) or
  `disable_gradient_checkpointing: true`, bf16/fp16 false (f32 on both), save_strategy no,
  report_to none.

Not tinyshakespeare: LLaMA-Factory (HF datasets' text loader) keeps its 7223 empty lines as
documents that tokenise to a lone EOS, unillm skips empty lines, so the packed blocks differ
(`--dataset tinyshakespeare` shows it: the row check fails). The LF child checks that its
Trainer's first rows equal the blocks of unillm's documented packing rule.

Both tools run on that same file, alternating (unillm / LLaMA-Factory, the order swapped every
run), each as `/usr/bin/time -v` child with OMP_NUM_THREADS=N (unillm also `--threads N`):
  * unillm: `unillm train CFG.yaml --threads N`; per-step tokens/s and losses from
    output_dir/trainer_log.jsonl.
  * LLaMA-Factory: by default `python lf_bench.py --lf-child CFG.yaml TIMING.json` in .venv-lf,
    which is what `llamafactory-cli train CFG.yaml` runs on a single device (llamafactory.train.
    tuner.run_exp) plus one HF TrainerCallback that timestamps every on_step_end and records the
    first training rows of the Trainer's dataset (checked against the expected packed blocks).
    `--lf-launch cli` runs `llamafactory-cli train CFG.yaml` itself; then only the whole-loop figure
    (HF's train_runtime, which includes the first step) is available.
Tokens/s = non-pad input tokens of a step (batch x 256 here) / the step's wall time (the interval
between consecutive step ends: data, forward, backward, clip, optimizer, logging), median over the
steps after the first; model loading, data preprocessing and saving are excluded on both sides.
The "loop" figure = all steps' tokens / the whole training loop (first step included).
Medians over --runs; the per-run ratio's median is the reported ratio. Load average before/after.
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
SEQ = 256
BATCH = {"stories15M": 8, "stories110M": 4}
LF_VENV = HERE / ".venv-lf"


# ------------------------------------------------------------------ the LLaMA-Factory child
def lf_child(cfg_path, timing_path):
    """Runs LLaMA-Factory's training on cfg_path as `llamafactory-cli train cfg_path` does on one
    device, with a TrainerCallback that records step-end timestamps, HF's train metrics and the
    Trainer's first rows."""
    import torch
    from transformers import TrainerCallback

    from llamafactory.train.tuner import run_exp

    rec = {"step_end": [], "rows": [], "torch": torch.__version__, "torch_threads": torch.get_num_threads()}

    class StepTimer(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            rec["train_begin"] = time.time()
            dl = kw.get("train_dataloader")
            ds = getattr(dl, "dataset", None)
            if ds is not None:
                n = min(len(ds), args.per_device_train_batch_size * args.gradient_accumulation_steps
                        * max(args.max_steps, 1))
                rec["rows"] = [dataset_row(ds[i]) for i in range(n)]
            rec["sampler"] = type(getattr(dl, "sampler", None) or getattr(dl, "batch_sampler", None)).__name__
            model = kw.get("model")
            if model is not None:
                rec["grad_ckpt"] = bool(getattr(model, "is_gradient_checkpointing", False))
                rec["param_dtypes"] = sorted({str(p.dtype) for p in model.parameters()})
                rec["trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
                rec["attn_impl"] = getattr(getattr(model, "config", None), "_attn_implementation", None)
            rec["bf16"], rec["fp16"] = bool(args.bf16), bool(args.fp16)
            rec["optim"] = str(args.optim)

        def on_step_end(self, args, state, control, **kw):
            rec["step_end"].append(time.time())

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                rec.setdefault("losses", []).append(logs["loss"])
                rec.setdefault("logs", []).append(dict(logs))  # with the stage's metrics (DPO rewards etc.)
            if logs and "train_runtime" in logs:
                rec["train_metrics"] = dict(logs)

        def on_train_end(self, args, state, control, **kw):
            rec["train_end"] = time.time()

    sys.argv = [sys.argv[0], cfg_path]  # run_exp reads the YAML from argv[1], as the CLI leaves it
    try:
        run_exp(callbacks=[StepTimer()])
    finally:
        Path(timing_path).write_text(json.dumps(rec))


def dataset_row(row):
    """One row of the Trainer's dataset: the input_ids (pt/sft), or for pairwise data (rm/dpo) a
    dict of the chosen/rejected input_ids and labels."""
    if "input_ids" in row:
        return list(map(int, row["input_ids"]))
    return {k: list(map(int, v)) for k, v in row.items() if k.endswith(("_input_ids", "_labels"))}


# ------------------------------------------------------------------------------- helpers
def child_env(threads):
    """The environment of both tools' processes: N OpenMP/BLAS threads, Hugging Face offline."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false", HF_DATASETS_OFFLINE="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_NO_ADVISORY_WARNINGS="1", DISABLE_VERSION_CHECK="0")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def print_header(a, packages="llamafactory transformers torch peft accelerate datasets"):
    """date, CPU, unillm binary, the peer's package versions, uptime."""
    print(f"date      {time.strftime('%Y-%m-%d %H:%M')}")
    cpu = [l.split(":", 1)[1].strip() for l in sh(["lscpu"]).splitlines() if l.startswith("Model name")]
    print(f"cpu       {cpu[0] if cpu else '?'}, {os.cpu_count()} cpus; threads {a.threads}")
    print(f"unillm    {a.unillm}")
    mods = packages.split()
    print("peer      " + sh([a.lf_python, "-c", f"import {', '.join(mods)}; print(' | '.join(m.__name__ + ' ' + "
                              f"m.__version__ for m in ({', '.join(mods)},)))"]))
    print(f"uptime    {sh(['uptime'])}", flush=True)


def per_step(tokens_per_step, n):
    """tokens_per_step as a list of n: a constant (packed pt blocks) or one count per step."""
    return list(tokens_per_step[:n]) if isinstance(tokens_per_step, (list, tuple)) else [tokens_per_step] * n


def sh(cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()


def load_str():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_busy(seconds=2.0):
    def snap():
        v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return sum(v), v[3] + v[4]
    t0, i0 = snap()
    time.sleep(seconds)
    t1, i1 = snap()
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def wait_quiet(max_wait, limit=0.15):
    """Waits (up to max_wait s) until the CPUs were < limit busy over 2 s (other processes: this
    bench runs one child at a time and none between them); returns the last busy share."""
    t0 = time.time()
    b = cpu_busy()
    while b > limit and time.time() - t0 < max_wait:
        b = cpu_busy(5.0)
    if b > limit:
        print(f"WARNING: the CPUs were {100 * b:.0f}% busy just before this run (other processes)", flush=True)
    return b


def Contention():
    """train_bench.py's measure of the CPU share other processes used during a run."""
    sys.path.insert(0, str(HERE))
    import train_bench  # noqa: E402
    return train_bench.Contention()


def peak_rss_mb(stderr):
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    return int(m.group(1)) / 1024 if m else None


def model_dir(shape):
    sys.path.insert(0, str(HERE))
    import train_bench  # noqa: E402  (writes bench/models/train-<shape>/ when missing)
    return train_bench.model_dir(shape, HERE / "models")


def expected_rows(mdir, dataset, n, block=SEQ, group=1000, bos=1, eos=2):
    """The first n packed rows by unillm's documented pt rule (docs/training.md): .txt = one
    document per non-empty line, .json/.jsonl = the prompt column; tokens + EOS concatenated per
    group of `group` documents, cut into blocks, remainder dropped, first token -> BOS. None when
    the dataset is not a local text/jsonl file."""
    import sentencepiece as spm
    info = json.loads((REPO / "data/dataset_info.json").read_text()).get(dataset, {})
    f = REPO / "data" / info.get("file_name", "")
    col = info.get("columns", {}).get("prompt", "text")
    if f.suffix == ".txt":
        docs = [l for l in f.read_text().splitlines() if l]
    elif f.suffix == ".jsonl":
        docs = [json.loads(l)[col] for l in f.read_text().splitlines() if l.strip()]
        docs = [d for d in docs if d]
    else:
        return None
    sp = spm.SentencePieceProcessor(model_file=str(mdir / "tokenizer.model"))
    rows = []
    for g in range(0, len(docs), group):
        flat = []
        for ids in sp.encode(docs[g:g + group]):
            flat += ids + [eos]
        rows += [[bos] + flat[i + 1:i + block] for i in range(0, len(flat) // block * block, block)]
        if len(rows) >= n:
            break
    if len(rows) < n:
        sys.exit(f"lf_bench: {dataset} gives {len(rows)} blocks of {block}, {n} needed")
    return rows[:n]


def write_cfg(path, a, shape, mdir, mode, out_dir):
    cfg = {
        "model_name_or_path": str(mdir),
        "stage": "pt", "do_train": True, "finetuning_type": mode,
        "dataset": a.dataset, "dataset_dir": str(REPO / "data"), "cutoff_len": SEQ,
        "output_dir": str(out_dir), "overwrite_output_dir": True,
        "logging_steps": 1, "save_strategy": "no", "plot_loss": False, "report_to": "none",
        "per_device_train_batch_size": a.batch or BATCH[shape], "gradient_accumulation_steps": a.ga,
        "max_steps": a.steps, "learning_rate": a.lr, "lr_scheduler_type": "linear", "warmup_steps": 0,
        "max_grad_norm": 1.0, "weight_decay": 0.0, "seed": 42, "disable_shuffling": True,
        "bf16": False, "fp16": False,
    }
    if a.ckpt == "off":
        cfg["disable_gradient_checkpointing"] = True
    if mode == "lora":
        cfg.update({"lora_rank": a.lora_rank, "lora_alpha": 2 * a.lora_rank, "lora_target": "all",
                    "lora_dropout": 0.0})
    for kv in a.extra:
        k, v = kv.split("=", 1)
        cfg[k] = json.loads(v) if v[:1] in "[{\"0123456789-tf" and v not in ("t", "f") else v
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in cfg.items()))
    return cfg


def steady(step_tps):
    timed = step_tps[1:] if len(step_tps) > 1 else step_tps
    return statistics.median(timed) if timed else None


def run_unillm(a, cfg_path, out_dir, tokens_per_step, env):
    cmd = ["/usr/bin/time", "-v", a.unillm, "train", str(cfg_path), "--threads", str(a.threads)]
    shutil.rmtree(out_dir, ignore_errors=True)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit(f"lf_bench: unillm train failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}\n"
                 f"{p.stderr[-4000:]}")
    logs = [json.loads(l) for l in (out_dir / "trainer_log.jsonl").read_text().splitlines() if l.strip()]
    logs = [l for l in logs if "loss" in l]
    tps = [l["tokens_per_s"] for l in logs if "tokens_per_s" in l]
    tok = per_step(tokens_per_step, len(tps))
    res = {"losses": [l["loss"] for l in logs], "logs": logs, "steps_tps": tps, "tokens_per_s": steady(tps),
           "peak_rss_mb": peak_rss_mb(p.stderr), "process_wall_s": wall,
           "loop_tokens_per_s": sum(tok) / sum(n / t for n, t in zip(tok, tps)) if tps else None,
           "notes": sorted({l.strip() for l in (p.stdout + p.stderr).splitlines()
                            if re.search(r"warn|ignor|not implemented|unknown", l, re.I)
                            and "Command being timed" not in l})}
    tr = out_dir / "train_results.json"
    if tr.exists():
        res["train_results"] = json.loads(tr.read_text())
    shutil.rmtree(out_dir, ignore_errors=True)
    return res


def run_lf(a, cfg_path, out_dir, tokens_per_step, env, work):
    shutil.rmtree(out_dir, ignore_errors=True)
    timing = Path(work) / "lf_timing.json"
    timing.unlink(missing_ok=True)
    if a.lf_launch == "cli":
        cmd = ["/usr/bin/time", "-v", str(LF_VENV / "bin/llamafactory-cli"), "train", str(cfg_path)]
    else:
        cmd = ["/usr/bin/time", "-v", a.lf_python, str(Path(__file__).resolve()), "--lf-child", str(cfg_path),
               str(timing)]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit(f"lf_bench: LLaMA-Factory failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}\n"
                 f"{p.stderr[-6000:]}")
    logs = [json.loads(l) for l in (out_dir / "trainer_log.jsonl").read_text().splitlines() if l.strip()]
    res = {"losses": [l["loss"] for l in logs if "loss" in l], "peak_rss_mb": peak_rss_mb(p.stderr),
           "process_wall_s": wall}
    tr = out_dir / "train_results.json"
    if tr.exists():
        res["train_results"] = json.loads(tr.read_text())
        rt = res["train_results"].get("train_runtime")
        if rt:
            res["loop_tokens_per_s"] = sum(per_step(tokens_per_step, a.steps)) / rt
    if timing.exists():
        rec = json.loads(timing.read_text())
        ends = [rec["train_begin"]] + rec["step_end"]
        tok = per_step(tokens_per_step, len(ends) - 1)
        tps = [n / (b - e) for n, e, b in zip(tok, ends, ends[1:])]
        res.update(steps_tps=tps, tokens_per_s=steady(tps), loop_tokens_per_s=sum(tok) / (ends[-1] - ends[0]),
                   rows=rec.pop("rows", []), child={k: v for k, v in rec.items() if k not in ("step_end",)})
    else:
        res.update(steps_tps=[], tokens_per_s=None)
    res["notes"] = sorted({l.strip()[:200] for l in p.stderr.splitlines()
                           if re.search(r"warn", l, re.I) and "Command being timed" not in l})[:20]
    shutil.rmtree(out_dir, ignore_errors=True)
    return res


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--lf-child":
        return lf_child(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="stories15M", choices=sorted(BATCH))
    ap.add_argument("--modes", default="full,lora")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=0, help="default: 8 (stories15M), 4 (stories110M)")
    ap.add_argument("--ga", type=int, default=1, help="gradient_accumulation_steps")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--ckpt", default="on", choices=["on", "off"],
                    help="gradient checkpointing (on = LLaMA-Factory's default)")
    ap.add_argument("--dataset", default="c4_demo",
                    help="from data/dataset_info.json (tinyshakespeare: LLaMA-Factory keeps its empty lines as "
                         "EOS-only documents, unillm skips them: the two then train on different blocks)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--unillm", default=str(REPO / "build-lf/unillm"))
    ap.add_argument("--lf-python", default=str(LF_VENV / "bin/python"))
    ap.add_argument("--lf-launch", default="callback", choices=["callback", "cli"])
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="S",
                    help="before each run wait up to S seconds for the CPUs to be < 15%% busy")
    ap.add_argument("--only", choices=["unillm", "lf"], help="run one side only")
    ap.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                    help="extra YAML key for both sides (repeatable)")
    ap.add_argument("--keep", help="copy the YAML files into this dir")
    ap.add_argument("--json", help="write every result to this file")
    a = ap.parse_args()

    print_header(a)

    mdir = model_dir(a.shape)
    batch = a.batch or BATCH[a.shape]
    tokens_per_step = batch * a.ga * SEQ  # packed blocks: every position is a real token
    env = child_env(a.threads)
    want_rows = expected_rows(mdir, a.dataset, batch * a.ga * a.steps)

    results = {m: [] for m in a.modes.split(",")}
    with tempfile.TemporaryDirectory(prefix="lf_bench-") as work:
        for r in range(a.runs):
            for mode in results:
                cfg_path = Path(work) / f"{a.shape}-{mode}.yaml"
                out_dir = Path(work) / f"out-{mode}"
                write_cfg(cfg_path, a, a.shape, mdir, mode, out_dir)
                if a.keep:
                    Path(a.keep).mkdir(parents=True, exist_ok=True)
                    shutil.copy(cfg_path, Path(a.keep) / cfg_path.name)
                if r == 0:
                    print(f"\n[{mode}] {cfg_path.name}:\n" + cfg_path.read_text(), flush=True)
                order = ["unillm", "lf"] if r % 2 == 0 else ["lf", "unillm"]
                if a.only:
                    order = [a.only]
                run = {"load_before": load_str()}
                for side in order:
                    run[f"busy_before_{side}"] = wait_quiet(a.wait_quiet)
                    with Contention() as c:
                        run[side] = (run_unillm(a, cfg_path, out_dir, tokens_per_step, env) if side == "unillm"
                                     else run_lf(a, cfg_path, out_dir, tokens_per_step, env, work))
                    run[side]["others_cpu_share"] = c.share
                run["load_after"] = load_str()
                u, l = run.get("unillm"), run.get("lf")
                if l and want_rows is not None and l.get("rows"):
                    run["lf_rows_match"] = l["rows"] == want_rows[:len(l["rows"])]
                    l.pop("rows")
                fmt = lambda d: (f"{d['tokens_per_s']:.0f} tok/s (loop {d['loop_tokens_per_s']:.0f}), "  # noqa: E731
                                 f"RSS {d['peak_rss_mb']:.0f} MB, final loss {d['losses'][-1]:.4f}, "
                                 f"others {100 * d['others_cpu_share']:.0f}%" + (" (DISTORTED)" if d['others_cpu_share'] > 0.05 else "")) if d and d.get("tokens_per_s") else "-"
                print(f"[{mode} run {r + 1}] load {run['load_before']} -> {run['load_after']}; unillm {fmt(u)}; "
                      f"LLaMA-Factory {fmt(l)}" + (f"; LF rows == expected blocks: {run['lf_rows_match']}"
                                                   if "lf_rows_match" in run else ""), flush=True)
                results[mode].append(run)

    # ----------------------------------------------------------------------------- report
    print(f"\nuptime after: {sh(['uptime'])}")
    for mode, runs in results.items():
        lf0 = next((x["lf"] for x in runs if "lf" in x), None)
        if lf0 and "child" in lf0:
            c = lf0["child"]
            print(f"[{mode}] LLaMA-Factory side: torch {c.get('torch')} ({c.get('torch_threads')} threads), "
                  f"gradient checkpointing {c.get('grad_ckpt')}, params {c.get('param_dtypes')}, bf16 {c.get('bf16')}, "
                  f"fp16 {c.get('fp16')}, attention {c.get('attn_impl')}, optim {c.get('optim')}, "
                  f"trainable {c.get('trainable')}, sampler {c.get('sampler')}")
        u0 = next((x["unillm"] for x in runs if "unillm" in x), None)
        for side, d in (("unillm", u0), ("LLaMA-Factory", lf0)):
            if d and d.get("notes"):
                print(f"[{mode}] {side} warnings (first run):\n    " + "\n    ".join(d["notes"][:12]))

    print(f"\n{a.shape} {batch}x{SEQ}, ga {a.ga}, {a.steps} steps, lr {a.lr}, f32, {a.threads} threads, "
          f"gradient checkpointing {a.ckpt}; medians over the clean runs of {a.runs} (range)")
    hdr = (f"{'mode':<6}{'unillm tok/s':>22}{'LF tok/s':>20}{'ratio':>16}{'loop ratio':>11}"
           f"{'RSS u MB':>10}{'RSS LF MB':>10}{'loss u':>9}{'loss LF':>9}")
    print(hdr)
    summary = {}
    for mode, all_runs in results.items():
        # runs where another process took > 5% of the CPUs during either side are left out (PyTorch's
        # spinning OpenMP barriers collapse under contention: 3x slower at 45%), unless all are
        clean = [x for x in all_runs if all(x[k]["others_cpu_share"] <= 0.05 for k in ("unillm", "lf") if k in x)]
        runs = clean or all_runs
        if len(clean) < len(all_runs):
            print(f"  ({mode}: {len(all_runs) - len(clean)} of {len(all_runs)} runs distorted by other processes "
                  f"{'left out' if clean else 'KEPT: no clean run'})")
        def col(side, key):
            v = [x[side][key] for x in runs if side in x and x[side].get(key) is not None]
            return v
        def med(v, f=".0f"):
            return f"{statistics.median(v):{f}} ({min(v):{f}}-{max(v):{f}})" if v else "-"
        ut, lt = col("unillm", "tokens_per_s"), col("lf", "tokens_per_s")
        ratios = [x["unillm"]["tokens_per_s"] / x["lf"]["tokens_per_s"] for x in runs
                  if "unillm" in x and "lf" in x and x["lf"].get("tokens_per_s")]
        lratios = [x["unillm"]["loop_tokens_per_s"] / x["lf"]["loop_tokens_per_s"] for x in runs
                   if "unillm" in x and "lf" in x and x["lf"].get("loop_tokens_per_s")]
        ur, lr_ = col("unillm", "peak_rss_mb"), col("lf", "peak_rss_mb")
        ul = [x["unillm"]["losses"][-1] for x in runs if "unillm" in x]
        ll = [x["lf"]["losses"][-1] for x in runs if "lf" in x]
        print(f"{mode:<6}{med(ut):>22}{med(lt):>20}{med(ratios, '.2f'):>16}"
              f"{(f'{statistics.median(lratios):.2f}' if lratios else '-'):>11}"
              f"{(f'{statistics.median(ur):.0f}' if ur else '-'):>10}{(f'{statistics.median(lr_):.0f}' if lr_ else '-'):>10}"
              f"{(f'{ul[0]:.4f}' if ul else '-'):>9}{(f'{ll[0]:.4f}' if ll else '-'):>9}")
        summary[mode] = {"unillm_tps": ut, "lf_tps": lt, "ratios": ratios, "loop_ratios": lratios,
                         "unillm_rss_mb": ur, "lf_rss_mb": lr_, "unillm_final_loss": ul, "lf_final_loss": ll}

    for mode, runs in results.items():
        u = next((x["unillm"] for x in runs if "unillm" in x), None)
        l = next((x["lf"] for x in runs if "lf" in x), None)
        if not (u and l):
            continue
        print(f"\n[{mode}] loss per step (first run), unillm | LLaMA-Factory | difference")
        for i, (x, y) in enumerate(zip(u["losses"], l["losses"])):
            print(f"  step {i + 1:>3}  {x:9.4f} | {y:9.4f} | {x - y:+.4f}")
        d = [abs(x - y) for x, y in zip(u["losses"], l["losses"])]
        summary[mode]["max_abs_loss_diff"] = max(d) if d else None
        print(f"  max |difference| {max(d):.4f}; final {u['losses'][-1]:.4f} vs {l['losses'][-1]:.4f}")
        rep_u = {tuple(x["unillm"]["losses"]) for x in runs if "unillm" in x}
        rep_l = {tuple(x["lf"]["losses"]) for x in runs if "lf" in x}
        print(f"  repeatable over runs: unillm {len(rep_u) == 1}, LLaMA-Factory {len(rep_l) == 1}")
        if any("lf_rows_match" in x for x in runs):
            print(f"  LLaMA-Factory's first {batch * a.ga * a.steps} rows == unillm's packing rule: "
                  f"{all(x.get('lf_rows_match', True) for x in runs)}")
    print("\ntok/s: batch x 256 tokens / step wall time, median of the steps after the first; loop ratio: all "
          "steps' tokens / whole training loop (first step included). RSS: peak of the whole process "
          "(/usr/bin/time -v), model load and Python imports included.")
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "results": results, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
