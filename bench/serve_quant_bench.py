#!/usr/bin/env python3
"""Serving throughput of one unillm engine with dense and quantised weights (issue 16: "the
engine's 32-stream serving throughput with int8 weights vs f32").

Starts `unillm serve` once per configuration on the same model (f32 weights; int8 weights;
int8 weights with a bf16 KV cache, by default), runs the same streamed greedy completions at
each concurrency level against each (serve_bench.py's client), and prints output tokens/s with
the ratio to the f32 server. Needs only a model dir (bench/make_models.py writes the random
stories110M shape); no peer.

  bench/serve_quant_bench.py [--model bench/models/stories110M-f32] [--levels 1,32]
"""
import argparse
import random
import signal
import statistics
import subprocess
from pathlib import Path

import serve_bench as sb

HERE = Path(__file__).resolve().parent

CONFIGS = {
    "f32": [],
    "int8": ["--quant_type", "weight_only_int8"],
    "int8+bf16kv": ["--quant_type", "weight_only_int8", "--kv-cache-dtype", "bf16"],
    "int4": ["--quant_type", "weight_only_int4"],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--unillm", default=str(HERE.parent / "build" / "unillm"))
    ap.add_argument("--model", default=str(HERE / "models" / "stories110M-f32"))
    ap.add_argument("--configs", default="f32,int8,int8+bf16kv")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--levels", default="1,32")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--per-client", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(0)
    words = "once upon a time there was a little girl who loved to play in the park with her dog".split()
    prompts = [" ".join(rng.choice(words) for _ in range(a.prompt_len)) for _ in range(64)]
    levels = [int(n) for n in a.levels.split(",")]
    table = {}
    for name in a.configs.split(","):
        port = sb.free_port()
        log = open(f"/tmp/serve_quant_bench_{name}.log", "w")
        proc = subprocess.Popen([a.unillm, "serve", "--model", a.model, "--port", str(port), "--threads",
                                 str(a.threads), "--max-num-seqs", "32", *CONFIGS[name]],
                                stderr=log, stdout=subprocess.DEVNULL)
        try:
            sb.wait_health(port, proc, f"unillm serve ({name})", timeout=600)
            for n in levels:
                runs = [sb.run_level(port, prompts, n, a.per_client, a.max_tokens) for _ in range(a.rounds)]
                table[(name, n)] = statistics.median(r["tok_s"] for r in runs)
                print(f"{name:12s} {n:3d} streams: {table[(name, n)]:7.1f} out tok/s", flush=True)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"\n{Path(a.model).name}, {a.threads} threads, {a.prompt_len}-token prompts, {a.max_tokens} tokens each")
    print("config        " + "".join(f"{n:>10d}-stream" for n in levels) + "   ratio to f32")
    for name in a.configs.split(","):
        row = "".join(f"{table[(name, n)]:17.1f}" for n in levels)
        ratios = " ".join(f"{table[(name, n)] / table[('f32', n)]:.2f}" for n in levels if ("f32", n) in table)
        print(f"{name:12s}{row}   {ratios}")


if __name__ == "__main__":
    main()
