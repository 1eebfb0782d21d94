#!/usr/bin/env python3
"""The ISA issue's training acceptance run: unillm at its chosen level (auto: oneDNN f32 GEMMs at
AVX-512), unillm capped at `--isa avx2` (OpenBLAS pinned to Haswell as these machines set it: the AVX2
path and figures from before this issue), unillm with `bf16: true`
(bf16 GEMMs on AVX512-BF16) and PyTorch on its fastest correct OpenBLAS core type, same model, data,
batch and threads as bench/train_bench.py (whose runners it uses), in alternating rounds; medians.

  bench/.venv/bin/python bench/isa_bench.py [--shapes stories15M,stories110M] [--modes full,lora]
      [--rounds 3] [--unillm build-bench/unillm] [--coretypes SkylakeX,Cooperlake,Zen,Haswell]

PyTorch's core type: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from the PyTorch command's
environment only, then each candidate core type is tried on a short stories15M run; the fastest
whose losses match the others' (1e-3 relative) is kept, and the core OpenBLAS reports for it is
printed (openblas_get_corename from the library torch loaded). unillm never sees the variable
changed: its own GEMM provider does not read it (docs/ARCHITECTURE.md, "CPU instruction sets").
bf16 is also run with `bf16_compute: false` (f32 arithmetic, bf16 storage) for the comparison,
and its 50-step loss curve against f32's with --curve.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import train_bench as tb  # noqa: E402

CORE_PROBE = r"""
import ctypes, torch
torch.set_num_threads(1)
a = torch.randn(64, 64); (a @ a).sum().item()
path = next(l.split()[-1] for l in open('/proc/self/maps') if 'openblas' in l or 'libblas' in l)
lib = ctypes.CDLL(path)
lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode(), path)
"""


def torch_env(core):
    return {"OPENBLAS_CORETYPE": core, "OPENBLAS_L2_SIZE": None}


def core_name(python, core):
    env = dict(tb.os.environ)
    env.pop("OPENBLAS_L2_SIZE", None)
    env["OPENBLAS_CORETYPE"] = core
    p = subprocess.run([python, "-c", CORE_PROBE], capture_output=True, text=True, env=env)
    return p.stdout.strip() or p.stderr.strip()[-200:]


def pick_torch_core(a, work):
    mdir = tb.model_dir("stories15M", a.out)
    ids = tb.packed_blocks(mdir / "tokenizer.model", 4 * tb.BATCH["stories15M"])
    ids_path = Path(work) / "ids-core.npy"
    np.save(ids_path, ids)
    results = {}
    for core in a.coretypes.split(","):
        r = tb.run_torch(a.torch_python, mdir, ids_path, "stories15M", 4, a.threads, True,
                         env_extra=torch_env(core))
        results[core] = r
        print(f"torch OPENBLAS_CORETYPE={core:<11} runs {core_name(a.torch_python, core):<60} "
              f"{r['tokens_per_s']:8.1f} tok/s  losses {['%.5f' % l for l in r['losses']]}", flush=True)
    ref = results[a.coretypes.split(",")[-1]]["losses"]
    ok = {c: r for c, r in results.items()
          if all(abs(x - y) <= 1e-3 * abs(y) for x, y in zip(r["losses"], ref))}
    best = max(ok, key=lambda c: ok[c]["tokens_per_s"])
    print(f"torch core type kept: {best} (fastest of those whose losses match)", flush=True)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="stories15M,stories110M")
    ap.add_argument("--modes", default="full,lora")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0, help="steps per run (default 6 / 4)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--unillm", default=str(tb.REPO / "build-bench/unillm"))
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--coretypes", default="SkylakeX,Cooperlake,Zen,Haswell")
    ap.add_argument("--torch-core", help="skip the core-type search and use this one")
    ap.add_argument("--variants", default="auto,avx2,bf16,bf16-f32,torch")
    ap.add_argument("--curve", type=int, default=0, metavar="STEPS",
                    help="also compare bf16's and f32's loss over STEPS steps (stories110M)")
    ap.add_argument("--out", default=str(HERE / "models"))
    ap.add_argument("--json")
    a = ap.parse_args()
    print("load:", open("/proc/loadavg").read().strip(), flush=True)
    variants = a.variants.split(",")
    all_results = {}
    with tempfile.TemporaryDirectory() as work:
        core = a.torch_core or (pick_torch_core(a, work) if "torch" in variants else None)
        for shape in a.shapes.split(","):
            steps = a.steps or (6 if shape == "stories15M" else 4)
            mdir = tb.model_dir(shape, a.out)
            ids = tb.packed_blocks(mdir / "tokenizer.model", steps * tb.BATCH[shape])
            ids_path = Path(work) / f"ids-{shape}.npy"
            np.save(ids_path, ids)
            for mode in a.modes.split(","):
                lora = 8 if mode == "lora" else 0
                runs = {v: [] for v in variants}
                for rnd in range(a.rounds):
                    order = variants if rnd % 2 == 0 else variants[::-1]
                    for v in order:
                        tb.check_quiet()
                        if v == "torch":
                            r = tb.run_torch(a.torch_python, mdir, ids_path, shape, steps, a.threads,
                                             True, lora, env_extra=torch_env(core))
                        else:
                            cfg = {"bf16": True} if v.startswith("bf16") else {}
                            if v == "bf16-f32":
                                cfg["bf16_compute"] = False
                            args = ["--isa", "avx2"] if v == "avx2" else []
                            # --isa avx2 runs OpenBLAS: on the core type these machines set
                            # (OPENBLAS_CORETYPE=Haswell), i.e. the AVX2 figures before this issue.
                            env = {"OPENBLAS_CORETYPE": "Haswell"} if v == "avx2" else {}
                            r = tb.run_unillm(a.unillm, mdir, shape, steps, a.threads, True, work, lora,
                                              cfg, args, env)
                        runs[v].append(r["tokens_per_s"])
                        print(f"[{shape} {mode} round {rnd + 1}] {v:<9} {r['tokens_per_s']:8.1f} tok/s  "
                              f"losses {['%.4f' % l for l in r['losses'][:4]]}", flush=True)
                med = {v: statistics.median(x) for v, x in runs.items()}
                all_results[f"{shape}-{mode}"] = {"runs": runs, "median": med, "torch_core": core}
                line = "  ".join(f"{v} {m:.1f}" for v, m in med.items())
                print(f"== {shape} {mode} (recompute on, {a.rounds} rounds, medians, tok/s): {line}")
                if "torch" in med:
                    for v in ("auto", "avx2", "bf16"):
                        if v in med:
                            print(f"   unillm {v} / PyTorch ({core}): {med[v] / med['torch']:.2f}x")
                if "bf16" in med and "auto" in med:
                    print(f"   bf16 / f32 (auto): {med['bf16'] / med['auto']:.2f}x", flush=True)
            if a.curve and shape == "stories110M":
                ids = tb.packed_blocks(mdir / "tokenizer.model", a.curve * tb.BATCH[shape])
                np.save(ids_path, ids)
                f32 = tb.run_unillm(a.unillm, mdir, shape, a.curve, a.threads, True, work)
                b16 = tb.run_unillm(a.unillm, mdir, shape, a.curve, a.threads, True, work, 0, {"bf16": True})
                worst = max(abs(x - y) / abs(y) for x, y in zip(b16["losses"], f32["losses"]))
                print(f"== loss curve {a.curve} steps, bf16 vs f32: worst relative difference "
                      f"{100 * worst:.2f}% (final {b16['losses'][-1]:.4f} vs {f32['losses'][-1]:.4f})")
                all_results["curve"] = {"f32": f32["losses"], "bf16": b16["losses"], "worst_rel": worst}
    if a.json:
        Path(a.json).write_text(json.dumps(all_results, indent=1))


if __name__ == "__main__":
    main()
