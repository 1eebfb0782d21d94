"""unillm's GaLore and APOLLO (train/galore.h, train/apollo.h) against galore_torch 1.0's
GaLoreAdamW and apollo_torch 1.0.3's APOLLOAdamW, with LLaMA-Factory's param groups.

    low_rank_check.py --dump build/tests/reference/low_rank_dump [--work DIR]

Random parameters with HF names (q_proj [12, 20] is projected on the left, down_proj [24, 10] on
the right; embed_tokens, lm_head, a bias and a norm take the packages' plain AdamW) and random
gradients go through low_rank_dump (the C++ side) and through the packages for five steps with
update_interval 2, so the projection is refreshed at steps 0, 2 and 4 and Adam's moments carry
across refreshes, as in the packages.

Bases. GaLore's is torch.linalg.svd of the f32 gradient; singular vectors' signs are arbitrary
(LAPACK's choice), and since the moments persist across refreshes a sign flip changes the
trajectory. unillm fixes each basis vector's sign so that its largest-magnitude entry is
positive; here the packages' get_orthogonal_matrix is wrapped to apply the same rule to torch's
SVD, so both sides run from their own SVD (unillm's is an f64 Jacobi) and must agree, bases
included. APOLLO's random basis is torch.randn from a generator seeded with the parameter's index
in LLaMA-Factory's groups, re-seeded at each refresh; unillm reproduces torch's generator, so the
package runs untouched and its bases are compared too (the groups list parameters in the arena's
order, by name here, as a real model's HF order is the arena's).

The packages are imported without their __init__ (it imports bitsandbytes, which has no CPU
build for torch 1.13). Weights must agree within 1e-5 relative, moments and bases within 1e-5.
GaLore's proj_type full runs with Adam eps 1e-3 (see check_galore).
"""
import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import types

import torch
import transformers.utils.versions  # noqa: F401  (before the package stubs: it probes them)

for _pkg in ("galore_torch", "apollo_torch"):
    _spec = importlib.util.find_spec(_pkg)
    _stub = types.ModuleType(_pkg)
    _stub.__path__ = list(_spec.submodule_search_locations)
    _stub.__spec__ = _spec
    sys.modules[_pkg] = _stub
from galore_torch.adamw import AdamW as GaLoreAdamW  # noqa: E402
from galore_torch.galore_projector import GaLoreProjector  # noqa: E402
from apollo_torch.apollo import AdamW as APOLLOAdamW  # noqa: E402
from apollo_torch.random_projector import GradientProjector  # noqa: E402
from apollo_torch.svd_projector import GaLoreProjector as ApolloSvdProjector  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

STEPS = 5
WD = 0.1
SHAPES = {
    "model.embed_tokens.weight": (30, 10),
    "model.layers.0.self_attn.q_proj.weight": (12, 20),
    "model.layers.0.self_attn.q_proj.bias": (12,),
    "model.layers.0.mlp.down_proj.weight": (24, 10),
    "model.norm.weight": (10,),
    "lm_head.weight": (30, 10),
}
FAILURES = []
CURRENT = {"step": 0, "names": {}, "torch_bases": {}}


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def decays(name):
    return "bias" not in name and "norm" not in name


def targets_of(target):
    """LLaMA-Factory: Linear modules whose name contains a target ("all": find_all_linear_modules,
    every linear's last name but lm_head's); their weights with more than one dimension."""
    linear = [n[: -len(".weight")] for n, s in SHAPES.items() if len(s) == 2 and "embed_tokens" not in n]
    wanted = {m.split(".")[-1] for m in linear if "lm_head" not in m} if target == ["all"] else target
    return {m + ".weight" for m in linear if any(t in m for t in wanted)}


def fix_cols(a):
    idx = a.abs().argmax(dim=0)
    s = a[idx, torch.arange(a.shape[1])]
    return a * torch.where(s < 0, -1.0, 1.0)


def fix_rows(b):
    idx = b.abs().argmax(dim=1)
    s = b[torch.arange(b.shape[0]), idx]
    return b * torch.where(s < 0, -1.0, 1.0)[:, None]


def signed(orig):
    def wrapped(self, weights, rank, type):  # noqa: A002  (the packages' parameter name)
        r = orig(self, weights, rank, type)
        r = fix_rows(r) if type == "right" else fix_cols(r) if type == "left" else [fix_cols(r[0]), fix_rows(r[1])]
        name = CURRENT["names"][id(weights)]
        CURRENT["torch_bases"][(CURRENT["step"], name)] = r
        return r
    return wrapped


GaLoreProjector.get_orthogonal_matrix = signed(GaLoreProjector.get_orthogonal_matrix)
ApolloSvdProjector.get_orthogonal_matrix = signed(ApolloSvdProjector.get_orthogonal_matrix)


def recorded(orig):
    def wrapped(self, weights, rank, type, seed):  # noqa: A002
        r = orig(self, weights, rank, type, seed)
        CURRENT["torch_bases"][(CURRENT["step"], CURRENT["names"][id(weights)])] = r
        return r
    return wrapped


GradientProjector.get_orthogonal_matrix = recorded(GradientProjector.get_orthogonal_matrix)


def make_inputs():
    g = torch.Generator().manual_seed(11)
    params = {n: torch.randn(*s, generator=g) * 0.5 for n, s in SHAPES.items()}
    grads = [{n: torch.randn(*s, generator=g) * 0.1 for n, s in SHAPES.items()} for _ in range(STEPS)]
    lrs = torch.tensor([1e-2 * (1 - 0.1 * s) for s in range(STEPS)], dtype=torch.float32)
    return params, grads, lrs


def run_unillm(tool, kind, opts, inputs, work):
    params, grads, lrs = inputs
    t = {"param." + n: p for n, p in params.items()}
    for s, gs in enumerate(grads):
        t.update({f"grad.{s}.{n}": gg for n, gg in gs.items()})
    t["lr"] = lrs
    t["weight_decay"] = torch.tensor([WD], dtype=torch.float32)
    tag = kind + "_" + "_".join(f"{k}-{v}" for k, v in opts.items())
    src, dst = os.path.join(work, f"{tag}.in.safetensors"), os.path.join(work, f"{tag}.out.safetensors")
    safetensors_py.save_file(t, src)
    subprocess.run([tool, kind, src, dst] + [f"{k}={v}" for k, v in opts.items()], check=True)
    out, _ = safetensors_py.load_file(dst)
    return out


def ref_run(make_opt, group_kwargs, targets, inputs):
    """LLaMA-Factory's _create_*_optimizer groups: no-decay, decay, then the projected weights."""
    params, grads, lrs = inputs
    ps = {n: torch.nn.Parameter(p.clone()) for n, p in params.items()}
    names = sorted(ps)  # the arena's order in low_rank_dump (HF's order in a real model)
    groups = [
        dict(params=[ps[n] for n in names if n not in targets and not decays(n)], weight_decay=0.0),
        dict(params=[ps[n] for n in names if n not in targets and decays(n)], weight_decay=WD),
        dict(params=[ps[n] for n in names if n in targets], weight_decay=WD, **group_kwargs),
    ]
    opt = make_opt(groups, float(lrs[0]))
    for s in range(STEPS):
        CURRENT["step"] = s
        for group in opt.param_groups:
            group["lr"] = float(lrs[s])  # what HF's LambdaLR does each step
        CURRENT["names"] = {}
        for n, p in ps.items():
            p.grad = grads[s][n].clone()
            CURRENT["names"][id(p.grad)] = n
        opt.step()
    return ps, opt


def max_rel(a, b):
    return ((a - b).abs() / torch.clamp(b.abs(), min=1.0)).max().item()


def compare(label, out, ps, opt, targets):
    for n, p in ps.items():
        err = max_rel(out["param." + n].view(p.shape), p.detach())
        expect(err <= 1e-5, f"{label} {n}: weights after {STEPS} steps (max rel err {err:.2e})")
    names = sorted(ps)  # the arena's order
    for key in ("exp_avg", "exp_avg_sq"):
        ref = torch.cat([opt.state[ps[n]][key].reshape(-1) for n in names])
        err = (out[key] - ref).abs().max().item()
        expect(out[key].shape == ref.shape and err <= 1e-5,
               f"{label} {key}: {ref.numel()} values (low-rank for {len(targets)} targets), max err {err:.2e}")


def check_bases(label, out, targets):
    """The bases unillm used at each refresh against the package's: torch.linalg.svd's (sign rule
    applied) or the seeded torch.randn ones."""
    worst = 0.0
    for (step, name), r in CURRENT["torch_bases"].items():
        mats = r if isinstance(r, list) else [r]
        sides = ["left", "right"] if isinstance(r, list) else [None]
        for m, side in zip(mats, sides):
            key = f"basis.{step}.{name}.{side}" if side else None
            if key is None:  # one-sided: whichever the dump has
                key = next(k for k in (f"basis.{step}.{name}.left", f"basis.{step}.{name}.right") if k in out)
            worst = max(worst, (out[key] - m).abs().max().item())
    expect(len(CURRENT["torch_bases"]) == 3 * len(targets) and worst <= 1e-5,
           f"{label}: {len(CURRENT['torch_bases'])} refreshes, bases within {worst:.2e} of the package's")


def check_galore(tool, inputs, work, proj_type):
    # full: at a refresh Uᵀ·G·Vᵀ is diagonal, its off-diagonal entries rounding noise that Adam's
    # m / (sqrt(v) + eps) blows up to ±(1−β1)/sqrt(1−β2) on both sides alike; an eps far
    # above that noise keeps the comparison about the algorithm.
    eps = 1e-3 if proj_type == "full" else 1e-8
    opts = {"rank": 4, "update_interval": 2, "scale": 2.0, "proj_type": proj_type, "eps": eps}
    out = run_unillm(tool, "galore", opts, inputs, work)
    targets = targets_of(["all"])
    CURRENT["torch_bases"] = {}
    kwargs = {"rank": 4, "update_proj_gap": 2, "scale": 2.0, "proj_type": proj_type}
    ps, opt = ref_run(lambda g, lr: GaLoreAdamW(g, lr=lr, betas=(0.9, 0.999), eps=eps, no_deprecation_warning=True),
                      kwargs, targets, inputs)
    label = f"galore {proj_type}"
    compare(label, out, ps, opt, targets)
    check_bases(label, out, targets)


def check_apollo(tool, inputs, work, proj, scale_type, scale_front):
    opts = {"rank": 4, "update_interval": 2, "scale": 32.0, "proj": proj, "proj_type": "std",
            "scale_type": scale_type, "scale_front": int(scale_front)}
    out = run_unillm(tool, "apollo", opts, inputs, work)
    targets = targets_of(["all"])
    CURRENT["torch_bases"] = {}
    kwargs = {"rank": 4, "proj": proj, "proj_type": "std", "update_proj_gap": 2, "scale": 32.0,
              "scale_type": scale_type, "scale_front": scale_front}
    # LLaMA-Factory passes scale_front in the group only, where APOLLOAdamW does not read it (the
    # constructor's flag decides); it is given to the constructor here so that both settings are
    # checked (they differ only by the limiter's 1e-8 guard).
    ps, opt = ref_run(lambda g, lr: APOLLOAdamW(g, lr=lr, betas=(0.9, 0.999), eps=1e-8, scale_front=scale_front),
                      kwargs, targets, inputs)
    label = f"apollo {proj} {scale_type}{' scale_front' if scale_front else ''}"
    compare(label, out, ps, opt, targets)
    names = [n for n in sorted(ps) if n in targets]
    ref = torch.stack([torch.as_tensor(opt.state[ps[n]]["scaled_grad"]).float().reshape(()) for n in names])
    err = max_rel(out["scaled_grad_norm"], ref)
    expect(err <= 1e-5, f"{label}: norm-growth limiter state (max rel err {err:.2e})")
    check_bases(label, out, targets)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="low_rank_check_")
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    inputs = make_inputs()
    for proj_type in ("std", "reverse_std", "full"):
        check_galore(args.dump, inputs, work, proj_type)
    check_apollo(args.dump, inputs, work, "random", "channel", False)
    check_apollo(args.dump, inputs, work, "random", "tensor", True)
    check_apollo(args.dump, inputs, work, "svd", "channel", False)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("all GaLore / APOLLO checks passed")


if __name__ == "__main__":
    main()
