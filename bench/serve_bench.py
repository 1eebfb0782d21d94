#!/usr/bin/env python3
"""`unillm serve` against llama.cpp's own `llama-server` on the same random-weight stories110M
weights (f32, 2 threads): output tokens/s and p50/p99 time to first token at 1, 8 and 32
concurrent streams (and a longer-prompt level), in one run, alternating the two servers.

  bench/.venv/bin/python bench/serve_bench.py --llama-server PATH [--unillm build/unillm]

Both get the same requests through their OpenAI-style /v1/completions: a prompt of --prompt-len
random token ids (BOS first), --max-tokens greedy tokens with end-of-sequence ignored, streamed
(server-sent events) so that the first token's arrival is seen. At level N, N client threads each
send --per-client requests back to back; output tok/s = generated tokens of the level / its wall
time. llama-server runs with -np 32 -cb (32 slots, continuous batching) -t 2 and a context of
32 full sequences and an f32 KV cache like unillm's (--kv-type f16 gives llama-server's
default); unillm serve with --max-num-seqs 32 and its defaults otherwise.
bench/setup.sh builds llama-server from the llama.cpp sources vendored in llama-cpp-python.
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_health(port, proc, name, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"serve_bench: {name} exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    sys.exit(f"serve_bench: {name} did not become healthy in {timeout} s")


def one_request(port, prompt, max_tokens):
    """Streams one completion; returns (ttft seconds, generated token count, total seconds)."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:300]!r}")
    ttft, tokens, usage, buf = None, 0, None, b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: "):
                continue
            data = ev[6:]
            if data == b"[DONE]":
                continue
            j = json.loads(data)
            if j.get("usage"):
                usage = j["usage"].get("completion_tokens")
            for ch in j.get("choices", []):
                if ch.get("text"):
                    tokens += 1
                    if ttft is None:
                        ttft = time.perf_counter() - t0
    total = time.perf_counter() - t0
    # Chunks with text undercount tokens whose text is held back (partial UTF-8); the usage
    # figure, when the server sends one, is exact (end of sequence is ignored: max_tokens).
    return ttft if ttft is not None else total, usage if usage else max(tokens, max_tokens), total


def run_level(port, prompts, streams, per_client, max_tokens):
    results, errors = [], []
    lock = threading.Lock()

    def client(i):
        for k in range(per_client):
            p = prompts[(i * per_client + k) % len(prompts)]
            try:
                r = one_request(port, p, max_tokens)
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        sys.exit(f"serve_bench: {len(errors)} requests failed, first: {errors[0]}")
    ttfts = sorted(r[0] for r in results)
    gen = sum(r[1] for r in results)
    p = lambda q: ttfts[min(len(ttfts) - 1, int(q * len(ttfts)))]
    return {"tok_s": gen / wall, "p50_ttft": statistics.median(ttfts), "p99_ttft": p(0.99),
            "tokens": gen, "requests": len(results)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unillm", default=str(HERE.parent / "build" / "unillm"))
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--model", default=str(HERE / "models" / "stories110M-f32"))
    ap.add_argument("--gguf", default=str(HERE / "models" / "stories110M-f32.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--levels", default="1,8,32")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--long-prompt-len", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--per-client", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--unillm-args", default="", help="extra flags for unillm serve")
    ap.add_argument("--kv-type", default="f32", help="llama-server's KV cache type (its default is "
                    "f16; unillm's cache is f32 until the export issue's --kv-cache-dtype)")
    a = ap.parse_args()

    rng = random.Random(0)
    def prompts(n):
        return [[1] + [rng.randrange(100, 31000) for _ in range(n - 1)] for _ in range(64)]
    short = prompts(a.prompt_len)  # warm-up only
    ctx_per_seq = a.long_prompt_len + a.max_tokens + 16
    pu, pl = free_port(), free_port()
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    uni = subprocess.Popen([a.unillm, "serve", "--model", a.model, "--port", str(pu), "--threads",
                            str(a.threads), "--max-num-seqs", "32", *a.unillm_args.split()],
                           stderr=open("/tmp/serve_bench_unillm.log", "w"), stdout=subprocess.DEVNULL,
                           env=env)
    lla = subprocess.Popen([a.llama_server, "-m", a.gguf, "--port", str(pl), "-np", "32", "-cb",
                            "-t", str(a.threads), "-c", str(32 * ctx_per_seq), "--no-warmup",
                            "-b", "512", "-ub", "512", "-ctk", a.kv_type, "-ctv", a.kv_type],
                           stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        wait_health(pu, uni, "unillm serve")
        wait_health(pl, lla, "llama-server")
        print(f"date      {time.strftime('%Y-%m-%d %H:%M')}; threads {a.threads}; prompts "
              f"{a.prompt_len} (long {a.long_prompt_len}) tokens, {a.max_tokens} greedy output tokens")
        # Warm-up: one request each.
        run_level(pu, short, 1, 1, 8)
        run_level(pl, short, 1, 1, 8)
        # Fresh prompts for every level (and round): no prefix or prompt cache on either side
        # may serve a level from an earlier one.
        levels = [(int(n), a.prompt_len, f"{n} streams, {a.prompt_len}-token prompts") for n in a.levels.split(",")]
        levels.append((8, a.long_prompt_len, f"8 streams, {a.long_prompt_len}-token prompts"))
        rows = []
        for n, plen, label in levels:
            res = {"unillm": [], "llama.cpp": []}
            for _ in range(a.rounds):
                ps = prompts(plen)  # the same new prompts for both servers
                res["unillm"].append(run_level(pu, ps, n, a.per_client, a.max_tokens))
                res["llama.cpp"].append(run_level(pl, ps, n, a.per_client, a.max_tokens))
            med = {k: {m: statistics.median(r[m] for r in v) for m in ("tok_s", "p50_ttft", "p99_ttft")}
                   for k, v in res.items()}
            rows.append((label, med))
            u, l = med["unillm"], med["llama.cpp"]
            print(f"{label:34s} out tok/s unillm {u['tok_s']:7.1f}  llama.cpp {l['tok_s']:7.1f}  "
                  f"ratio {u['tok_s'] / l['tok_s']:.2f}x | p50 TTFT {u['p50_ttft']:.3f} vs "
                  f"{l['p50_ttft']:.3f} s | p99 TTFT {u['p99_ttft']:.3f} vs {l['p99_ttft']:.3f} s",
                  flush=True)
    finally:
        for p in (uni, lla):
            p.send_signal(signal.SIGTERM)
        for p in (uni, lla):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
