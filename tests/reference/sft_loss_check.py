"""unillm's SFT loss variants (ops/weighted_cross_entropy.h: use_dft_loss, use_eaft_loss;
ops/asft_cross_entropy.h: use_asft_loss) against LLaMA-Factory's definitions
(src/llamafactory/train/trainer_utils.py at ff6d4d1: dft_loss_func / _dft_cross_entropy,
eaft_loss_func / _eaft_cross_entropy, asft_loss_func / _asft_cross_entropy / _kl_divergence),
re-implemented here in torch from that published code: full logits, the labels shifted by one,
per-token cross-entropy, weights under no_grad (DFT: exp(-CE); EAFT: (entropy of the softmax over
the top-20 logits / 3) ** alpha), the weighted sum divided by num_items_in_batch (the scored
tokens, as HF's Trainer passes it); ASFT: DFT's mean over scored tokens (no num_items_in_batch)
+ alpha * the mean of KL(softmax(ref) || softmax(policy)) summed over the vocabulary, with the
reference's logits from its own hidden states and lm_head. torch autograd gives the gradients of
the policy's hidden states and lm_head.

    sft_loss_check.py --dump build/tests/reference/sft_loss_dump [--work DIR]

Loss and gradients must agree within 1e-5 relative in f32 (1e-10 in f64; LLaMA-Factory casts the
logits to f32, which the f64 cases skip so both sides keep f64).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

FAILURES = []
IGNORE = -100


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def weighted_ce(logits, labels, kind, alpha, num_items):
    """LLaMA-Factory's dft/eaft loss on logits [B, T, V] and unshifted labels [B, T]."""
    vocab = logits.size(-1)
    target = F.pad(labels, (0, 1), value=IGNORE)[..., 1:].reshape(-1)
    flat = logits.reshape(-1, vocab)
    per_token = F.cross_entropy(flat, target, ignore_index=IGNORE, reduction="none")
    valid = target != IGNORE
    ce = per_token[valid]
    with torch.no_grad():
        if kind == "dft":
            weight = torch.exp(-ce)
        else:
            top, _ = torch.topk(flat[valid].detach(), k=20, dim=-1)
            logp = top - torch.logsumexp(top, dim=-1, keepdim=True)
            entropy = -(logp.exp() * logp).sum(dim=-1)
            weight = torch.pow(entropy / 3.0, alpha)
    return (ce * weight).sum() / num_items, weight, valid


def asft(logits, ref_logits, labels, alpha):
    """LLaMA-Factory's asft_loss_func on logits / ref_logits [B, T, V] and unshifted labels."""
    vocab = logits.size(-1)
    flat = logits[..., :-1, :].reshape(-1, vocab)
    ref = ref_logits[..., :-1, :].reshape(-1, vocab)
    target = labels[..., 1:].reshape(-1)
    ce = F.cross_entropy(flat, target, ignore_index=IGNORE, reduction="none")[target != IGNORE]
    with torch.no_grad():
        weight = torch.exp(-ce)
    dft = (ce * weight).mean()
    kl = F.kl_div(F.log_softmax(flat, dim=-1), F.softmax(ref, dim=-1), reduction="none").sum(dim=-1)
    mask = (target != IGNORE).to(kl.dtype)
    return dft + alpha * (kl * mask).sum() / mask.sum()


def rel_err(got, want):
    scale = want.abs().max().item()
    return (got - want).abs().max().item() / max(scale, 1e-30)


def check_case(tool, work, name, kind, dtype, alpha, b, t, c, v, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(b * t, c, generator=g, dtype=torch.float64) * 0.8).to(dtype)
    w = (torch.randn(v, c, generator=g, dtype=torch.float64) * 0.8).to(dtype)
    labels = torch.randint(0, v, (b, t), generator=g, dtype=torch.int32)
    # Every other position's label is the model's own top token (whose label sits one position
    # later), so DFT's weights p(label) span (0, 1) instead of all being ~1/V.
    top = (x.double() @ w.double().t()).argmax(-1).view(b, t).to(torch.int32)
    labels[:, 1::2] = top[:, 0:-1:2][:, : labels[:, 1::2].size(1)]
    labels[:, :3] = IGNORE  # a prompt
    labels[1, 5:] = IGNORE  # padding
    src, dst = os.path.join(work, f"{name}.in.safetensors"), os.path.join(work, f"{name}.out.safetensors")
    inputs = {"x": x, "w": w, "labels": labels, "alpha": torch.tensor([alpha], dtype=torch.float64)}
    if kind == "asft":  # a reference near the policy, as a frozen initial model is early on
        inputs["x_ref"] = x + (torch.randn(b * t, c, generator=g, dtype=torch.float64) * 0.3).to(dtype)
        inputs["w_ref"] = w + (torch.randn(v, c, generator=g, dtype=torch.float64) * 0.3).to(dtype)
    safetensors_py.save_file(inputs, src)
    subprocess.run([tool, kind, src, dst], check=True)
    out, _ = safetensors_py.load_file(dst)

    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    logits = (xr @ wr.t()).view(b, t, v)
    target = F.pad(labels.long(), (0, 1), value=IGNORE)[..., 1:]
    num_items = int((target != IGNORE).sum())
    errs = {}
    if kind == "asft":
        ref_logits = (inputs["x_ref"] @ inputs["w_ref"].t()).view(b, t, v)
        loss = asft(logits, ref_logits, labels.long(), alpha)
    else:
        loss, weight, valid = weighted_ce(logits, labels.long(), kind, alpha, num_items)
        full_weight = torch.zeros(b * t, dtype=torch.float64)
        full_weight[valid] = weight.double()
        errs["weight"] = rel_err(out["weight"], full_weight)
    loss.backward()
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    errs["loss"] = abs(out["loss"].item() - loss.item()) / abs(loss.item())
    errs["dx"] = rel_err(out["dx"].double(), xr.grad.double())
    errs["dw"] = rel_err(out["dw"].double(), wr.grad.double())
    for what, e in errs.items():
        expect(e <= tol, f"{name}: {what} max rel diff {e:.2e} (tol {tol:g}; loss {loss.item():.6f})")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dump", required=True)
    p.add_argument("--work")
    args = p.parse_args()
    work = args.work or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(2)
    cases = [
        ("dft_f64", "dft", torch.float64, 1.0, 3, 9, 16, 200, 1),
        ("eaft_f64", "eaft", torch.float64, 1.0, 3, 9, 16, 200, 2),
        ("dft_f32", "dft", torch.float32, 1.0, 4, 17, 32, 1000, 3),
        ("eaft_f32", "eaft", torch.float32, 1.0, 4, 17, 32, 1000, 4),
        ("eaft_f32_alpha0.5", "eaft", torch.float32, 0.5, 2, 13, 24, 500, 5),
        ("asft_f64", "asft", torch.float64, 0.1, 3, 9, 16, 200, 6),
        ("asft_f32", "asft", torch.float32, 0.05, 4, 17, 32, 1000, 7),
    ]
    for case in cases:
        check_case(args.dump, work, *case)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("all SFT loss checks passed")


if __name__ == "__main__":
    main()
