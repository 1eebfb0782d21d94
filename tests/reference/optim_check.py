"""unillm's optimisers (train/optimizer.h) against their references over five steps.

    optim_check.py --dump build/tests/reference/optim_dump [--work DIR]

Random parameters (matrices, a bias, a norm weight; two of them with >= 4096 elements and a
partial last 256-block) and random gradients go through optim_dump (the C++ side) and through:
  sgd        torch.optim.SGD with HF Trainer's param groups (weight decay off for bias/norm)
  adafactor  transformers.optimization.Adafactor as HF Trainer builds it (scale_parameter=False,
             relative_step=False, lr set per step, weight decay per group)
  adamw_8bit bitsandbytes' AdamW8bit, re-implemented below in torch from bnb's published
             algorithm (create_dynamic_map; blockwise 8-bit state, block 256, min_8bit_size 4096;
             the update in f32, weight decay after it, requantisation to the nearest code),
             since bnb has no CPU build for the venv's torch 1.13.
Weights must agree within 1e-6 relative; Adafactor's factored moments too; the 8-bit moments
must be equal after dequantisation.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers.optimization import Adafactor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402
from bnb_quant_check import create_dynamic_map  # noqa: E402

STEPS = 5
WD = 0.1
SHAPES = {  # HF-style names: "bias" / "norm" ones get no weight decay
    "a.weight": (48, 32),
    "a.bias": (48,),
    "b.weight": (96, 64),      # 6144 elements: 8-bit
    "c.norm.weight": (4400,),  # 8-bit, last block of 48
    "d.weight": (7, 5),
}
FAILURES = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def decays(name):
    return "bias" not in name and "norm" not in name


def make_inputs():
    g = torch.Generator().manual_seed(7)
    params = {n: torch.randn(*s, generator=g) * 0.5 for n, s in SHAPES.items()}
    grads = [{n: torch.randn(*s, generator=g) * 0.1 for n, s in SHAPES.items()} for _ in range(STEPS)]
    lrs = torch.tensor([1e-2 * (1 - 0.1 * s) for s in range(STEPS)], dtype=torch.float32)
    return params, grads, lrs


def run_unillm(tool, kind, params, grads, lrs, work):
    t = {"param." + n: p for n, p in params.items()}
    for s, gs in enumerate(grads):
        t.update({f"grad.{s}.{n}": gg for n, gg in gs.items()})
    t["lr"] = lrs
    t["weight_decay"] = torch.tensor([WD], dtype=torch.float32)
    src, dst = os.path.join(work, f"{kind}.in.safetensors"), os.path.join(work, f"{kind}.out.safetensors")
    safetensors_py.save_file(t, src)
    subprocess.run([tool, kind, src, dst], check=True)
    out, _ = safetensors_py.load_file(dst)
    return out


def torch_run(make_opt, params, grads, lrs):
    ps = {n: torch.nn.Parameter(p.clone()) for n, p in params.items()}
    groups = [{"params": [p for n, p in ps.items() if decays(n)], "weight_decay": WD},
              {"params": [p for n, p in ps.items() if not decays(n)], "weight_decay": 0.0}]
    opt = make_opt(groups, float(lrs[0]))
    for s in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = float(lrs[s])  # what HF's LambdaLR does each step
        for n, p in ps.items():
            p.grad = grads[s][n].clone()
        opt.step()
    return ps, opt


def close(a, b, tol=1e-6):
    return torch.all((a - b).abs() <= tol * torch.clamp(b.abs(), min=1.0)).item()


def check_weights(kind, out, ps):
    for n, p in ps.items():
        got = out["param." + n].view(p.shape)
        err = ((got - p.detach()).abs() / torch.clamp(p.detach().abs(), min=1.0)).max().item()
        expect(close(got, p.detach()), f"{kind} {n}: weights after {STEPS} steps (max rel err {err:.2e})")


def check_sgd(tool, params, grads, lrs, work):
    out = run_unillm(tool, "sgd", params, grads, lrs, work)
    ps, _ = torch_run(lambda g, lr: torch.optim.SGD(g, lr=lr), params, grads, lrs)
    check_weights("sgd", out, ps)


def check_adafactor(tool, params, grads, lrs, work):
    out = run_unillm(tool, "adafactor", params, grads, lrs, work)
    ps, opt = torch_run(lambda g, lr: Adafactor(g, lr=lr, scale_parameter=False, relative_step=False,
                                                warmup_init=False), params, grads, lrs)
    check_weights("adafactor", out, ps)
    st = [opt.state[ps[n]] for n in sorted(ps)]  # the arena's order (optim_dump sorts by name)
    row = torch.cat([s["exp_avg_sq_row"] for s in st if "exp_avg_sq_row" in s])
    col = torch.cat([s["exp_avg_sq_col"] for s in st if "exp_avg_sq_col" in s])
    sq = torch.cat([s["exp_avg_sq"] for s in st if "exp_avg_sq" in s])
    for name, ref in (("exp_avg_sq_row", row), ("exp_avg_sq_col", col), ("exp_avg_sq", sq)):
        expect(close(out[name], ref, 1e-5), f"adafactor {name}: {ref.numel()} values match transformers'")


class AdamW8bitRef:
    """bnb's AdamW8bit step (optimizer_update_8bit_blockwise / optimizer_update_32bit, 'adam')."""

    def __init__(self, params, smap, umap, beta1=0.9, beta2=0.999, eps=1e-8):
        self.smap, self.umap = smap, umap
        self.b1, self.b2, self.eps = np.float32(beta1), np.float32(beta2), np.float32(eps)
        self.state = {}
        for n, p in params.items():
            k = p.numel()
            if k >= 4096:
                blocks = (k + 255) // 256
                self.state[n] = dict(q8=True, c1=torch.zeros(k, dtype=torch.long), c2=torch.zeros(k, dtype=torch.long),
                                     a1=torch.zeros(blocks), a2=torch.zeros(blocks))
            else:
                self.state[n] = dict(q8=False, m=torch.zeros(k), v=torch.zeros(k))
        self.step_count = 0

    @staticmethod
    def nearest(x, table):
        return torch.argmin((x.view(-1, 1) - table.view(1, -1)).abs(), dim=1)

    def step(self, params, grads, lr, wd_of):
        self.step_count += 1
        f32 = np.float32
        c1 = f32(1) - self.b1 ** f32(self.step_count)
        c2 = np.sqrt(f32(1) - self.b2 ** f32(self.step_count))
        lr32 = f32(lr)
        step_size = float(-lr32 * c2 / c1)
        one_b1, one_b2 = float(f32(1) - self.b1), float(f32(1) - self.b2)
        for n, p in params.items():
            st, g = self.state[n], grads[n].reshape(-1)
            flat = p.view(-1)
            if st["q8"]:
                blk = torch.arange(g.numel()) // 256
                m = self.smap[st["c1"]] * st["a1"][blk] * float(self.b1) + one_b1 * g
                v = self.umap[st["c2"]] * st["a2"][blk] * float(self.b2) + one_b2 * g * g
            else:
                m = st["m"] * float(self.b1) + one_b1 * g
                v = st["v"] * float(self.b2) + one_b2 * g * g
            flat += step_size * (m / (torch.sqrt(v) + float(c2 * self.eps)))
            wd = f32(wd_of(n))
            if wd > 0:
                flat *= float(f32(1) - lr32 * wd)
            if st["q8"]:
                nb = st["a1"].numel()
                pad = nb * 256 - g.numel()
                for key, x, table in (("1", m, self.smap), ("2", v, self.umap)):
                    amax = torch.cat([x.abs(), x.new_zeros(pad)]).view(nb, 256).max(dim=1).values
                    scaled = torch.where(amax[blk] > 0, x / amax[blk], torch.zeros_like(x))
                    st["c" + key], st["a" + key] = self.nearest(scaled, table), amax
            else:
                st["m"], st["v"] = m, v

    def dequantized(self, n, second):
        st = self.state[n]
        if not st["q8"]:
            return st["v"] if second else st["m"]
        blk = torch.arange(st["c1"].numel()) // 256
        return (self.umap[st["c2"]] * st["a2"][blk]) if second else (self.smap[st["c1"]] * st["a1"][blk])


def check_adamw_8bit(tool, params, grads, lrs, work):
    out = run_unillm(tool, "adamw_8bit", params, grads, lrs, work)
    for name, signed in (("map.signed", True), ("map.unsigned", False)):
        mine = create_dynamic_map(signed=signed)
        ulps = (out[name].view(torch.int32).long() - mine.view(torch.int32).long()).abs().max().item()
        # torch.linspace's vectorised path may land an ulp from its scalar one (bnb_quant_check.py).
        expect(ulps <= 2, f"adamw_8bit {name}: bnb's create_dynamic_map within {ulps} ulp")
    # The same tables on both sides from here: a 1-ulp table difference would move nearest codes.
    ref = AdamW8bitRef(params, out["map.signed"], out["map.unsigned"])
    ps = {n: p.clone() for n, p in params.items()}
    for s in range(STEPS):
        ref.step(ps, grads[s], float(lrs[s]), lambda n: WD if decays(n) else 0.0)
    check_weights("adamw_8bit", out, ps)
    for n, p in params.items():
        k = p.numel()
        for key, second in (("exp_avg", False), ("exp_avg_sq", True)):
            got, want = out[f"deq.{key}.{n}"], ref.dequantized(n, second)
            kind = "8-bit" if k >= 4096 else "f32"
            same = torch.equal(got, want) if k >= 4096 else close(got, want, 1e-6)
            expect(same, f"adamw_8bit {n} {key} ({kind}): dequantised state "
                         f"{'equal' if k >= 4096 else 'within 1e-6'} (max diff {(got - want).abs().max().item():.2e})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="optim_check_")
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    params, grads, lrs = make_inputs()
    check_sgd(args.dump, params, grads, lrs, work)
    check_adafactor(args.dump, params, grads, lrs, work)
    check_adamw_8bit(args.dump, params, grads, lrs, work)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("all optimiser checks passed")


if __name__ == "__main__":
    main()
