"""unillm's BAdam layer mode (train/badam.h) against the `badam` package's BlockOptimizer itself.

    badam_check.py --dump build/tests/reference/badam_dump [--work DIR]

A toy model with LLaMA-style names (embeddings, four layers of matrices, biases and norms, the
final norm and lm_head) gets random gradients for twelve steps. The reference is what
LLaMA-Factory's _create_badam_optimizer builds: torch AdamW over its decay / no-decay groups,
wrapped by badam.BlockOptimizer(block_prefix_list=None, switch_mode, switch_block_every,
start_block); each step sets the gradient of the parameters that require grad (what backward
would fill), clips them (HF's clip over the model's parameters) and steps. badam_dump does the
same through unillm's arena. The active layer of every step, each step's gradient norm and the
final weights must agree (1e-6 relative).
"""
import argparse
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import warnings

import torch
from badam import BlockOptimizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

warnings.filterwarnings("ignore", message="BAdam expect")  # it warns about f32 weights
STEPS = 12
LAYERS = 4
MAX_NORM = 0.5
FAILURES = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def names():
    out = ["lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out += [p + "input_layernorm.weight", p + "mlp.down_proj.weight", p + "self_attn.o_proj.bias",
                p + "self_attn.o_proj.weight"]
    return sorted(out)  # the arena's order (badam_dump sorts by name)


def shape(n):
    if n.endswith("bias") or "norm" in n:
        return (6,)
    return (6, 5) if "proj" in n else (9, 6)


def make_inputs():
    g = torch.Generator().manual_seed(5)
    params = {n: torch.randn(*shape(n), generator=g) for n in names()}
    grads = [{n: torch.randn(*shape(n), generator=g) * 0.2 for n in names()} for _ in range(STEPS)]
    lrs = torch.tensor([1e-2 * (1 - 0.05 * s) for s in range(STEPS)], dtype=torch.float32)
    return params, grads, lrs


def decays(n):  # LLaMA-Factory's _get_decay_parameter_names: not biases, not norm layers
    return "bias" not in n and "norm" not in n


def torch_run(mode, every, start, params, grads, lrs):
    ps = {n: torch.nn.Parameter(p.clone()) for n, p in params.items()}
    named = list(ps.items())
    groups = [dict(params=[p for n, p in named if not decays(n)], weight_decay=0.0),
              dict(params=[p for n, p in named if decays(n)], weight_decay=0.5)]
    base = torch.optim.AdamW(groups, lr=float(lrs[0]), betas=(0.9, 0.999), eps=1e-8)
    with contextlib.redirect_stdout(io.StringIO()):  # its prints of the trainable prefix
        opt = BlockOptimizer(base_optimizer=base, named_parameters_list=named, block_prefix_list=None,
                             switch_block_every=every, start_block=start, switch_mode=mode, verbose=0)
    active, norms = [], []
    for s in range(STEPS):
        on = [n for n, p in named if p.requires_grad]
        layer = {n.split(".")[2] for n in on}
        active.append(int(layer.pop()) if len(layer) == 1 else -1)
        for group in opt.param_groups:
            group["lr"] = float(lrs[s])  # HF's LambdaLR
        for n, p in named:
            p.grad = grads[s][n].clone() if p.requires_grad else None
        norms.append(float(torch.nn.utils.clip_grad_norm_([p for _, p in named], MAX_NORM)))
        with contextlib.redirect_stdout(io.StringIO()):
            opt.step()
        for _, p in named:
            p.grad = None
    return ps, active, norms


def run_unillm(tool, mode, every, start, params, grads, lrs, work):
    t = {"param." + n: p for n, p in params.items()}
    for s, gs in enumerate(grads):
        t.update({f"grad.{s}.{n}": gg for n, gg in gs.items()})
    t["lr"] = lrs
    t["max_norm"] = torch.tensor([MAX_NORM], dtype=torch.float32)
    tag = f"{mode}-{every}-{start}"
    src, dst = os.path.join(work, f"{tag}.in.safetensors"), os.path.join(work, f"{tag}.out.safetensors")
    safetensors_py.save_file(t, src)
    subprocess.run([tool, mode, str(every), str(-1 if start is None else start), src, dst], check=True)
    out, _ = safetensors_py.load_file(dst)
    return out


def check(tool, mode, every, start, work):
    params, grads, lrs = make_inputs()
    tag = f"{mode} every {every} start {start}"
    ps, active, norms = torch_run(mode, every, start, params, grads, lrs)
    out = run_unillm(tool, mode, every, start, params, grads, lrs, work)
    got_active = out["active"].tolist()
    expect(got_active == active, f"{tag}: active layer per step {got_active} == BlockOptimizer's {active}")
    got_norms = out["norm"].tolist()
    expect(all(abs(a - b) <= 1e-6 * max(1.0, b) for a, b in zip(got_norms, norms)),
           f"{tag}: gradient norms over the active layer match")
    worst = 0.0
    for n, p in ps.items():
        ref = p.detach()
        got = out["param." + n].view(ref.shape)
        worst = max(worst, ((got - ref).abs() / torch.clamp(ref.abs(), min=1.0)).max().item())
    expect(worst <= 1e-6, f"{tag}: weights after {STEPS} steps (max rel err {worst:.2e})")
    moved = [n for n in ps if not torch.equal(ps[n].detach(), params[n])]
    expect(not any("embed" in n or "lm_head" in n or n == "model.norm.weight" for n in moved),
           f"{tag}: embeddings, final norm and lm_head never move")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="badam_check_")
    os.makedirs(work, exist_ok=True)
    for mode, every, start in (("ascending", 3, None), ("descending", 2, None), ("ascending", 1, None),
                               ("ascending", 5, 2), ("fixed", 4, 1), ("descending", 3, 0)):
        check(args.dump, mode, every, start, work)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all BAdam checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
