#!/usr/bin/env python3
"""unillm vs llama.cpp (llama-cpp-python) on the same random-weight Llama: prefill of P prompt
tokens and decode of N tokens, same weights, precision, KV cache type (--kv f32 or f16, the same
on both; f16 is llama.cpp's default), threads.

  bench/.venv/bin/python bench/decode_bench.py [--shape stories110M] [--dtype f32] [--threads 2]
  bench/.venv/bin/python bench/decode_bench.py --quant int8   # unillm weight_only_int8 vs Q8_0
  bench/.venv/bin/python bench/decode_bench.py --quant int4   # unillm weight_only_int4 vs Q4_0

--quant quantises both sides from the same f32 weights: unillm at load (--quant_type; the lm_head
int8, or int4 in the *-head4 modes), llama.cpp with its own quantiser (llama_model_quantize, as llama-quantize: under Q4_0 its
output layer is Q6_K). The bytes each side reads per token are printed beside the ratios.

Both sides are timed the same way: prefill = one forward over the P prompt tokens up to the last
token's logits; decode = N forwards of one token each (greedy argmax between them). unillm runs as
a subprocess (`unillm generate`, timing parsed from its stderr line, --max-new-tokens N+1 so that
N tokens are forwarded); llama.cpp runs in this process (llm.eval). A warm-up run comes first,
then --runs runs of each, alternating, and their medians. Decode GB/s = weight bytes read per token × tok/s (and with
the KV bytes at mid decode added), printed
beside a same-run STREAM figure (build-bench/stream_bench).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models  # noqa: E402

LINE = re.compile(r"\[generate\] prompt (\d+) tokens in ([\d.]+) s .*; (\d+) new tokens in ([\d.]+) s")


def sh(cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()


def print_env(binary, threads):
    print(f"date      {time.strftime('%Y-%m-%d %H:%M')}")
    model = [l.split(":", 1)[1].strip() for l in sh(["lscpu"]).splitlines() if l.startswith("Model name")]
    print(f"cpu       {model[0] if model else '?'}, {os.cpu_count()} cpus; threads {threads}")
    print(f"load      {sh(['uptime']).split('load average:')[-1].strip()}")
    import llama_cpp
    print(f"llama.cpp llama-cpp-python {llama_cpp.__version__}")
    print("unillm env:")
    for l in sh([str(binary), "env"]).splitlines():
        print("  " + l)


def weight_bytes_per_token(s, dtype):
    """Bytes of weights one decode step reads: every layer matrix + lm_head + norms + one
    embedding row (tied or not, lm_head is a full [V, C] read)."""
    C, F, V, L = s["dim"], s["hidden"], s["vocab"], s["layers"]
    hd = C // s["heads"]
    per_layer = C * s["heads"] * hd * 2 + C * s["kv_heads"] * hd * 2 + 3 * C * F
    elt = 2 if dtype == "bf16" else 4
    return (L * per_layer + V * C + C) * elt + (2 * L + 1) * C * 4


def kv_bytes_per_token(s, ctx, elt=4):
    """K and V (elt bytes each) read by one decode step's attention at context length ctx."""
    hd = s["dim"] // s["heads"]
    return s["layers"] * 2 * ctx * s["kv_heads"] * hd * elt


# Bytes per weight of each quantised format (codes + scales), and of the lm_head beside it.
QUANT = {
    # unillm: int8 codes + an f32 scale per row (~1 B); int4 g32 asymmetric: 4 bits + an f16
    # scale and minimum per 32 (0.625 B, llama.cpp's Q4_1 bytes); int4-sym: symmetric codes with
    # an f16 scale per 32 (0.5625 B, Q4_0's bytes); the lm_head int8 in these three.
    "int8": dict(flags=["--quant_type", "weight_only_int8"], unillm=1.0, unillm_head=1.0, ftype=7, gguf="Q8_0",
                 llama=34 / 32, llama_head=34 / 32),
    "int4": dict(flags=["--quant_type", "weight_only_int4"], unillm=0.625, unillm_head=1.0, ftype=2, gguf="Q4_0",
                 llama=18 / 32, llama_head=210 / 256),  # llama-quantize keeps output at Q6_K
    "int4-sym": dict(flags=["--quant_type", "weight_only_int4", "--quant-symmetric"], unillm=0.5625, unillm_head=1.0,
                     ftype=2, gguf="Q4_0", llama=18 / 32, llama_head=210 / 256),
    # The same with --lm-head-quant int4: the lm_head in the layers' int4 format, fewer bytes
    # than llama.cpp's Q6_K output (int4-head4: 0.7 % more bytes per token than Q4_0 in all;
    # int4-sym-head4: 9 % fewer).
    "int4-head4": dict(flags=["--quant_type", "weight_only_int4", "--lm-head-quant", "int4"], unillm=0.625,
                       unillm_head=0.625, ftype=2, gguf="Q4_0", llama=18 / 32, llama_head=210 / 256),
    "int4-sym-head4": dict(flags=["--quant_type", "weight_only_int4", "--quant-symmetric", "--lm-head-quant", "int4"],
                           unillm=0.5625, unillm_head=0.5625, ftype=2, gguf="Q4_0", llama=18 / 32,
                           llama_head=210 / 256),
    # int4 with f32 scales (the format before f16 scales): 0.75 B.
    "int4-f32": dict(flags=["--quant_type", "weight_only_int4", "--scale-dtype", "f32"], unillm=0.75,
                     unillm_head=1.0, ftype=2, gguf="Q4_0", llama=18 / 32, llama_head=210 / 256),
}


def quant_bytes_per_token(s, layer_bpw, head_bpw):
    C, F, V, L = s["dim"], s["hidden"], s["vocab"], s["layers"]
    hd = C // s["heads"]
    per_layer = C * s["heads"] * hd * 2 + C * s["kv_heads"] * hd * 2 + 3 * C * F
    return L * per_layer * layer_bpw + V * C * head_bpw + (2 * L + 1) * C * 4


def llama_quantize(gguf_path, quant, threads):
    """llama.cpp's own quantiser on the f32 GGUF (what llama-quantize runs); cached beside it."""
    import ctypes
    import llama_cpp
    out = Path(str(gguf_path).replace(".gguf", f"-{QUANT[quant]['gguf']}.gguf"))
    if not out.exists():
        p = llama_cpp.llama_model_quantize_default_params()
        p.ftype = QUANT[quant]["ftype"]
        p.nthread = threads
        rc = llama_cpp.llama_model_quantize(str(gguf_path).encode(), str(out).encode(), ctypes.byref(p))
        if rc != 0:
            sys.exit(f"decode_bench: llama_model_quantize failed ({rc})")
    return out


def unillm_run(binary, model_dir, prompt, n, threads, extra=()):
    cmd = [str(binary), "generate", "--model", str(model_dir), "--prompt-ids", ",".join(map(str, prompt)),
           "--max-new-tokens", str(n + 1), "--temperature", "0", "--threads", str(threads), "--ignore-eos",
           *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = LINE.search(r.stderr)
    if r.returncode != 0 or not m:
        sys.exit(f"decode_bench: unillm failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    p, ps, k, ds = int(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))
    # k = n + 1 sampled tokens; the last is not forwarded, so ds covers n one-token forwards.
    return p / ps, (k - 1) / ds


def llama_cpp_run(llm, prompt, n):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    prefill = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(n):
        tok = int(np.argmax(make_models.last_logits(llm)))
        llm.eval([tok])
    decode = time.perf_counter() - t1
    return len(prompt) / prefill, n / decode


def stream(binary, threads):
    out = sh([str(binary), f"--threads={threads}", "--mb=256"])
    return {l.split()[0]: float(l.split()[1]) for l in out.splitlines()[1:] if "GB/s" in l}


def interleaved_medians(fa, fb, runs):
    """Warm-up of each, then runs alternating a, b, a, b, ... so that both see the same load;
    returns the (prefill, decode) medians of each."""
    fa(), fb()
    ra, rb = [], []
    for _ in range(runs):
        ra.append(fa())
        rb.append(fb())
    med = lambda rs: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
    return med(ra), med(rb)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(make_models.SHAPES), default="stories110M")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--untied", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=256, help="prefill tokens")
    ap.add_argument("--decode", type=int, default=128, help="decode tokens")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--models", default=str(HERE / "models"))
    ap.add_argument("--build", default=str(HERE.parent / "build-bench"))
    ap.add_argument("--skip-check", action="store_true", help="skip the greedy-token agreement check")
    ap.add_argument("--quant", choices=sorted(QUANT), help="weight-only int8 / int4 on both sides")
    ap.add_argument("--kv", choices=["f32", "f16"], default="f32", help="KV cache type on both sides")
    a = ap.parse_args()
    binary, stream_bin = Path(a.build) / "unillm", Path(a.build) / "bench/stream_bench"
    s = make_models.SHAPES[a.shape]
    model_dir, gguf_path = make_models.make(a.shape, a.dtype, a.models, tied=not a.untied)
    print_env(binary, a.threads)
    if not a.skip_check:
        make_models.check_shape(a.shape, a.dtype, a.models, not a.untied, binary, a.threads,
                                (model_dir, gguf_path))

    prompt = [1] + [int(x) for x in np.random.default_rng(7).integers(3, s["vocab"], a.prompt - 1)]
    extra = (QUANT[a.quant]["flags"] if a.quant else []) + ["--kv-cache-dtype", a.kv]
    if a.quant:
        gguf_path = llama_quantize(gguf_path, a.quant, a.threads)
    llm = make_models.llama_cpp_open(gguf_path, a.threads, n_ctx=a.prompt + a.decode + 16, kv=a.kv)
    u, g = interleaved_medians(lambda: unillm_run(binary, model_dir, prompt, a.decode, a.threads, extra),
                               lambda: llama_cpp_run(llm, prompt, a.decode), a.runs)
    bw = stream(stream_bin, a.threads)
    print(f"load after: {sh(['uptime']).split('load average:')[-1].strip()}")

    wb = weight_bytes_per_token(s, a.dtype)
    kv = kv_bytes_per_token(s, a.prompt + a.decode // 2, 2 if a.kv == "f16" else 4)
    kvtag = f"{a.kv} KV at ctx {a.prompt + a.decode // 2}"
    tag = f"{a.shape} {a.dtype}{' untied' if a.untied else ''}, {a.kv} KV, {a.threads} threads, median of {a.runs}"
    if a.quant:
        q = QUANT[a.quant]
        ub = quant_bytes_per_token(s, q["unillm"], q["unillm_head"])
        lb = quant_bytes_per_token(s, q["llama"], q["llama_head"])
        print(f"\n{tag}; unillm {' '.join(q['flags'][1:])} vs llama.cpp {q['gguf']}")
        print(f"{'':22}{'unillm':>10}{'llama.cpp':>11}{'ratio':>8}")
        print(f"{'prefill-' + str(a.prompt) + ' tok/s':22}{u[0]:10.1f}{g[0]:11.1f}{u[0] / g[0]:8.2f}")
        print(f"{'decode-' + str(a.decode) + ' tok/s':22}{u[1]:10.1f}{g[1]:11.1f}{u[1] / g[1]:8.2f}")
        print(f"{'weights MB per token':22}{ub / 1e6:10.1f}{lb / 1e6:11.1f}")
        print(f"{'decode GB/s (weights)':22}{u[1] * ub / 1e9:10.2f}{g[1] * lb / 1e9:11.2f}")
        print(f"{'  + ' + kvtag:22}{u[1] * (ub + kv) / 1e9:10.2f}{g[1] * (lb + kv) / 1e9:11.2f}")
        print("STREAM (same run): " + ", ".join(f"{k} {v:.1f}" for k, v in bw.items()) + " GB/s")
        return
    print(f"\n{tag}")
    print(f"{'':22}{'unillm':>10}{'llama.cpp':>11}{'ratio':>8}")
    print(f"{'prefill-' + str(a.prompt) + ' tok/s':22}{u[0]:10.1f}{g[0]:11.1f}{u[0] / g[0]:8.2f}")
    print(f"{'decode-' + str(a.decode) + ' tok/s':22}{u[1]:10.1f}{g[1]:11.1f}{u[1] / g[1]:8.2f}")
    print(f"{'decode GB/s (weights)':22}{u[1] * wb / 1e9:10.2f}{g[1] * wb / 1e9:11.2f}")
    print(f"{'  + ' + kvtag:22}{u[1] * (wb + kv) / 1e9:10.2f}"
          f"{g[1] * (wb + kv) / 1e9:11.2f}")
    print(f"weights read per token {wb / 1e6:.1f} MB (+ {kv / 1e6:.1f} MB {a.kv} KV at mid decode)")
    print("STREAM (same run): " + ", ".join(f"{k} {v:.1f}" for k, v in bw.items()) + " GB/s")


if __name__ == "__main__":
    main()
