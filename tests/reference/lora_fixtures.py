"""LoRA fixtures for tests/reference/lora_parity_test.cpp, made by make_fixtures.py in its process.

The reference is plain torch, written from PEFT's LoRA semantics (not PEFT itself): every targeted
projection computes base(x) + (x @ A.T @ B.T) * scaling, scaling = alpha / r (use_rslora:
alpha / sqrt(r)), on top of hf_llama_reference.ReferenceLM. Adapters are stored as PEFT writes
them (adapter_config.json, adapter_model.safetensors with "base_model.model.<module>.lora_A.weight"
keys), so the C++ test also exercises its PEFT loader on a file it did not write.

Per case, DIR/lora_<case>/:
  adapter/               the adapter (A ~ U(±1/sqrt(in)) as PEFT, B ~ N(0, 0.1²) so B matters)
  lora.json              model_dir, batch, loss, counts, tensor indices, tolerances, f32 noise
  grads.f32              d(loss_sum / count) / dA, dB (f64 autograd from the stored f32 values)
  step.f32               A and B after one clipped AdamW step (torch.optim.AdamW, f64)
  logits.f32             [T, V] logits with the adapter (f32, as HF runs it)
"""
import json
import math
import os

import torch

import hf_llama_reference as ref
import safetensors_py
import train_fixtures

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# name -> (base model fixture, seed, r, alpha, use_rslora, targets)
CASES = {
    "llama_qv": ("llama_gqa", 301, 4, 8, False, ["q_proj", "v_proj"]),
    "llama_all_rslora": ("llama_gqa", 302, 4, 8, True, list(MODULES)),
    "qwen2_all": ("qwen2", 303, 4, 8, False, list(MODULES)),
}
STEP = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, max_grad_norm=1.0)


def module_shapes(cfg):
    """{module name: (out, in)} of every linear LoRA can target, in model order."""
    c, f = cfg["hidden_size"], cfg["intermediate_size"]
    h = cfg["num_attention_heads"]
    hkv = cfg.get("num_key_value_heads") or h
    d = ref.head_dim_of(cfg)
    dims = {"q_proj": (h * d, c), "k_proj": (hkv * d, c), "v_proj": (hkv * d, c),
            "o_proj": (c, h * d), "gate_proj": (f, c), "up_proj": (f, c), "down_proj": (c, f)}
    out = {}
    for li in range(cfg["num_hidden_layers"]):
        for m in MODULES:
            scope = "self_attn" if m in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            out[f"model.layers.{li}.{scope}.{m}"] = dims[m]
    return out


def scaling_of(r, alpha, rslora):
    return alpha / math.sqrt(r) if rslora else alpha / r


class LoraReferenceLM(ref.ReferenceLM):
    """ReferenceLM plus LoRA deltas on the modules in `lora` ({module: (A [r, in], B [out, r])})."""

    def __init__(self, cfg, state, lora, scaling, dtype=torch.float32):
        super().__init__(cfg, state, dtype)
        self.lora = {k: (a.to(dtype) if not a.requires_grad else a,
                         b.to(dtype) if not b.requires_grad else b) for k, (a, b) in lora.items()}
        self.scaling = scaling

    def _linear(self, x, name):
        y = super()._linear(x, name)
        if name in self.lora:
            a, b = self.lora[name]
            y = y + (x @ a.t() @ b.t()) * self.scaling
        return y

    def _mlp(self, x, li):
        p = f"model.layers.{li}.mlp."
        gate = torch.nn.functional.silu(self._linear(x, p + "gate_proj"))
        return self._linear(gate * self._linear(x, p + "up_proj"), p + "down_proj")


def random_lora(cfg, seed, r, targets):
    g = torch.Generator().manual_seed(seed)
    lora = {}
    for name, (n_out, n_in) in module_shapes(cfg).items():
        if name.rsplit(".", 1)[1] not in targets:
            continue
        bound = 1.0 / math.sqrt(n_in)  # PEFT: kaiming_uniform_(a=sqrt(5))
        a = (torch.rand(r, n_in, generator=g) * 2 - 1) * bound
        b = torch.randn(n_out, r, generator=g) * 0.1
        lora[name] = (a, b)
    return lora


def peft_state(lora):
    out = {}
    for name, (a, b) in lora.items():
        out[f"base_model.model.{name}.lora_A.weight"] = a.to(torch.float32).contiguous()
        out[f"base_model.model.{name}.lora_B.weight"] = b.to(torch.float32).contiguous()
    return out


def write_adapter(adir, r, alpha, rslora, targets, base_dir, lora):
    os.makedirs(adir, exist_ok=True)
    cfg = {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": base_dir,
           "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
           "init_lora_weights": True, "layer_replication": None, "layers_pattern": None,
           "layers_to_transform": None, "loftq_config": {}, "lora_alpha": alpha,
           "lora_dropout": 0.0, "megatron_config": None, "megatron_core": "megatron.core",
           "modules_to_save": None, "peft_type": "LORA", "r": r, "rank_pattern": {},
           "revision": None, "target_modules": sorted(targets), "task_type": "CAUSAL_LM",
           "use_dora": False, "use_rslora": rslora}
    train_fixtures._write_json(os.path.join(adir, "adapter_config.json"), cfg)
    safetensors_py.save_file(peft_state(lora), os.path.join(adir, "adapter_model.safetensors"),
                             metadata={"format": "pt"})


def lora_leaves(lora, dtype):
    return {k: (a.to(dtype).clone().requires_grad_(True), b.to(dtype).clone().requires_grad_(True))
            for k, (a, b) in lora.items()}


def grads_and_step(cfg, state, lora, scaling, batch, dtype):
    """(loss_sum, count, {peft key: grad}, {peft key: value after one AdamW step}, grad norm)."""
    leaves = lora_leaves(lora, dtype)
    model = LoraReferenceLM(cfg, state, leaves, scaling, dtype)
    loss_sum, count = train_fixtures.batch_loss(model, batch)
    (loss_sum / count).backward()
    flat = {}
    for name, (a, b) in leaves.items():
        flat[f"base_model.model.{name}.lora_A.weight"] = a
        flat[f"base_model.model.{name}.lora_B.weight"] = b
    grads = {k: v.grad.detach().clone() for k, v in flat.items()}
    s = STEP
    norm = torch.nn.utils.clip_grad_norm_(list(flat.values()), s["max_grad_norm"])
    opt = torch.optim.AdamW(list(flat.values()), lr=s["lr"], betas=s["betas"], eps=s["eps"],
                            weight_decay=s["weight_decay"])
    opt.step()
    return float(loss_sum), count, grads, {k: v.detach() for k, v in flat.items()}, float(norm)


def make_case(out, name, models, random_state):
    base, seed, r, alpha, rslora, targets = CASES[name]
    bseed, cfg = models[base]
    state = random_state(cfg, bseed)
    lora = random_lora(cfg, seed, r, targets)
    scaling = scaling_of(r, alpha, rslora)
    fdir = os.path.join(out, "lora_" + name)
    write_adapter(os.path.join(fdir, "adapter"), r, alpha, rslora, targets, "../" + base, lora)
    batch = train_fixtures.plain_batch(seed, cfg["vocab_size"])
    loss64, count, g64, step64, norm64 = grads_and_step(cfg, state, lora, scaling, batch,
                                                        torch.float64)
    loss32, _, g32, step32, _ = grads_and_step(cfg, state, lora, scaling, batch, torch.float32)
    names = sorted(g64)
    gindex = train_fixtures.write_tensors(os.path.join(fdir, "grads.f32"), names, g64)
    sindex = train_fixtures.write_tensors(os.path.join(fdir, "step.f32"), names, step64)
    ids = batch["input_ids"][0]
    logits = LoraReferenceLM(cfg, state, lora, scaling, torch.float32).logits(ids)
    logits.to(torch.float32).contiguous().numpy().astype("<f4").tofile(
        os.path.join(fdir, "logits.f32"))
    worst = max((train_fixtures.rel_err(g32[k], g64[k]), k) for k in g64)
    base_logits = ref.ReferenceLM(cfg, state, torch.float32).logits(ids)
    train_fixtures._write_json(os.path.join(fdir, "lora.json"), {
        "name": name, "model_dir": "../" + base, "adapter_dir": "adapter", "r": r,
        "lora_alpha": alpha, "use_rslora": rslora, "targets": sorted(targets),
        "scaling": scaling, "batch": batch, "loss_sum": loss64, "count": count,
        "grads_file": "grads.f32", "grads": gindex, "grad_rtol": 1e-4, "loss_rtol": 1e-5,
        "step": dict(STEP, grad_norm=norm64), "step_file": "step.f32", "step_tensors": sindex,
        "step_rtol": 1e-4, "update_rtol": 1e-3, "prompt_ids": ids,
        "logits_shape": list(logits.shape), "logits_file": "logits.f32", "atol": 1e-4,
        "adapter_effect": float((logits - base_logits).abs().max()),
        "f32_reference_noise": {"loss_sum_rel": abs(loss32 - loss64) / abs(loss64),
                                "worst_grad_rel": worst[0], "worst_grad_name": worst[1]},
        "made_by": "tests/reference/lora_fixtures.py (LoraReferenceLM over "
                   "hf_llama_reference.py, autograd f64, torch.optim.AdamW)"})
    print(f"lora_{name:16s} {base} r={r} alpha={alpha} rslora={rslora} {len(lora)} modules: "
          f"loss_sum {loss64:.6f} over {count}, |g| {norm64:.4f}, adapter moves logits by "
          f"{float((logits - base_logits).abs().max()):.3f}; f32 grads vs f64 worst rel "
          f"{worst[0]:.1e}")


def make_all(out, models, random_state):
    for name in CASES:
        make_case(out, name, models, random_state)


# ------------------------------------------------------------------------------- self-test


def selftest(check, models, random_state):
    """The LoRA reference against independent computations (f64)."""
    base, seed, r, alpha, rslora, targets = CASES["qwen2_all"]
    bseed, cfg = models[base]
    state = random_state(cfg, bseed)
    lora = random_lora(cfg, seed, r, targets)
    scaling = scaling_of(r, alpha, rslora)
    ids = train_fixtures.plain_batch(seed, cfg["vocab_size"])["input_ids"][0]
    # 1. Zero B: exactly the base model.
    zero = {k: (a, torch.zeros_like(b)) for k, (a, b) in lora.items()}
    d = float((LoraReferenceLM(cfg, state, zero, scaling, torch.float64).logits(ids)
               - ref.ReferenceLM(cfg, state, torch.float64).logits(ids)).abs().max())
    check("lora reference with B = 0 equals the base model (f64)", d == 0.0, f"max |d| {d:.1e}")
    # 2. Folding W += s·B·A into the weights gives the same logits (merge semantics).
    merged = {k: v.to(torch.float64).clone() for k, v in state.items()}
    for name, (a, b) in lora.items():
        merged[name + ".weight"] += scaling * (b.double() @ a.double())
    d = float((LoraReferenceLM(cfg, state, lora, scaling, torch.float64).logits(ids)
               - ref.ReferenceLM(cfg, merged, torch.float64).logits(ids)).abs().max())
    check("lora reference vs merged weights (f64)", d < 1e-10, f"max |d| {d:.1e}")
    # 3. Autograd grads of A and B vs central differences.
    batch = train_fixtures.plain_batch(seed, cfg["vocab_size"])
    _, count, grads, _, _ = grads_and_step(cfg, state, lora, scaling, batch, torch.float64)
    g = torch.Generator().manual_seed(seed)
    worst, h = 0.0, 1e-6
    for key in ("model.layers.0.self_attn.k_proj", "model.layers.1.mlp.down_proj"):
        for which in (0, 1):
            for i in torch.randint(0, lora[key][which].numel(), (3,), generator=g).tolist():
                vals = []
                for sgn in (1, -1):
                    pert = {k: (a.double().clone(), b.double().clone()) for k, (a, b) in lora.items()}
                    pert[key][which].view(-1)[i] += sgn * h
                    with torch.no_grad():
                        m = LoraReferenceLM(cfg, state, pert, scaling, torch.float64)
                        vals.append(float(train_fixtures.batch_loss(m, batch)[0]) / count)
                fd = (vals[0] - vals[1]) / (2 * h)
                ab = "lora_A" if which == 0 else "lora_B"
                an = float(grads[f"base_model.model.{key}.{ab}.weight"].view(-1)[i])
                worst = max(worst, abs(fd - an) / max(abs(an), 1e-3))
    check("lora reference grads vs central differences (f64)", worst < 1e-6, f"worst rel {worst:.1e}")
