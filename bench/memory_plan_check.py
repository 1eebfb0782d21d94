#!/usr/bin/env python3
"""The memory plan's accuracy: predicted peak against the measured process peak RSS of
`unillm train` (stage pt, f32, CPU) on stories15M- and stories110M-shaped random models, full and
LoRA fine-tuning, recompute on and off. Run by hand, never in CI (minutes; 2+ GiB for 110M full).

  python3 bench/memory_plan_check.py [--unillm build-memplan/unillm] [--shapes stories15M,stories110M]
      [--threads 2] [--steps 2]

Models: bench/models/train-<shape>/ (untied HF dirs written by bench/train_bench.py through
bench/make_models.py; this script writes them the same way when they are missing). Data:
data/tinyshakespeare, cutoff_len 256, batch 8 (15M) / 4 (110M) as train_bench.py. The measured
peak is the trainer's own VmHWM line ("memory: predicted peak …, measured …"), cross-checked with
/usr/bin/time's maximum resident set size when that tool exists. The acceptance is
0.85 <= measured / predicted <= 1.15 for every row.
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BATCH = {"stories15M": 8, "stories110M": 4}
SEQ = 256


def model_dir(shape):
    # make_models.make writes OUT/<shape>-f32-untied/ (and a .gguf beside it) and returns that dir.
    sys.path.insert(0, str(HERE))
    import make_models  # noqa: E402  (needs numpy; bench/setup.sh's venv has it)
    d, _ = make_models.make(shape, "f32", HERE / "models" / f"train-{shape}", tied=False)
    return d


def mib(num, unit):
    return float(num) * (1024.0 if unit == "GiB" else 1.0)


def run(binary, mdir, shape, ft, recompute, threads, steps, work):
    out = Path(work) / f"{shape}-{ft}-{'rc' if recompute else 'norc'}"
    cfg = {
        "model_name_or_path": str(mdir), "stage": "pt", "do_train": True, "finetuning_type": ft,
        "dataset": "tinyshakespeare", "dataset_dir": str(REPO / "data"), "cutoff_len": SEQ,
        "output_dir": str(out), "overwrite_output_dir": True, "logging_steps": 1,
        "save_strategy": "no", "plot_loss": False, "per_device_train_batch_size": BATCH[shape],
        "gradient_accumulation_steps": 1, "max_steps": steps, "learning_rate": 5.0e-5,
        "seed": 42, "disable_shuffling": True, "disable_gradient_checkpointing": not recompute,
    }
    if ft == "lora":
        cfg.update({"lora_rank": 8, "lora_alpha": 16, "lora_target": "all", "lora_dropout": 0.0})
    yml = Path(work) / f"{out.name}.yaml"
    yml.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in cfg.items()))
    cmd = [str(binary), "train", str(yml), "--threads", str(threads), "--quiet"]
    if shutil.which("/usr/bin/time"):
        cmd = ["/usr/bin/time", "-v"] + cmd
    env = dict(__import__("os").environ, UNILLM_MEMORY_LIMIT="off")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"memory_plan_check: unillm train failed ({p.returncode}):\n{p.stderr[-3000:]}")
    m = re.search(r"predicted peak ([0-9.]+) (MiB|GiB), measured ([0-9.]+) (MiB|GiB) .*allocator peak ([0-9.]+) (MiB|GiB)",
                  p.stderr)
    if not m:
        sys.exit(f"memory_plan_check: no memory line in the output:\n{p.stderr[-3000:]}")
    t = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    shutil.rmtree(out, ignore_errors=True)
    return {"predicted": mib(m[1], m[2]), "measured": mib(m[3], m[4]), "allocator": mib(m[5], m[6]),
            "time_rss": int(t[1]) / 1024 if t else None, "plan": plan_lines(p.stderr)}


def plan_lines(err):
    lines = err.splitlines()
    for i, l in enumerate(lines):
        if "memory plan" in l:
            return "\n".join(lines[i:i + 12])
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--unillm", default=str(REPO / "build-memplan/unillm"))
    ap.add_argument("--shapes", default="stories15M,stories110M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--show-plans", action="store_true")
    a = ap.parse_args()
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as work:
        for shape in a.shapes.split(","):
            mdir = model_dir(shape)
            for ft in ("full", "lora"):
                for rc in (True, False):
                    r = run(a.unillm, mdir, shape, ft, rc, a.threads, a.steps, work)
                    ratio = r["measured"] / r["predicted"]
                    ok &= 0.85 <= ratio <= 1.15
                    rows.append((shape, ft, "on" if rc else "off", r, ratio))
                    if a.show_plans:
                        print(r["plan"])
                    print(f"{shape:12s} {ft:5s} recompute {'on ' if rc else 'off'}  predicted {r['predicted']:8.0f} MiB"
                          f"  measured {r['measured']:8.0f} MiB  ratio {ratio:5.2f}  (allocator {r['allocator']:.0f}"
                          f" MiB{'' if r['time_rss'] is None else ', /usr/bin/time %.0f MiB' % r['time_rss']})",
                          flush=True)
    print("\n| model | fine-tuning | recompute | predicted MiB | measured MiB | measured/predicted |")
    print("|---|---|---|---:|---:|---:|")
    for shape, ft, rc, r, ratio in rows:
        print(f"| {shape} | {ft} | {rc} | {r['predicted']:.0f} | {r['measured']:.0f} | {ratio:.2f} |")
    print("\nall within ±15%" if ok else "\nSOME ROWS OUTSIDE ±15%")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
