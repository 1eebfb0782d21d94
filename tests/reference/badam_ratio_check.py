"""unillm's BAdam ratio mode (train/badam_ratio.h) against the `badam` package's BlockOptimizerRatio.

    badam_ratio_check.py --dump build/tests/reference/badam_ratio_dump [--work DIR]

A toy model with LLaMA-style names (embeddings, three layers of matrices and vectors, the final
norm, lm_head) gets random gradients for eight steps. The reference is what LLaMA-Factory's
_create_badam_optimizer builds: BlockOptimizerRatio over its decay / no-decay groups with
include_embedding=False, lr / betas / eps from HF's AdamW kwargs, built right after
torch.manual_seed(seed) (its per-tensor seeds are torch.randint draws). Each step sets every
trainable gradient, runs the package's gradient hook on each in backward's order (the last layer
first), clips as the package's clip_grad_norm_old_version means to (see clip_sparse) and steps. switch_every is 3, so the run crosses two mask
moves and Adam resets, in both mask modes, and with gradient accumulation (each backward pass
runs the hook; see micro_batches). badam_ratio_dump does the same through unillm's arena
(prepare_grads, clip_grad_norm, step): per-tensor seeds, gradient norms and the final weights must
agree (1e-6 relative). First, check_hook_order confirms on transformers' Llama that the tensor
whose gradient backward finishes first in each shape (the one whose mask the shape shares) is
that shape's last tensor in HF order, as unillm takes it.

The package needs torch >= 2.2; under the venv's torch 1.13 four shims stand in, each restating
what the newer torch does: torch.unravel_index; sparse_mask taking an uncoalesced mask (coalesced
first) and a sparse self (its values at the mask's indices: the tensor under 100 elements that
the hook made sparse); and register_post_accumulate_grad_hook (absent: the check calls the
package's hook itself, as backward would after accumulating each gradient).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

STEPS = 8
EVERY = 3
LAYERS = 3
MAX_NORM = 0.05
SEED = 1234
FAILURES = []


def install_shims():
    def unravel_index(i, shape):
        out = []
        for d in reversed(shape):
            out.append(i % d)
            i = torch.div(i, d, rounding_mode="floor")
        return tuple(reversed(out))

    if not hasattr(torch, "unravel_index"):
        torch.unravel_index = unravel_index
    orig = torch.Tensor.sparse_mask

    def sparse_mask(self, mask):
        return orig(self.to_dense() if self.is_sparse else self, mask.coalesce())

    torch.Tensor.sparse_mask = sparse_mask
    if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
        torch.Tensor.register_post_accumulate_grad_hook = lambda self, hook: None


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def model_shapes():  # HF order; C 16, kv 4, F 24, an extra 150-vector per layer
    out = [("model.embed_tokens.weight", (40, 16))]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out += [(p + "self_attn.q_proj.weight", (16, 16)), (p + "self_attn.k_proj.weight", (4, 16)),
                (p + "self_attn.v_proj.weight", (4, 16)), (p + "self_attn.o_proj.weight", (16, 16)),
                (p + "mlp.gate_proj.weight", (24, 16)), (p + "mlp.up_proj.weight", (24, 16)),
                (p + "mlp.down_proj.weight", (16, 24)), (p + "mlp.scale", (150,)),
                (p + "input_layernorm.weight", (16,)), (p + "post_attention_layernorm.weight", (16,))]
    return out + [("model.norm.weight", (16,)), ("lm_head.weight", (40, 16))]


def decays(n):  # LLaMA-Factory's _get_decay_parameter_names: not biases, not norm layers
    return "bias" not in n and "norm" not in n


def make_inputs():
    g = torch.Generator().manual_seed(5)
    params = {n: torch.randn(*s, generator=g) for n, s in model_shapes()}
    grads = [{n: torch.randn(*s, generator=g) * 0.1 for n, s in model_shapes()} for _ in range(STEPS)]
    lrs = [1e-2 * (1 - 0.05 * s) for s in range(STEPS)]
    return params, grads, lrs


def clip_sparse(params, max_norm):
    """badam's clip_grad_norm_old_version (LLaMA-Factory installs it for BAdam): the norm over the
    sparse gradients' values, then each scaled by min(1, max_norm / (norm + 1e-6)). Under torch
    1.13 its `g.detach().mul_(coef)` replaces the detached copy's values and never reaches the
    gradient; the scaling it means is applied here."""
    grads = [p.grad for p in params]
    total = torch.norm(torch.stack([torch.norm(g.detach(), 2.0) for g in grads]), 2.0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in params:
        p.grad = p.grad * coef
    return float(total)


def micro_batches(grads, s, passes):
    """Step s's gradient in `passes` backward passes (gradient accumulation). In the step before
    a move the package cuts each pass with a newer mask, so an earlier pass's share outside the
    last mask is lost; those steps get all of it from the last pass, which unillm (cutting the
    summed gradient once) then matches exactly."""
    if passes == 1:
        return [grads[s]]
    if (s + 1) % EVERY == 0:
        return [{n: torch.zeros_like(g) for n, g in grads[s].items()} for _ in range(passes - 1)] + [grads[s]]
    return [{n: g * (0.25 + 0.5 * j) for n, g in grads[s].items()} for j in range(passes)]


def torch_run(mask_mode, ratio, passes, params, grads, lrs):
    from badam import BlockOptimizerRatio

    named = [(n, torch.nn.Parameter(params[n].clone())) for n, _ in model_shapes()]
    groups = [dict(params=[p for n, p in named if not decays(n)], weight_decay=0.0),
              dict(params=[p for n, p in named if decays(n)], weight_decay=0.5)]
    torch.manual_seed(SEED)
    opt = BlockOptimizerRatio(param_groups=groups, named_parameters_list=named, update_ratio=ratio,
                              mask_mode=mask_mode, verbose=0, include_embedding=False, switch_every=EVERY,
                              lr=lrs[0], betas=(0.9, 0.999), eps=1e-8)
    seeds = [opt.sparse_dict[p]["seed"] for _, p in named if p.requires_grad]
    norms, sums = [], []
    for s in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = lrs[s]  # HF's LambdaLR
        trainable = [(n, p) for n, p in named if p.requires_grad]
        total = {}
        for micro in micro_batches(grads, s, passes):
            for n, p in trainable:  # AccumulateGrad: a sparse .grad plus a dense one is dense
                p.grad = micro[n].clone() if p.grad is None else p.grad.to_dense() + micro[n]
                total[n] = micro[n].clone() if n not in total else total[n] + micro[n]
            for _, p in reversed(trainable):  # backward's order: the last layer first
                opt.sparse_hook(p)
        sums.append(total)
        norms.append(clip_sparse([p for _, p in trainable], MAX_NORM))
        opt.step()
        for _, p in named:
            p.grad = None
    return dict(named), seeds, norms, sums


def run_unillm(tool, mask_mode, ratio, passes, params, grads, lrs, work):
    t, k = {}, 0
    for n, _ in model_shapes():
        if "embed" in n or "lm_head" in n:
            continue
        t[f"param.{k:03d}.{n}"] = params[n]
        for s in range(STEPS):
            t[f"grad.{s}.{k:03d}.{n}"] = grads[s][n]
        k += 1
    t["lr"] = torch.tensor(lrs, dtype=torch.float64)
    tag = f"{mask_mode}-{ratio}-{passes}"
    src, dst = os.path.join(work, f"{tag}.in.safetensors"), os.path.join(work, f"{tag}.out.safetensors")
    safetensors_py.save_file(t, src)
    subprocess.run([tool, mask_mode, repr(ratio), str(EVERY), str(passes), str(SEED), repr(MAX_NORM), src, dst],
                   check=True)
    out, _ = safetensors_py.load_file(dst)
    return out


def check(tool, mask_mode, ratio, passes, work):
    params, grads, lrs = make_inputs()
    tag = f"{mask_mode} ratio {ratio}" + (f" accumulating {passes}" if passes > 1 else "")
    ps, seeds, norms, sums = torch_run(mask_mode, ratio, passes, params, grads, lrs)
    out = run_unillm(tool, mask_mode, ratio, passes, params, sums, lrs, work)
    expect(out["seed"].tolist() == seeds, f"{tag}: per-tensor seeds equal the package's ({seeds[:4]}...)")
    got = out["norm"].tolist()
    expect(all(abs(a - b) <= 1e-6 * max(1.0, b) for a, b in zip(got, norms)),
           f"{tag}: clip norms over the kept entries match ({got[0]:.6f} vs {norms[0]:.6f} ...)")
    worst, moved = 0.0, 0
    for name in out:
        if not name.startswith("param."):
            continue
        n = name.split(".", 2)[2]
        ref = ps[n].detach()
        mine = out[name].view(ref.shape)
        worst = max(worst, ((mine - ref).abs() / torch.clamp(ref.abs(), min=1.0)).max().item())
        moved += int((ref != params[n]).sum())
    total = sum(p.numel() for n, p in ps.items() if "embed" not in n and "lm_head" not in n)
    expect(worst <= 1e-6, f"{tag}: weights after {STEPS} steps (max rel err {worst:.2e}; "
           f"{moved} of {total} entries moved)")
    expect(torch.equal(ps["model.embed_tokens.weight"].detach(), params["model.embed_tokens.weight"]) and
           torch.equal(ps["lm_head.weight"].detach(), params["lm_head.weight"]),
           f"{tag}: embeddings and lm_head never move")


def check_hook_order():
    """unillm takes a shape's mask owner (the first tensor of that shape whose gradient backward
    finishes) to be the last of that shape in HF order: checked on a tiny transformers Llama (GQA
    and MHA), recording the order in which backward finishes each leaf gradient."""
    import transformers

    for kv in (2, 4):
        cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                       num_attention_heads=4, num_key_value_heads=kv, vocab_size=100,
                                       tie_word_embeddings=False)
        torch.manual_seed(0)
        m = transformers.LlamaForCausalLM(cfg)
        order = []
        for n, p in m.named_parameters():
            p.register_hook(lambda g, n=n: order.append(n))
        ids = torch.randint(0, 100, (2, 7))
        m(ids, labels=ids).loss.backward()
        shape = {n: tuple(p.shape) for n, p in m.named_parameters()}
        first, last = {}, {}
        for n in order:
            if "embed" not in n and "lm_head" not in n:
                first.setdefault(shape[n], n)
        for n, _ in m.named_parameters():
            if "embed" not in n and "lm_head" not in n:
                last[shape[n]] = n
        expect(first == last, f"kv heads {kv}: each shape's first gradient in backward is its last "
               f"tensor in HF order ({sorted(set(first.values()))})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    check_hook_order()
    install_shims()
    work = args.work or tempfile.mkdtemp(prefix="badam_ratio_check_")
    os.makedirs(work, exist_ok=True)
    for mask_mode, ratio, passes in (("adjacent", 0.3, 1), ("scatter", 0.3, 1), ("scatter", 0.05, 1),
                                     ("adjacent", 0.02, 1), ("adjacent", 0.3, 2), ("scatter", 0.3, 3)):
        check(args.dump, mask_mode, ratio, passes, work)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all BAdam ratio checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
