#!/usr/bin/env python3
"""Runs bench/gemm_providers once per provider setup, in rounds, and prints the markdown table.

OpenBLAS reads OPENBLAS_CORETYPE and BLIS reads BLIS_ARCH_TYPE once, at library load, so every
core type is its own process: OpenBLAS unset / Haswell / SkylakeX / Cooperlake, oneDNN (sgemm and
matmul) with BLIS autodetected, BLIS forced to skx. Rounds alternate the order of the processes
(forward, then reversed); each cell is the median over rounds of each round's median sample.

    python3 bench/gemm_providers.py --build build-bench --rounds 3 [--only 15M-train]
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import time

SETUPS = [  # (label, extra environment, --providers)
    ("openblas-unset", {}, "openblas"),
    ("openblas-Haswell", {"OPENBLAS_CORETYPE": "Haswell"}, "openblas"),
    ("openblas-SkylakeX", {"OPENBLAS_CORETYPE": "SkylakeX"}, "openblas"),
    ("openblas-Cooperlake", {"OPENBLAS_CORETYPE": "Cooperlake"}, "openblas"),
    ("dnnl+blis-auto", {}, "dnnl_sgemm,dnnl_matmul,blis"),
    ("blis-skx", {"BLIS_ARCH_TYPE": "0"}, "blis"),  # 0 = BLIS_ARCH_SKX (a number, not a name)
]
# --mode h2h: every provider in one process, samples interleaved, so that the ratios between them
# see the same machine load (OpenBLAS on two cores; BLIS forced to skx in both).
SETUPS_H2H = [
    ("h2h-SkylakeX", {"OPENBLAS_CORETYPE": "SkylakeX", "BLIS_ARCH_TYPE": "0"},
     "openblas,dnnl_sgemm,dnnl_matmul,blis"),
    ("h2h-Haswell", {"OPENBLAS_CORETYPE": "Haswell", "BLIS_ARCH_TYPE": "0"},
     "openblas,dnnl_sgemm,dnnl_matmul,blis"),
]
BASELINE = "openblas[Haswell]"
GROUPS = [  # (name, predicate on (model, layer, form, m, n, k)) for the geometric-mean summary
    ("training GEMMs (no lm_head)", lambda key: key[0].endswith("train") and key[1] != "lm_head"),
    ("lm_head chunks (training)", lambda key: key[0].endswith("train") and key[1] == "lm_head"),
    ("decode M = 1, 4", lambda key: not key[0].endswith("train") and key[3] <= 4),
    ("decode M = 16, 64", lambda key: not key[0].endswith("train") and 16 <= key[3] <= 64),
    ("prefill M = 256", lambda key: not key[0].endswith("train") and key[3] == 256),
]


def run_setup(binary, label, env_extra, providers, args, log_dir, rnd):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "BLIS_ARCH_TYPE")}
    env.update(env_extra)
    env["OMP_WAIT_POLICY"] = args.wait_policy
    cmd = [binary, f"--threads={args.threads}", f"--reps={args.reps}", f"--providers={providers}"]
    if args.only:
        cmd.append(f"--only={args.only}")
    load = os.getloadavg()[0]
    t0 = time.time()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    with open(os.path.join(log_dir, f"round{rnd}-{label}.log"), "w") as f:
        f.write(out.stdout + out.stderr)
    if out.returncode != 0:
        sys.exit(f"[gemm_providers] {label} failed (rc {out.returncode}):\n{out.stdout}{out.stderr}")
    print(f"round {rnd} {label:20s} {time.time() - t0:6.1f} s, load {load:.1f} -> "
          f"{os.getloadavg()[0]:.1f}", file=sys.stderr)
    return out.stdout


def parse(stdout, results, info, tag):
    for line in stdout.splitlines():
        f = line.split("\t")
        if f[0] == "RESULT":
            key = (f[2], f[3], f[4], int(f[5]), int(f[6]), int(f[7]))
            results.setdefault(key, {}).setdefault(f[1], []).append(float(f[8]))
            info.setdefault("best", {}).setdefault(key, {}).setdefault(f[1], []).append(float(f[9]))
            info.setdefault("impl", {})[(f[1], key)] = f[14]
            info.setdefault("paired", {}).setdefault((tag, key), {})[f[1]] = float(f[8])
        elif f[0] == "PEAK":
            info.setdefault("ghz", []).append(float(f[1].split()[0]))
        elif f[0] == "ENV" and f[-1].startswith("reps="):
            info.setdefault("reps", set()).add(int(f[-1][len("reps="):]))
        elif f[0] in ("MACHINE", "LIBS", "CHECK"):
            info.setdefault(f[0], set()).add("\t".join(f[1:]))


def table(results, providers, peak, pick=statistics.median):
    head = "| shape | form | M×N×K | " + " | ".join(providers) + " |"
    lines = [head, "|" + "---|" * (3 + len(providers))]
    spreads = []
    for key, per in results.items():
        model, layer, form, m, n, k = key
        flop = 2.0 * m * n * k
        base = pick(per[BASELINE]) if BASELINE in per else None
        cells = []
        for p in providers:
            if p not in per:
                cells.append("—")
                continue
            ms = pick(per[p])
            if len(per[p]) > 1:
                spreads.append(max(per[p]) / min(per[p]))
            gf = flop / ms / 1e6
            ratio = f" ×{base / ms:.2f}" if base else ""
            cells.append(f"{gf:.0f} ({100 * gf / peak:.0f}%){ratio}")
        lines.append(f"| {model} {layer} | {form} | {m}×{n}×{k} | " + " | ".join(cells) + " |")
    return lines, spreads


def summary(results, providers):
    """Geometric mean over each group's cells of the ratio to the baseline (medians)."""
    lines = ["| group | " + " | ".join(providers) + " |", "|" + "---|" * (1 + len(providers))]
    for name, pred in GROUPS:
        cells = []
        for p in providers:
            logs = [math.log(statistics.median(per[BASELINE]) / statistics.median(per[p]))
                    for key, per in results.items() if pred(key) and p in per and BASELINE in per]
            cells.append(f"×{math.exp(sum(logs) / len(logs)):.2f}" if logs else "—")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def paired(info):
    """Ratios inside one process (samples interleaved, same load): OpenBLAS time / provider time,
    per process and round, then the median over rounds. Processes without OpenBLAS are skipped."""
    ratios = {}  # (key, "provider vs openblas[core]") -> [ratio per round]
    for (tag, key), per in info.get("paired", {}).items():
        base = [p for p in per if p.startswith("openblas")]
        for p in per:
            if base and p != base[0]:
                ratios.setdefault((key, f"{p} vs {base[0]}"), []).append(per[base[0]] / per[p])
    cols = sorted({c for _, c in ratios})
    if not cols:
        return []
    keys = list(dict.fromkeys(k for k, _ in ratios))
    lines = ["| shape | form | " + " | ".join(cols) + " |", "|" + "---|" * (2 + len(cols))]
    for key in keys:
        cells = [f"×{statistics.median(ratios[(key, c)]):.2f}" if (key, c) in ratios else "—"
                 for c in cols]
        lines.append(f"| {key[0]} {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    lines += ["", "| group | " + " | ".join(cols) + " |", "|" + "---|" * (1 + len(cols))]
    for name, pred in GROUPS:
        cells = []
        for c in cols:
            logs = [math.log(statistics.median(ratios[(k, c)])) for k in keys
                    if pred(k) and (k, c) in ratios]
            cells.append(f"×{math.exp(sum(logs) / len(logs)):.2f}" if logs else "—")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--wait-policy", default="PASSIVE", help="OMP_WAIT_POLICY (unillm's default)")
    ap.add_argument("--log-dir", default="")
    ap.add_argument("--from-logs", default="", help="only re-aggregate a --log-dir of a past run")
    ap.add_argument("--peak-ghz", type=float, default=0.0,
                    help="clock for %% of peak (default: median of the runs' measured clocks)")
    ap.add_argument("--mode", choices=["cores", "h2h"], default="cores",
                    help="cores: one process per OpenBLAS/BLIS core type; h2h: all in one process")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bench", "gemm_providers")
    log_dir = args.log_dir or time.strftime("/tmp/gemm_providers-%Y%m%d-%H%M%S")
    results, info = {}, {}
    if args.from_logs:
        log_dir = args.from_logs
        names = sorted(os.listdir(log_dir))
        args.rounds = len({n.split("-")[0] for n in names})
        for name in names:
            with open(os.path.join(log_dir, name)) as f:
                parse(f.read(), results, info, name[:-len(".log")])
    else:
        os.makedirs(log_dir, exist_ok=True)
        for rnd in range(1, args.rounds + 1):
            setups = SETUPS if args.mode == "cores" else SETUPS_H2H
            order = setups if rnd % 2 else list(reversed(setups))
            for label, env, providers in order:
                out = run_setup(binary, label, env, providers, args, log_dir, rnd)
                parse(out, results, info, f"round{rnd}-{label}")
    ghz = args.peak_ghz or statistics.median(info["ghz"])
    peak = args.threads * 2 * 16 * 2 * ghz
    providers = sorted({p for per in results.values() for p in per},
                       key=lambda p: (not p.startswith("openblas"), p != BASELINE, p))
    lines, spreads = table(results, providers, peak)
    print(f"logs: {log_dir}")
    for k in ("MACHINE", "LIBS", "CHECK"):
        for v in sorted(info.get(k, ())):
            print(f"{k}: {v}")
    clock = "--peak-ghz" if args.peak_ghz else "median of the runs' dependent-imul clocks"
    print(f"\npeak: {args.threads} cores × 2 FMA × 16 lanes × 2 flop × {ghz:.2f} GHz ({clock}) = "
          f"{peak:.0f} GFLOP/s; OMP_WAIT_POLICY={args.wait_policy}")
    reps = "/".join(str(r) for r in sorted(info.get("reps", {args.reps})))
    print(f"cells: GFLOP/s (% of peak) ×ratio to {BASELINE}; median over {args.rounds} rounds of "
          f"the median of {reps} samples\n")
    print("\n".join(lines))
    print(f"\ngeometric mean of the ratio to {BASELINE} per group:\n")
    print("\n".join(summary(results, providers)))
    pair_lines = paired(info)
    if pair_lines:
        print("\nin-process ratios (OpenBLAS time / provider time, same process and round; median "
              "over rounds), then their geometric mean per group:\n")
        print("\n".join(pair_lines))
    best_lines, _ = table(info["best"], providers, peak, pick=min)
    print("\nbest sample of all rounds (the least disturbed run; same cell format):\n")
    print("\n".join(best_lines))
    if spreads:
        spreads.sort()
        print(f"\nround-to-round spread (slowest/fastest round median) over {len(spreads)} cells: "
              f"median {statistics.median(spreads):.2f}, 90th pct "
              f"{spreads[int(0.9 * (len(spreads) - 1))]:.2f}, max {spreads[-1]:.2f}")


if __name__ == "__main__":
    main()
