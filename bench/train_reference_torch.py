#!/usr/bin/env python3
"""The PyTorch peer of `unillm train` for bench/train_bench.py: a plain Llama (HF layout and
math: embedding, RMSNorm, rotate-half RoPE, causal attention by matmul + softmax, SwiGLU MLP,
untied lm_head, shifted cross-entropy) trained with torch.optim.AdamW, f32, on the same
safetensors weights and the same token blocks.

  /usr/bin/python3 bench/train_reference_torch.py --model DIR --ids ids.npy --batch 8 \
      --steps 8 [--threads 2] [--grad-ckpt]
  /usr/bin/python3 bench/train_reference_torch.py --model DIR --ids ids.npy --batch 8 \
      --steps 8 --lora-rank 8 [--lora-alpha 16] [--grad-ckpt]
  /usr/bin/python3 bench/train_reference_torch.py --model DIR --batch 8 --gemm-bound 256 [--lora-rank 8]

--ids is an int64 .npy of shape [rows, seq] (the packed blocks, in order); step k trains on rows
[k*batch, (k+1)*batch), wrapping around. A step is what the HF Trainer does per optimizer step:
forward, loss, backward, clip_grad_norm_(1.0), AdamW step, scheduler step, zero_grad. Labels are
the inputs shifted inside the model, with EOS labels ignored (LLaMA-Factory's pt collator: the pad
id is the EOS when the tokenizer has none). --grad-ckpt recomputes each decoder layer in backward
(torch.utils.checkpoint), as LLaMA-Factory's default gradient_checkpointing does.

--lora-rank R: LoRA instead of full fine-tuning, written here in plain torch (peft is not
installed with Debian's torch) with PEFT's semantics for lora_target all, lora_dropout 0: every
decoder linear (q, k, v, o, gate, up, down; not lm_head) becomes base(x) + s * B(A(x)),
s = alpha / r (alpha default 2 r, as LLaMA-Factory), A [r, in] kaiming_uniform_(a=sqrt(5)) (as
nn.Linear's init, PEFT's default), B [out, r] zeros; every other parameter (the base weights,
embeddings, norms, lm_head) has requires_grad False, and AdamW and clip_grad_norm_ see only the
LoRA parameters. A frozen base weight costs no dW GEMM; dX still flows through it.

Prints one JSON line per step ({"step", "seconds", "tokens_per_s", "loss"}) and a last JSON line
{"summary": ...} with the BLAS check (the library mapped after a matmul and a 1024^3 sgemm
timing), the median tokens/s of the steps after --warmup, and the peak RSS
(getrusage ru_maxrss, the whole process including torch itself). Refuses to run unless torch's
GEMM is OpenBLAS (--any-blas overrides, for debugging only).
"""
import argparse
import json
import math
import os
import resource
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


# ---------------------------------------------------------------------------- safetensors reader
def read_safetensors(path):
    """8-byte little-endian header length, JSON header, raw little-endian data (F32/BF16/F16)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            a, b = meta["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            dt = meta["dtype"]
            if dt == "F32":
                arr = np.frombuffer(raw, dtype="<f4")
            elif dt == "F16":
                arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
            elif dt == "BF16":
                arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                raise SystemExit(f"train_reference_torch: unsupported dtype {dt} for {name}")
            out[name] = torch.from_numpy(arr.reshape(meta["shape"]).copy())
        return out


# ------------------------------------------------------------------------------------- the model
class LoraLinear(nn.Module):
    """PEFT's lora.Linear for one adapter without dropout: base(x) + scaling * B(A(x))."""

    def __init__(self, base, rank, alpha):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, rank, bias=False)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / rank

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(x)) * self.scaling


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def add_lora(model, rank, alpha):
    """Freezes everything, then wraps every decoder projection (lora_target all) in LoraLinear.
    Returns the trainable (LoRA) parameters."""
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name in LORA_TARGETS:
                if hasattr(parent, name):
                    setattr(parent, name, LoraLinear(getattr(parent, name), rank, alpha))
    return [p for p in model.parameters() if p.requires_grad]


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, H, KV = c["hidden_size"], c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
        self.H, self.KV, self.hd = H, KV, C // H
        self.q_proj = nn.Linear(C, H * self.hd, bias=False)
        self.k_proj = nn.Linear(C, KV * self.hd, bias=False)
        self.v_proj = nn.Linear(C, KV * self.hd, bias=False)
        self.o_proj = nn.Linear(H * self.hd, C, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.KV, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.KV != self.H:  # GQA: repeat kv heads, as HF's repeat_kv
            k = k.repeat_interleave(self.H // self.KV, dim=1)
            v = v.repeat_interleave(self.H // self.KV, dim=1)
        s = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd) + mask
        p = torch.softmax(s, dim=-1)
        o = torch.matmul(p, v).transpose(1, 2).reshape(B, T, self.H * self.hd)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, Fh = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(C, Fh, bias=False)
        self.up_proj = nn.Linear(C, Fh, bias=False)
        self.down_proj = nn.Linear(Fh, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-6))
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-6))
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-6))


class Llama(nn.Module):
    def __init__(self, c, grad_ckpt=False):
        super().__init__()
        self.c, self.grad_ckpt = c, grad_ckpt
        self.model = Inner(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        hd = c["hidden_size"] // c["num_attention_heads"]
        theta = c.get("rope_theta", 10000.0)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))

    def forward(self, ids, labels):
        B, T = ids.shape
        t = torch.arange(T, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
        h = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            if self.grad_ckpt:
                h = torch.utils.checkpoint.checkpoint(layer, h, cos, sin, mask, use_reentrant=False)
            else:
                h = layer(h, cos, sin, mask)
        logits = self.lm_head(self.model.norm(h))
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                               ignore_index=-100)


# ----------------------------------------------------------------------------------- BLAS check
def blas_check(threads):
    """Which BLAS torch's sgemm runs on (libraries mapped after a matmul) and its 1024^3 GFLOP/s."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.matmul(a, b)
    libs = sorted({l.split()[-1] for l in open("/proc/self/maps")
                   if "blas" in l.lower() or "mkl" in l.lower()})
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return {"libs": libs, "openblas": any("libopenblas" in l for l in libs),
            "sgemm1024_gflops": 2 * 1024 ** 3 / best / 1e9, "threads": torch.get_num_threads()}


def gemm_bound(cfg, batch, seq, threads, labelled=1.0, reps=5, chunk_bytes=32 << 20, lora_rank=0):
    """Seconds of the GEMMs alone of one training step in unillm's layout (fused q|k|v and gate|up
    projections; lm_head + cross-entropy in row chunks of ~32 MB of logits, dW accumulated with
    beta 1), each timed with OpenBLAS sgemm through torch.mm on the real shapes (best of `reps`
    after a warm-up). Attention (QK^T, PV: ~4-6% of the FLOPs here) is left out. With layer
    recompute the re-run skips o_proj's and down_proj's forward GEMMs, as unillm's does. Returns per-GEMM
    seconds and upper bounds on tokens/s (the step if it were nothing but these GEMMs), with/without
    layer recompute and with/without recomputing the logits in the cross-entropy backward.
    `labelled`: the fraction of positions with a label (unillm's cross-entropy skips the others).
    lora_rank > 0: LoRA on every projection, base weights (and lm_head) frozen: no dW GEMMs; per
    fused projection with P parts, in unillm's ops::lora_linear layout: forward x.[A_p]^T [N, P r]
    and one x_a,p . B_p^T [N, out_p] per part (both again in the layer recompute); backward per
    part dB_p = dy_p^T x_a,p and dx_a,p = dy_p B_p, then dA = dx_a^T x and dx += dx_a [A_p]."""
    C, Fh, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd = C // H
    N = batch * seq

    def timeit(fn):
        fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return min(ts)  # best case: this is an upper bound on tokens/s

    # Outputs are preallocated (out=): a fresh torch.mm result is a new mmap'd block whose page
    # faults would be timed too, which unillm's cached allocator does not pay.
    def mm(a, b):
        out = torch.empty(a.shape[0], b.shape[1])
        return lambda: torch.mm(a, b, out=out)

    def linear(n, m, k):  # Y[n,m] = X[n,k] W[m,k]^T; dX = dY W; dW = dY^T X
        x, w, dy = torch.randn(n, k), torch.randn(m, k) * 0.02, torch.randn(n, m)
        return {"fwd": timeit(mm(x, w.t())), "dx": timeit(mm(dy, w)), "dw": timeit(mm(dy.t(), x))}

    def lora(n, outs, k, r):  # one fused projection's adapter GEMMs, outs = the parts' widths
        P = len(outs)
        x, a, dxa = torch.randn(n, k), torch.randn(P * r, k) * 0.02, torch.randn(n, P * r)
        xa, dy = torch.randn(n, P * r), [torch.randn(n, o) for o in outs]
        b = [torch.randn(o, r) * 0.02 for o in outs]
        fwd_a = timeit(mm(x, a.t()))
        fwd = fwd_a + sum(timeit(mm(xa[:, p * r:(p + 1) * r], b[p].t())) for p in range(P))
        bwd = sum(timeit(mm(dy[p].t(), xa[:, p * r:(p + 1) * r])) + timeit(mm(dy[p], b[p]))
                  for p in range(P))
        bwd += timeit(mm(dxa.t(), x)) + timeit(mm(dxa, a))
        return {"fwd": fwd, "dx": bwd, "dw": 0.0, "fwd_a": fwd_a}

    t = {"qkv": linear(N, (H + 2 * KV) * hd, C), "o": linear(N, C, H * hd),
         "gate_up": linear(N, 2 * Fh, C), "down": linear(N, C, Fh)}
    if lora_rank:
        for name in t:
            t[name]["dw"] = 0.0  # frozen base
        t["lora_qkv"] = lora(N, [H * hd, KV * hd, KV * hd], C, lora_rank)
        t["lora_o"] = lora(N, [C], H * hd, lora_rank)
        t["lora_gate_up"] = lora(N, [Fh, Fh], C, lora_rank)
        t["lora_down"] = lora(N, [C], Fh, lora_rank)
    r = max(1, min(N, chunk_bytes // (V * 4)))
    x, w, dl, dw = torch.randn(r, C), torch.randn(V, C) * 0.02, torch.randn(r, V), torch.zeros(V, C)
    chunks = N * labelled / r
    t["lm_head"] = {"fwd": chunks * timeit(mm(x, w.t())),
                    "dx": chunks * timeit(mm(dl, w)),
                    "dw": 0.0 if lora_rank else chunks * timeit(lambda: dw.addmm_(dl.t(), x))}
    layer = {g: sum(v[g] for k, v in t.items() if k != "lm_head") for g in ("fwd", "dx", "dw")}
    # The layer re-run under recompute skips the forward GEMMs of each segment's last projection
    # (o_proj, down_proj: ops::OutputUse::kGradOnly); their adapters still compute x.A^T (saved
    # for dB), not x_a.B^T.
    rerun = layer["fwd"] - sum(t[k]["fwd"] for k in ("o", "down"))
    if lora_rank:
        rerun -= sum(t[k]["fwd"] - t[k]["fwd_a"] for k in ("lora_o", "lora_down"))
    lm = t["lm_head"]
    bounds = {}
    for ckpt in (True, False):
        for ce_re in (True, False):
            sec = L * (layer["fwd"] + (rerun if ckpt else 0) + layer["dx"] + layer["dw"]) \
                + lm["fwd"] * (2 if ce_re else 1) + lm["dx"] + lm["dw"]
            bounds[f"ckpt_{'on' if ckpt else 'off'}{'_ce_recompute' if ce_re else ''}"] = N / sec
    return {"gemm_seconds": t, "bound_tokens_per_s": bounds, "lm_chunk_rows": r, "labelled": labelled,
            "lora_rank": lora_rank}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF dir: config.json + model.safetensors")
    ap.add_argument("--ids", help="int64 .npy [rows, seq] of packed token blocks")
    ap.add_argument("--gemm-bound", type=int, metavar="SEQ",
                    help="instead of training: time the step's GEMMs alone at this sequence length")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=1, help="steps left out of the median")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--grad-ckpt", action="store_true", help="recompute each layer in backward")
    ap.add_argument("--eos", type=int, default=2)
    ap.add_argument("--lora-rank", type=int, default=0, help="LoRA of this rank instead of full fine-tuning")
    ap.add_argument("--lora-alpha", type=float, default=0.0, help="LoRA alpha (default 2 x rank)")
    ap.add_argument("--any-blas", action="store_true", help="run even if torch's GEMM is not OpenBLAS")
    ap.add_argument("--zero1", action="store_true",
                    help="under torchrun: ZeroRedundancyOptimizer (optimizer state sharded) besides DDP")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    blas = blas_check(a.threads)
    if not blas["openblas"] and not a.any_blas:
        print(json.dumps({"error": "torch's sgemm is not OpenBLAS", "blas": blas}))
        sys.exit(3)
    rss_import_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    cfg = json.load(open(os.path.join(a.model, "config.json")))
    if a.gemm_bound:
        labelled = 1.0
        if a.ids:  # the first batch's share of scored positions (shifted labels, EOS ignored)
            lab = np.load(a.ids)[:a.batch, 1:]
            labelled = float((lab != a.eos).sum()) / (a.batch * a.gemm_bound)
        with torch.no_grad():
            print(json.dumps({"gemm_bound": gemm_bound(cfg, a.batch, a.gemm_bound, a.threads, labelled,
                                                       lora_rank=a.lora_rank),
                              "blas": blas}))
        return
    if not a.ids:
        ap.error("--ids is required for training")
    if cfg.get("tie_word_embeddings", False):
        raise SystemExit("train_reference_torch: give an untied model (tie_word_embeddings false)")
    model = Llama(cfg, grad_ckpt=a.grad_ckpt)
    sd = read_safetensors(os.path.join(a.model, "model.safetensors"))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise SystemExit(f"train_reference_torch: missing {missing} unexpected {unexpected}")
    del sd
    params = list(model.parameters())
    if a.lora_rank:
        params = add_lora(model, a.lora_rank, a.lora_alpha or 2.0 * a.lora_rank)
    model.train()
    # Under torchrun (WORLD_SIZE > 1): DistributedDataParallel over gloo, each process taking its
    # share of every batch (bench/dist_bench.py's peer).
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    ddp = None
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        ddp = torch.nn.parallel.DistributedDataParallel(model)
    forward = ddp if ddp is not None else model

    ids_all = torch.from_numpy(np.load(a.ids).astype(np.int64))
    rows, T = ids_all.shape
    # HF defaults as LLaMA-Factory runs them: AdamW(0.9, 0.999, 1e-8, wd 0), linear schedule,
    # clip_grad_norm_(1.0).
    if ddp is not None and a.zero1:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=a.lr, betas=(0.9, 0.999),
                                      eps=1e-8, weight_decay=0.0)
    else:
        opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: max(0.0, (a.steps - k) / a.steps))

    times = []
    for step in range(a.steps):
        idx = [(step * a.batch + i) % rows for i in range(a.batch)]
        idx = idx[rank::world]  # this process's share of the batch
        ids = ids_all[idx]
        labels = ids.clone()
        labels[labels == a.eos] = -100
        t0 = time.perf_counter()
        loss = forward(ids, labels)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        times.append(dt)
        if rank != 0:
            continue
        print(json.dumps({"step": step + 1, "seconds": round(dt, 4),
                          "tokens_per_s": round(a.batch * T / dt, 1), "loss": round(loss.item(), 5),
                          "grad_norm": round(float(gn), 5)}), flush=True)

    if rank != 0:
        return
    timed = times[a.warmup:] or times
    med = statistics.median(timed)
    summary = {
        "tokens_per_s": a.batch * T / med, "median_step_s": med, "timed_steps": len(timed),
        "tokens_per_step": a.batch * T, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_after_import_mb": rss_import_mb, "grad_ckpt": a.grad_ckpt, "torch": torch.__version__,
        "blas": blas,
        "params": sum(p.numel() for p in model.parameters()),
        "trainable_params": sum(p.numel() for p in params), "lora_rank": a.lora_rank,
    }
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
