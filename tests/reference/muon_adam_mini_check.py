"""unillm's Muon and Adam-mini (train/muon.h, train/adam_mini.h) against torch re-implementations
over five steps.

    muon_adam_mini_check.py --dump build/tests/reference/muon_adam_mini_dump [--work DIR]

A Llama-shaped layer (hidden 32, 4 heads, 2 kv heads; q/k biases as Qwen2; embedding, lm_head,
norms) with random weights and gradients goes through muon_adam_mini_dump (the C++ side) and
through:
  muon       LLaMA-Factory's third_party Muon (Moonlight's: momentum 0.95, Nesterov, 5 quintic
             Newton-Schulz steps in bf16, lr x 0.2 sqrt(max(A, B)), weight decay lr*wd on every
             tensor, its AdamW for embed/lm_head/1-D) as _create_muon_optimizer builds it. The
             iteration rounds every op to bf16 with f32 scalars and f32-accumulated products,
             as torch 2 computes bf16 on a GPU. The venv's torch 1.13 CPU rounds the scalars
             (3.4445, ...) to bf16 first and accumulates some small bf16 products in bf16, so the
             literal code's result there is printed for information only (about 2e-4 away).
  adam_mini  adam-mini 1.1.1's Adam_mini as _create_adam_mini_optimizer builds it (dim, n_heads,
             n_kv_heads from the model). The package imports torch.distributed._tensor, which
             torch 1.13 lacks, so its published step is re-implemented here branch for branch
             (checked once against the package with that import stubbed: equal weights).
Weights must agree within 1e-5 (absolute; Muon: within 5e-5 and 1e-6 on average, as single bf16
roundings in its Newton-Schulz iteration flip with the order of f32 sums, see check_muon); each
optimiser state within 1e-6 of its largest value. The reference's products of bf16 values are
computed in f64 and rounded to f32 once, so the check does not depend on OpenBLAS's kernel.
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

STEPS = 5
DIM, HEADS, KV_HEADS = 32, 4, 2
WD, BETA1, BETA2, EPS = 0.1, 0.9, 0.95, 1e-8
_L = "model.layers.0."
SHAPES = {
    "model.embed_tokens.weight": (40, DIM),
    _L + "input_layernorm.weight": (DIM,),
    _L + "self_attn.q_proj.weight": (DIM, DIM),
    _L + "self_attn.q_proj.bias": (DIM,),
    _L + "self_attn.k_proj.weight": (16, DIM),
    _L + "self_attn.k_proj.bias": (16,),
    _L + "self_attn.v_proj.weight": (16, DIM),
    _L + "self_attn.o_proj.weight": (DIM, DIM),
    _L + "post_attention_layernorm.weight": (DIM,),
    _L + "mlp.gate_proj.weight": (64, DIM),
    _L + "mlp.up_proj.weight": (64, DIM),
    _L + "mlp.down_proj.weight": (DIM, 64),
    "model.norm.weight": (DIM,),
    "lm_head.weight": (40, DIM),
}
FAILURES = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def make_inputs():
    g = torch.Generator().manual_seed(11)
    params = {n: torch.randn(*s, generator=g) * 0.5 for n, s in SHAPES.items()}
    grads = [{n: torch.randn(*s, generator=g) * 0.1 for n, s in SHAPES.items()} for _ in range(STEPS)]
    lrs = torch.tensor([2e-3 * (1 - 0.1 * s) for s in range(STEPS)], dtype=torch.float32)
    return params, grads, lrs


def rel(got, ref):
    """Largest difference relative to the largest reference value (moments cross zero)."""
    return ((got - ref).abs().max() / ref.abs().max()).item()


def run_unillm(tool, kind, params, grads, lrs, work):
    t = {"param." + n: p for n, p in params.items()}
    for s, gs in enumerate(grads):
        t.update({f"grad.{s}.{n}": gg for n, gg in gs.items()})
    t["lr"] = lrs
    t["hparams"] = torch.tensor([WD, BETA1, BETA2, EPS, DIM, HEADS, KV_HEADS], dtype=torch.float32)
    src, dst = os.path.join(work, f"{kind}.in.safetensors"), os.path.join(work, f"{kind}.out.safetensors")
    safetensors_py.save_file(t, src)
    subprocess.run([tool, kind, src, dst], check=True)
    out, _ = safetensors_py.load_file(dst)
    return out


# ---- Muon (LLaMA-Factory's third_party/muon, re-stated)

def bf(x):
    return x.bfloat16().float()


def mm(x, y):
    """A product of bf16-valued matrices as f32 accumulation approximates it: computed in f64 (exact
    here) and rounded to f32 once. torch's f32 matmul goes through OpenBLAS, whose kernel (chosen by
    OPENBLAS_CORETYPE: FMA or not, the order of its sums) moves some products across a bf16
    rounding boundary, which the five iterations then amplify to ~2e-5."""
    return (x.double() @ y.double()).float()


def ns5_bf16(g, steps=5):
    """zeropower_via_newtonschulz5 with torch 2's bf16 semantics: f32 scalars, each op rounded."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    x = bf(g)
    if g.size(0) > g.size(1):
        x = x.T
    x = bf(x / bf(bf(x.norm()) + 1e-7))
    for _ in range(steps):
        A = bf(mm(x, x.T))
        B = bf(bf(b * A) + bf(mm(bf(c * A), A)))
        x = bf(bf(a * x) + bf(mm(B, x)))
    if g.size(0) > g.size(1):
        x = x.T
    return x


def ns5_torch_bf16(g, steps=5):
    """The literal bf16 code under this venv's torch (1.13 CPU rounds the scalars to bf16)."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    x = g.bfloat16()
    if g.size(0) > g.size(1):
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        A = x @ x.T
        B = b * A + c * A @ A
        x = a * x + B @ x
    if g.size(0) > g.size(1):
        x = x.T
    return x


def muon_reference(params, grads, lrs, ns5):
    ps = {n: p.clone() for n, p in params.items()}
    state = {n: {} for n in ps}
    use_muon = {n: p.ndim == 2 and "embed" not in n and "lm_head" not in n for n, p in ps.items()}
    for s in range(STEPS):
        lr = float(lrs[s])
        for n, p in ps.items():
            g, st = grads[s][n], state[n]
            if use_muon[n]:
                buf = st.setdefault("momentum_buffer", torch.zeros_like(g))
                buf.mul_(0.95).add_(g)
                u = ns5(g.add(buf, alpha=0.95)).float()
                adjusted = lr * 0.2 * math.sqrt(max(p.shape[0], p.shape[1]))
                p.mul_(1 - lr * WD)
                p.add_(u, alpha=-adjusted)
            else:
                if "step" not in st:
                    st.update(step=0, moment1=torch.zeros_like(g), moment2=torch.zeros_like(g))
                st["step"] += 1
                st["moment1"].lerp_(g, 1 - BETA1)
                st["moment2"].lerp_(g.square(), 1 - BETA2)
                u = st["moment1"] / (EPS + st["moment2"].sqrt())
                scale = (1 - BETA1 ** st["step"]) / (1 - BETA2 ** st["step"]) ** 0.5
                p.mul_(1 - lr * WD)
                p.add_(u, alpha=-lr / scale)
    return ps, state, use_muon


def check_muon(tool, params, grads, lrs, work):
    out = run_unillm(tool, "muon", params, grads, lrs, work)
    ps, state, use_muon = muon_reference(params, grads, lrs, ns5_bf16)
    diffs = torch.cat([(out["param." + n].view(p.shape) - p).abs().reshape(-1) for n, p in ps.items()])
    worst = diffs.max().item()
    # A bf16 rounding inside the Newton-Schulz iteration that lands the other way (f32 sums in
    # another order: another kernel) spreads through the next products and moves weights by up to
    # lr·0.2·sqrt(max(A, B))·2^-8·|u|, about 2e-5 here (torch's own f32 matmul under different
    # OPENBLAS_CORETYPE kernels moved this reference by 2.5e-5); a wrong update moves weights by
    # 1e-4 and more (torch 1.13's literal bf16 path: 2e-4). So: within 5e-5, and 1e-6 on average.
    mean = diffs.mean().item()
    expect(worst <= 5e-5 and mean <= 1e-6,
           f"muon: weights after {STEPS} steps within 5e-5 (max abs diff {worst:.2e}, mean {mean:.1e})")
    names = sorted(ps)  # the arena's order
    for key, pick in (("momentum_buffer", True), ("moment1", False), ("moment2", False)):
        ref = torch.cat([state[n][key].reshape(-1) for n in names if use_muon[n] == pick])
        got = out[key]
        err = rel(got, ref)
        expect(err <= 1e-6, f"muon {key}: {ref.numel()} values (max rel diff {err:.2e})")
    lit, _, _ = muon_reference(params, grads, lrs, ns5_torch_bf16)
    lit_worst = max((out["param." + n].view(p.shape) - p).abs().max().item() for n, p in lit.items())
    print(f"info muon: vs torch 1.13's literal bf16 path (scalars rounded to bf16) max abs diff {lit_worst:.2e}")


# ---- Adam-mini (adam-mini 1.1.1's Adam_mini.step, re-stated branch for branch)

EMBD = ("embed", "embd", "wte")
OUTPUT = ("lm_head", "output", "final_layer")
WQK = ("k_proj", "q_proj", "wq", "wk", "query", "key")
WV = ("v_proj", "wv", "value")
ATTN_PROJ = ("o_proj", "wo", "attn.proj")
MLP = ("feed_forward", "linear", "mlp")


def has(name, keys):
    return any(k in name for k in keys)


def adam_mini_reference(params, grads, lrs):
    ps = {n: p.clone() for n, p in params.items()}
    state = {n: {} for n in ps}
    head_numel = DIM * DIM // HEADS
    for s in range(STEPS):
        lr = float(lrs[s])
        for n, p in ps.items():
            name, grad, st = n.lower(), grads[s][n], state[n]
            wd = 0.0 if ("norm" in name or "ln" in name or "bias" in name) else WD
            if "bias" in name:
                if not st:
                    st.update(m=torch.zeros_like(p), step=0, v=torch.zeros_like(p))
                st["v"].mul_(BETA2).addcmul_(grad, grad, value=1 - BETA2)
                st["step"] += 1
                if wd > 0.0:
                    p.mul_(1 - lr * wd)
                st["m"].lerp_(grad, 1 - BETA1)
                bc1, bc2 = 1 - BETA1 ** st["step"], 1 - BETA2 ** st["step"]
                h = (st["v"].sqrt() / math.sqrt(bc2)).add_(EPS)
                p.addcdiv_(st["m"], h, value=-lr / bc1)
                continue
            if has(name, WQK):
                rows_of = (lambda t: t.view(-1, head_numel))
            elif has(name, EMBD + OUTPUT + WV + MLP + ATTN_PROJ):
                rows_of = (lambda t: t)
            else:
                rows_of = (lambda t: t.reshape(1, -1))  # one block: sum(g*g)/numel
            if not st:
                st["m"] = rows_of(torch.zeros_like(p)).clone()
                st["step"] = 0
                st["vmean"] = torch.zeros(st["m"].size(0), 1)
            g = rows_of(grad)
            tmp = torch.mean(g * g, dim=1, keepdim=True)
            st["vmean"].mul_(BETA2).add_(tmp, alpha=1 - BETA2)
            st["step"] += 1
            if wd > 0.0:
                p.mul_(1 - lr * wd)
            st["m"].lerp_(g, 1 - BETA1)
            bc1, bc2 = 1 - BETA1 ** st["step"], 1 - BETA2 ** st["step"]
            h = (st["vmean"].sqrt() / math.sqrt(bc2)).add_(EPS)
            update = (st["m"] * ((1 / bc1) / h)).view(p.size())
            update.mul_(lr)
            p.add_(-update)
    return ps, state


def check_adam_mini(tool, params, grads, lrs, work):
    out = run_unillm(tool, "adam_mini", params, grads, lrs, work)
    ps, state = adam_mini_reference(params, grads, lrs)
    worst = max((out["param." + n].view(p.shape) - p).abs().max().item() for n, p in ps.items())
    expect(worst <= 1e-5, f"adam_mini: weights after {STEPS} steps within 1e-5 (max abs diff {worst:.2e})")
    names = sorted(ps)
    m = torch.cat([state[n]["m"].reshape(-1) for n in names])
    v = torch.cat([state[n]["v" if "bias" in n else "vmean"].reshape(-1) for n in names])
    for key, ref in (("m", m), ("vmean", v)):
        got = out[key]
        ok = got.shape == ref.shape
        err = rel(got, ref) if ok else float("inf")
        expect(ok and err <= 1e-6, f"adam_mini {key}: {ref.numel()} values (max rel diff {err:.2e})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="muon_adam_mini_check_")
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    params, grads, lrs = make_inputs()
    check_muon(args.dump, params, grads, lrs, work)
    check_adam_mini(args.dump, params, grads, lrs, work)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("all Muon / Adam-mini checks passed")


if __name__ == "__main__":
    main()
