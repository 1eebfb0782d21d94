#!/usr/bin/env python3
"""DPO against LLaMA-Factory: one LLaMA-Factory DPO YAML through `unillm train` and LLaMA-Factory's
DPO (trl's DPOTrainer under LLaMA-Factory's CustomDPOTrainer, bench/.venv-lf from bench/setup.sh)
on this CPU; tokens/s, peak RSS, the step-1 loss and metrics, the loss curves side by side.

  bench/.venv-lf/bin/python bench/dpo_bench.py [--shape stories15M] [--runs 2] [--steps 20]
      [--batch 2] [--threads 2] [--same-adapter] [--unillm build/unillm] [--json out.json]

The YAML (one file, read by both): stage dpo, finetuning_type lora (rank 8, alpha 16, target all,
dropout 0), pref_loss sigmoid, pref_beta 0.1, dataset dpo_en_demo from data/ (sharegpt ranking
pairs), template alpaca, cutoff_len 256 (the stories shapes' context), per_device_train_batch_size
2, gradient_accumulation_steps 1, learning_rate 5e-4 linear, max_grad_norm 1, seed 42,
disable_shuffling, f32 (bf16/fp16 false), gradient checkpointing on (LLaMA-Factory's default;
--ckpt off), logging_steps 1, save_strategy no, report_to none. The model is lf_bench's
bench/models/train-<shape>/ (random N(0, 0.02) f32, untied, the Llama 2 tokenizer).

Tokens of a step = the non-pad tokens of its chosen and rejected rows (prompt + response, as each
side feeds them to the policy): LLaMA-Factory's own encoding of the YAML's data, read once up front
by `--lf-pairs` (LLaMA-Factory's get_dataset, stage rm, as its run_dpo calls it); unillm's
train_results.json `train_tokens` must equal their sum (it counts its rows' real tokens). Tokens/s =
a step's tokens / its wall time (LLaMA-Factory: between consecutive on_step_end callbacks, lf_bench's
child; unillm: its trainer_log.jsonl tokens_per_s), median over the steps after the first; each step
is the policy forward + backward and the reference forward (the adapters switched off) on both.
The step-1 loss is ln 2 on both (the adapters' B is 0: policy == reference); so are the rewards,
and logps/chosen|rejected are the same model's log-probs of the same tokens, so they must agree.
Later steps depend on the LoRA A draws, which differ; --same-adapter gives both sides unillm's
initial adapter (one step at learning_rate 0) as adapter_name_or_path, so that whole curves compare.
"""
import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import lf_bench as lfb  # noqa: E402  (model, child process, timing and environment helpers)

REPO = HERE.parent
CUTOFF = 256
METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
           "logps/chosen", "logps/rejected", "logits/chosen", "logits/rejected")
# isa_bench's probe, skipping NumPy's own OpenBLAS (the venv's NumPy wheel bundles one): the core
# type of the OpenBLAS that torch's sgemm runs on.
CORE_PROBE = r"""
import ctypes, torch
torch.set_num_threads(1)
a = torch.randn(64, 64); (a @ a).sum().item()
path = next(l.split()[-1] for l in open('/proc/self/maps')
            if ('openblas' in l or 'libblas' in l) and 'numpy' not in l)
lib = ctypes.CDLL(path)
lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode(), path)
"""


# ------------------------------------------------------------- LLaMA-Factory's encoded pairs
def lf_pairs_child(cfg_path, out_path):
    """Writes the chosen/rejected input_ids and labels of the YAML's training set, encoded by
    LLaMA-Factory as its run_dpo does (get_dataset with stage rm), in the Trainer's order."""
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    sys.argv = [sys.argv[0], cfg_path]
    model_args, data_args, training_args, _, _ = get_train_args()
    tokenizer_module = load_tokenizer(model_args)
    template = get_template_and_fix_tokenizer(tokenizer_module["tokenizer"], data_args)
    ds = get_dataset(template, model_args, data_args, training_args, stage="rm", **tokenizer_module)["train_dataset"]
    Path(out_path).write_text(json.dumps([lfb.dataset_row(ds[i]) for i in range(len(ds))]))


def lf_pairs(a, cfg_path, env, work):
    out = Path(work) / "lf_pairs.json"
    p = subprocess.run([a.lf_python, str(Path(__file__).resolve()), "--lf-pairs", str(cfg_path), str(out)],
                           capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"dpo_bench: LLaMA-Factory's data pass failed ({p.returncode})\n{p.stderr[-4000:]}")
    return json.loads(out.read_text())


# ------------------------------------------------------------------------------- the YAML
def write_cfg(path, a, mdir, out_dir, **over):
    cfg = {
        "model_name_or_path": str(mdir),
        "stage": "dpo", "do_train": True, "finetuning_type": "lora",
        "lora_rank": 8, "lora_alpha": 16, "lora_target": "all", "lora_dropout": 0.0,
        "pref_beta": 0.1, "pref_loss": "sigmoid",
        "dataset": "dpo_en_demo", "dataset_dir": str(REPO / "data"), "template": "alpaca", "cutoff_len": CUTOFF,
        "output_dir": str(out_dir), "overwrite_output_dir": True,
        "logging_steps": 1, "save_strategy": "no", "plot_loss": False, "report_to": "none",
        "per_device_train_batch_size": a.batch, "gradient_accumulation_steps": 1,
        "max_steps": a.steps, "learning_rate": a.lr, "lr_scheduler_type": "linear", "warmup_steps": 0,
        "max_grad_norm": 1.0, "weight_decay": 0.0, "seed": 42, "disable_shuffling": True,
        "bf16": False, "fp16": False,
    }
    if a.ckpt == "off":
        cfg["disable_gradient_checkpointing"] = True
    cfg.update(over)
    for kv in a.extra:
        k, v = kv.split("=", 1)
        cfg[k] = json.loads(v) if v[:1] in "[{\"0123456789-tf" and v not in ("t", "f") else v
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in cfg.items()))
    return cfg


def initial_adapter(a, mdir, work, env):
    """unillm's LoRA adapter before any update (one step at learning_rate 0: A drawn, B = 0)."""
    d = Path(work) / "adapter0"
    cfg = Path(work) / "adapter0.yaml"
    write_cfg(cfg, a, mdir, d, max_steps=1, learning_rate=0.0)
    p = subprocess.run([a.unillm, "train", str(cfg), "--threads", str(a.threads)], capture_output=True,
                           text=True, env=env)
    if p.returncode != 0 or not (d / "adapter_config.json").exists():
        sys.exit(f"dpo_bench: the initial adapter run failed ({p.returncode})\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return d


# ----------------------------------------------------------------------------- the report
def lf_logs(res):
    return res.get("child", {}).get("logs") or [{"loss": x} for x in res["losses"]]


def report_step1(u, l):
    ul, ll = u["logs"][0], lf_logs(l)[0]
    print(f"\nstep 1 (policy == reference on both; ln 2 = {math.log(2):.4f})      unillm | LLaMA-Factory | difference")
    out = {}
    for k in ("loss",) + METRICS:
        x, y = ul.get(k), ll.get(k)
        if x is None or y is None:
            print(f"  {k:<20} {x!s:>14} | {y!s:>14}")
            continue
        out[k] = (x, y)
        rel = abs(x - y) / max(abs(y), 1e-12)
        print(f"  {k:<20} {x:14.6f} | {y:14.6f} | {x - y:+.3g} ({100 * rel:.3g} %)")
    return out


def report_curves(u, l, steps):
    ul, ll = u["logs"], lf_logs(l)
    print("\nper step (first run): loss, rewards/accuracies, rewards/margins   unillm | LLaMA-Factory")
    for i, (x, y) in enumerate(zip(ul[:steps], ll[:steps])):
        f = lambda d, k: f"{d[k]:8.4f}" if k in d else "       -"  # noqa: E731
        print(f"  step {i + 1:>3}  loss {f(x, 'loss')} | {f(y, 'loss')}   acc {f(x, 'rewards/accuracies')} | "
              f"{f(y, 'rewards/accuracies')}   margin {f(x, 'rewards/margins')} | {f(y, 'rewards/margins')}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] in ("--lf-child", "--lf-pairs"):
        return (lfb.lf_child if sys.argv[1] == "--lf-child" else lf_pairs_child)(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="stories15M", choices=sorted(lfb.BATCH))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=2, help="pairs per step (2x rows: chosen, rejected)")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--ckpt", default="on", choices=["on", "off"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--unillm", default=str(REPO / "build/unillm"))
    ap.add_argument("--lf-python", default=str(lfb.LF_VENV / "bin/python"))
    ap.add_argument("--lf-core", default="Cooperlake",
                    help="OPENBLAS_CORETYPE of the LLaMA-Factory side only (isa.md: PyTorch's fastest correct core "
                         "type on these VMs; OpenBLAS 0.3.21 falls back to SSE3 Prescott kernels on a CPU it does not "
                         "know); '' leaves the environment as it is")
    ap.add_argument("--same-adapter", action="store_true",
                    help="both sides start from unillm's initial adapter (adapter_name_or_path)")
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="S")
    ap.add_argument("--only", choices=["unillm", "lf"])
    ap.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--keep", help="copy the YAML into this dir")
    ap.add_argument("--json")
    a = ap.parse_args()
    a.lf_launch = "callback"  # lf_bench.run_lf: the LF child with the step timer

    lfb.print_header(a, "llamafactory trl transformers torch peft accelerate datasets")
    mdir = lfb.model_dir(a.shape)
    env = lfb.child_env(a.threads)
    lf_env = dict(env)
    if a.lf_core:
        lf_env.pop("OPENBLAS_L2_SIZE", None)
        lf_env["OPENBLAS_CORETYPE"] = a.lf_core
    core = subprocess.run([a.lf_python, "-c", CORE_PROBE], capture_output=True, text=True, env=lf_env)
    print(f"LLaMA-Factory side's OpenBLAS: OPENBLAS_CORETYPE={lf_env.get('OPENBLAS_CORETYPE', '(unset)')} -> "
          f"{core.stdout.strip() or core.stderr.strip()[-200:]}; unillm's environment: "
          f"OPENBLAS_CORETYPE={env.get('OPENBLAS_CORETYPE', '(unset)')}", flush=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="dpo_bench-") as work:
        over = {}
        if a.same_adapter:
            over["adapter_name_or_path"] = str(initial_adapter(a, mdir, work, env))
        cfg_path, out_dir = Path(work) / f"{a.shape}-dpo.yaml", Path(work) / "out"
        write_cfg(cfg_path, a, mdir, out_dir, **over)
        if a.keep:
            Path(a.keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(cfg_path, Path(a.keep) / cfg_path.name)
        print(f"\n{cfg_path.name}:\n" + cfg_path.read_text(), flush=True)

        pairs = lf_pairs(a, cfg_path, env, work)
        tokens = [sum(len(p["chosen_input_ids"]) + len(p["rejected_input_ids"]) for p in pairs[s * a.batch:(s + 1) * a.batch])
                  for s in range(a.steps)]
        lens = [len(p[k]) for p in pairs[:a.batch * a.steps] for k in ("chosen_input_ids", "rejected_input_ids")]
        print(f"LLaMA-Factory encodes {len(pairs)} pairs; the {a.steps} steps' rows: {min(lens)}-{max(lens)} tokens "
              f"(mean {statistics.mean(lens):.0f}), {min(tokens)}-{max(tokens)} tokens per step (total {sum(tokens)})",
              flush=True)

        for r in range(a.runs):
            order = [a.only] if a.only else (["unillm", "lf"] if r % 2 == 0 else ["lf", "unillm"])
            run = {"load_before": lfb.load_str()}
            for side in order:
                run[f"busy_before_{side}"] = lfb.wait_quiet(a.wait_quiet)
                with lfb.Contention() as c:
                    run[side] = (lfb.run_unillm(a, cfg_path, out_dir, tokens, env) if side == "unillm"
                                 else lfb.run_lf(a, cfg_path, out_dir, tokens, lf_env, work))
                run[side]["others_cpu_share"] = c.share
            run["load_after"] = lfb.load_str()
            u, l = run.get("unillm"), run.get("lf")
            if u:
                run["unillm_train_tokens"] = u.get("train_results", {}).get("train_tokens")
            if l and l.get("rows"):
                rows = l.pop("rows")
                run["lf_rows_match"] = rows == pairs[:len(rows)]
            fmt = lambda d: (f"{d['tokens_per_s']:.0f} tok/s (loop {d['loop_tokens_per_s']:.0f}), RSS "  # noqa: E731
                             f"{d['peak_rss_mb']:.0f} MB, others {100 * d['others_cpu_share']:.0f}%"
                             + (" (DISTORTED)" if d['others_cpu_share'] > 0.05 else "")) if d else "-"
            print(f"[run {r + 1}] load {run['load_before']} -> {run['load_after']}; unillm {fmt(u)}; "
                  f"LLaMA-Factory {fmt(l)}", flush=True)
            runs.append(run)

    # ------------------------------------------------------------------------------ summary
    print(f"\nuptime after: {lfb.sh(['uptime'])}")
    u0 = next((x["unillm"] for x in runs if "unillm" in x), None)
    l0 = next((x["lf"] for x in runs if "lf" in x), None)
    if l0 and "child" in l0:
        c = l0["child"]
        print(f"LLaMA-Factory side: torch {c.get('torch')} ({c.get('torch_threads')} threads), gradient checkpointing "
              f"{c.get('grad_ckpt')}, params {c.get('param_dtypes')}, attention {c.get('attn_impl')}, optim "
              f"{c.get('optim')}, trainable {c.get('trainable')}, sampler {c.get('sampler')}")
    for side, d in (("unillm", u0), ("LLaMA-Factory", l0)):
        if d and d.get("notes"):
            print(f"{side} warnings (first run):\n    " + "\n    ".join(d["notes"][:12]))
    ut = [x["unillm"]["train_results"]["train_tokens"] for x in runs if "train_results" in x.get("unillm", {})]
    if ut:
        print(f"unillm train_tokens {ut[0]} vs LLaMA-Factory's encoding {sum(tokens)}: "
              f"{'equal' if all(t == sum(tokens) for t in ut) else 'DIFFERENT'}")
    if any("lf_rows_match" in x for x in runs):
        print(f"LLaMA-Factory Trainer rows == its data pass: {all(x.get('lf_rows_match', True) for x in runs)}")

    # A side's figure counts only from runs where other processes took <= 5 % of the CPUs during it
    # (PyTorch's spinning OpenMP barriers collapse under contention); the ratio is of those medians,
    # "paired" the per-run ratios of runs clean on both sides.
    ok = lambda x, s: s in x and x[s]["others_cpu_share"] <= 0.05  # noqa: E731
    col = lambda s, k: [x[s][k] for x in runs if ok(x, s) and x[s].get(k) is not None]  # noqa: E731
    med = lambda v, f=".0f": f"{statistics.median(v):{f}} ({min(v):{f}}-{max(v):{f}}, {len(v)} runs)" if v else "-"  # noqa: E731
    paired = [x["unillm"]["tokens_per_s"] / x["lf"]["tokens_per_s"] for x in runs if ok(x, "unillm") and ok(x, "lf")]
    ratio = lambda k: (statistics.median(col("unillm", k)) / statistics.median(col("lf", k))  # noqa: E731
                       if col("unillm", k) and col("lf", k) else None)
    print(f"\n{a.shape} DPO LoRA r8, {a.batch} pairs x cutoff {CUTOFF}, {a.steps} steps, lr {a.lr}, f32, {a.threads} "
          f"threads, gradient checkpointing {a.ckpt}; medians over each side's clean runs of {len(runs)} (range)")
    print(f"  tokens/s (chosen + rejected)  unillm {med(col('unillm', 'tokens_per_s'))}   LLaMA-Factory "
          f"{med(col('lf', 'tokens_per_s'))}")
    print(f"  loop tokens/s                 unillm {med(col('unillm', 'loop_tokens_per_s'))}   LLaMA-Factory "
          f"{med(col('lf', 'loop_tokens_per_s'))}")
    fr = lambda v: f"{v:.2f}" if v else "-"  # noqa: E731
    print(f"  ratio unillm / LLaMA-Factory  {fr(ratio('tokens_per_s'))} (loop {fr(ratio('loop_tokens_per_s'))}; "
          f"paired runs {', '.join(f'{x:.2f}' for x in paired) or 'none clean on both sides'})")
    print(f"  peak RSS MB                   unillm {med(col('unillm', 'peak_rss_mb'))}   LLaMA-Factory "
          f"{med(col('lf', 'peak_rss_mb'))}")
    summary = {"tokens_per_step": tokens, "ratio": ratio("tokens_per_s"), "loop_ratio": ratio("loop_tokens_per_s"),
               "paired_ratios": paired}
    if u0 and l0:
        summary["step1"] = report_step1(u0, l0)
        report_curves(u0, l0, a.steps)
        rep = lambda s: len({tuple(x[s]["losses"]) for x in runs if s in x}) == 1  # noqa: E731
        print(f"  repeatable over runs: unillm {rep('unillm')}, LLaMA-Factory {rep('lf')}")
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "runs": runs, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
