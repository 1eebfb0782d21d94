"""Cross-checks unillm's LoRA variants, DoRA (use_dora) and PiSSA (pissa_init, pissa_convert),
against Hugging Face PEFT 0.13, both directions, on the tiny random llama (GQA) and qwen2 (qkv
bias, tied embeddings) models of peft_check.py:

  1. PEFT creates an adapter (DoRA: B and the magnitudes randomised; PiSSA: its SVD init, then A
     and B moved), saves it (PiSSA: also converted to a rank-2r LoRA with
     path_initial_model_for_weight_conversion, as LLaMA-Factory's pissa_convert does); unillm
     loads each dir onto the original base and its logits must match PEFT's (<= 1e-5).
  2. unillm creates an adapter with the same config and trains it a few SGD steps (B != 0,
     m != ||W||), saves it (PiSSA: plus pissa_init/ and pissa_converted/); PEFT loads each and its
     logits and merge_and_unload()'s must match unillm's (<= 1e-5); unillm's full-SVD PiSSA init
     must equal PEFT's (s*B0*A0, which is free of the singular vectors' signs).

Run by ctest (label `reference`) as
  .venv-ref/bin/python tests/reference/lora_variants_check.py --out DIR --unillm BUILD/tests/reference/lora_variants_parity
Exit status 1 when any comparison fails.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peft_check as pc  # noqa: E402  (base models, logits and f32 files, shared)
import torch  # noqa: E402

ATOL = 1e-5
# name -> (kind, base model, targets as given to PEFT, r, lora_alpha, use_rslora, seed, unillm's
# init_lora_weights). PEFT's own PiSSA adapters use the full SVD ("pissa"): its "pissa_niter_<n>"
# draws from torch's RNG, so only the converted form of such an adapter is reproducible.
CASES = {
    "dora_llama_qv": ("dora", "llama", ["q_proj", "v_proj"], 4, 8, False, 501, ""),
    "dora_llama_all_rslora": ("dora", "llama", "all-linear", 4, 16, True, 502, ""),
    "dora_qwen2_all": ("dora", "qwen2", pc.ALL, 4, 8, False, 503, ""),
    "pissa_llama_qv": ("pissa", "llama", ["q_proj", "v_proj"], 4, 8, False, 504, "pissa"),
    "pissa_niter_qwen2_all_rslora": ("pissa", "qwen2", pc.ALL, 4, 8, True, 505, "pissa_niter_4"),
}


def peft_config(name):
    import peft
    kind, _, targets, r, alpha, rslora, _, _ = CASES[name]
    return peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0,
                           use_rslora=rslora, use_dora=kind == "dora",
                           init_lora_weights="pissa" if kind == "pissa" else True,
                           task_type="CAUSAL_LM")


def exact_pissa_logits(pm, model_dir):
    """pm's logits with each PiSSA residual rebuilt from a float64 SVD of the original weight.
    PEFT decomposes in float32 (torch.linalg.svd), which moves its residual by ~1e-6 and the
    logits by ~1e-5: that is the reference's own noise, measured here as |PEFT - exact|."""
    orig = dict(pc.load_base(model_dir).named_parameters())
    with torch.no_grad():
        for mname, module in pm.named_modules():
            if not hasattr(module, "lora_A") or "default" not in module.lora_A:
                continue
            r = module.r["default"]
            w = orig[mname[len("base_model.model."):] + ".weight"].double()
            u, sv, vh = torch.linalg.svd(w, full_matrices=False)
            module.get_base_layer().weight.copy_((w - (u[:, :r] * sv[:r]) @ vh[:r]).float())
    return pc.logits_of(pm)


def make_peft_case(out, name, model_dir):
    import peft
    kind, _, targets, r, alpha, rslora, seed, unillm_init = CASES[name]
    torch.manual_seed(seed)
    pm = peft.get_peft_model(pc.load_base(model_dir), peft_config(name))
    cdir = os.path.join(out, name)
    os.makedirs(cdir, exist_ok=True)
    case = {"name": name, "kind": kind, "model_dir": os.path.relpath(model_dir, out),
            "peft_adapter": os.path.join(name, "peft_adapter"),
            "peft_logits": os.path.join(name, "peft_logits.f32"), "prompt_ids": pc.PROMPT,
            "targets": "all" if targets == "all-linear" else targets, "r": r, "lora_alpha": alpha,
            "use_rslora": rslora, "seed": seed, "unillm_init": unillm_init, "atol": ATOL}
    if kind == "pissa":  # LLaMA-Factory's PissaConvertCallback: the initial adapter, as init True
        pm.peft_config["default"].init_lora_weights = True
        pm.save_pretrained(os.path.join(cdir, "peft_init"))
        pm.peft_config["default"].init_lora_weights = "pissa"
    with torch.no_grad():  # stands for training: every trained tensor moves
        for pname, p in pm.named_parameters():
            if kind == "dora" and "lora_B" in pname:
                p.normal_(0.0, 0.1)
            elif kind == "dora" and "lora_magnitude_vector" in pname:
                p.mul_(1.0 + 0.2 * torch.randn_like(p))
            elif kind == "pissa" and ("lora_A" in pname or "lora_B" in pname):
                p.add_(0.05 * torch.randn_like(p))
    pm.eval()
    pm.save_pretrained(os.path.join(cdir, "peft_adapter"))
    if kind == "pissa":
        pm.save_pretrained(os.path.join(cdir, "peft_converted"),
                           path_initial_model_for_weight_conversion=os.path.join(cdir, "peft_init"))
        case["peft_converted"] = os.path.join(name, "peft_converted")
    theirs = pc.logits_of(pm)
    pc.write_f32(os.path.join(cdir, "peft_logits.f32"), theirs)
    case["peft_noise"] = 0.0
    if kind == "pissa":  # PEFT's float32 SVD noise, added to the tolerance for its pissa adapter
        exact = exact_pissa_logits(pm, model_dir)
        case["peft_noise"] = float((theirs - exact).abs().max())
        pc.write_f32(os.path.join(cdir, "exact_logits.f32"), exact)
        case["exact_logits"] = os.path.join(name, "exact_logits.f32")
    return case


def trained(pm):
    """(max |B|, max |m - ||W + sBA|| |) over the DoRA layers: both > 0 once trained."""
    b_max, m_off = 0.0, 0.0
    for module in pm.modules():
        if not hasattr(module, "lora_magnitude_vector") or "default" not in module.lora_magnitude_vector:
            continue
        dora = module.lora_magnitude_vector["default"]
        a, b = module.lora_A["default"].weight, module.lora_B["default"].weight
        norm = dora.get_weight_norm(module.get_base_layer().weight, b @ a, module.scaling["default"])
        b_max = max(b_max, float(b.abs().max()))
        m_off = max(m_off, float((dora.weight - norm).abs().max()))
    return b_max, m_off


def compare_in_peft(out, case, adapter_dir, what, extra="", is_pissa=False):
    """PEFT loads adapter_dir onto the base: (ok, text) for its logits and merge_and_unload's."""
    import peft
    cdir = os.path.join(out, case["name"])
    pm = peft.PeftModel.from_pretrained(pc.load_base(os.path.join(out, case["model_dir"])), adapter_dir)
    pm.eval()
    theirs = pc.logits_of(pm)
    ours = pc.read_f32(os.path.join(cdir, "unillm_logits.f32"), theirs.shape)
    d = float((theirs - ours).abs().max())
    merged = pc.logits_of(pm.merge_and_unload())
    ours_m = pc.read_f32(os.path.join(cdir, "unillm_merged_logits.f32"), merged.shape)
    dm = float((merged - ours_m).abs().max())
    noise = 0.0
    if is_pissa:  # PEFT rebuilt the residual with its float32 SVD: measure that noise
        pm2 = peft.PeftModel.from_pretrained(pc.load_base(os.path.join(out, case["model_dir"])),
                                             adapter_dir)
        exact = exact_pissa_logits(pm2.eval(), os.path.join(out, case["model_dir"]))
        noise = float((theirs - exact).abs().max())
        d_exact = float((ours - exact).abs().max())
        extra += f"; vs the float64-SVD residual {d_exact:.2e} (PEFT's own float32 noise {noise:.2e})"
        if d_exact > ATOL:
            noise = -1.0  # fails below
    ok = noise >= 0 and d <= ATOL + noise and dm <= ATOL + noise
    print(f"[{'ok' if ok else 'FAIL'}] {case['name']:22s} unillm-trained {what} in PEFT: logits "
          f"max |d| {d:.2e}, merge_and_unload vs unillm merged {dm:.2e}{extra}")
    return ok


def check_pissa_init(out, case):
    """unillm's initial PiSSA adapter (full SVD) vs PEFT's own init on the same base: s·B0·A0 per
    module (sign-free) within 1e-5."""
    import peft
    from safetensors.torch import load_file
    torch.manual_seed(0)
    pm = peft.get_peft_model(pc.load_base(os.path.join(out, case["model_dir"])),
                             peft_config(case["name"]))
    ours = load_file(os.path.join(out, case["name"], "unillm_adapter", "pissa_init",
                                  "adapter_model.safetensors"))
    worst, count = 0.0, 0
    for mname, module in pm.named_modules():
        if not hasattr(module, "lora_A") or "default" not in module.lora_A:
            continue
        key = mname  # PEFT saves base_model.model.<module>.lora_A.weight
        s = module.scaling["default"]
        theirs = s * module.lora_B["default"].weight @ module.lora_A["default"].weight
        mine = s * ours[key + ".lora_B.weight"] @ ours[key + ".lora_A.weight"]
        worst = max(worst, float((theirs - mine).abs().max()))
        count += 1
    ok = count > 0 and worst <= ATOL
    print(f"[{'ok' if ok else 'FAIL'}] {case['name']:22s} unillm's PiSSA init vs PEFT's: "
          f"max |s·B0·A0 - PEFT's| {worst:.2e} over {count} modules")
    return ok


def check_unillm_adapter(out, case):
    adapter = os.path.join(out, case["name"], "unillm_adapter")
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        config = json.load(f)
    if case["kind"] == "dora":
        import peft
        pm = peft.PeftModel.from_pretrained(pc.load_base(os.path.join(out, case["model_dir"])), adapter)
        b_max, m_off = trained(pm)
        ok = config["use_dora"] is True and b_max > 1e-3 and m_off > 1e-5
        extra = f" (max |B| {b_max:.3f}, max |m - norm| {m_off:.2e})"
        return compare_in_peft(out, case, adapter, "DoRA adapter", extra) and ok
    ok = config["init_lora_weights"] == case["unillm_init"]
    conv = os.path.join(adapter, "pissa_converted")
    ok = compare_in_peft(out, case, conv, "PiSSA, converted (r 2x)") and ok
    if case["unillm_init"] == "pissa":  # PEFT re-runs the full SVD on loading
        ok = compare_in_peft(out, case, adapter, "PiSSA adapter", is_pissa=True) and ok
        ok = check_pissa_init(out, case) and ok
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="work directory (created)")
    ap.add_argument("--unillm", required=True, help="the lora_variants_parity binary")
    args = ap.parse_args()
    import peft
    print(f"torch {torch.__version__}, peft {peft.__version__}")
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    bases = {k: pc.make_base(args.out, k, s) for k, s in (("llama", 21), ("qwen2", 22))}
    cases = [make_peft_case(args.out, n, bases[CASES[n][1]]) for n in CASES]
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=2)
    rc = subprocess.run([args.unillm, args.out]).returncode
    sys.stdout.flush()
    ok = rc == 0
    if rc in (0, 1):  # 1: a comparison failed, but the files for the other direction exist
        for case in cases:
            ok = check_unillm_adapter(args.out, case) and ok
    print("lora_variants_check: " + ("all comparisons within 1e-5" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
