"""Cross-checks unillm's LoRA adapters against Hugging Face PEFT, both directions, on tiny random
llama (GQA), qwen2 (qkv bias, tied embeddings) and qwen2_moe (experts, routers, a shared expert)
models made with transformers:

  1. PEFT creates an adapter (its own init, then B randomised so it matters), saves it with
     save_pretrained; unillm loads that dir and its logits must match PEFT's (<= 1e-4).
  2. unillm creates an adapter (same config), saves it; PEFT's PeftModel.from_pretrained loads it
     and its logits must match unillm's, and so must PEFT's merge_and_unload() logits match
     unillm's merged model (<= 1e-4).

Needs the reference venv (scripts/setup-reference-venv.sh: transformers, peft, accelerate pinned
by tests/reference/constraints.txt over Debian's torch). Run by ctest (label `reference`) as

  .venv-ref/bin/python tests/reference/peft_check.py --out DIR --unillm BUILD/tests/reference/lora_peft_parity
Exit status 1 when any comparison fails.
"""
import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

ATOL = 1e-4
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# name -> (base model, targets as given to PEFT, r, lora_alpha, use_rslora, seed)
CASES = {
    "llama_qv": ("llama", ["q_proj", "v_proj"], 4, 8, False, 401),
    "llama_all_rslora": ("llama", "all-linear", 4, 16, True, 402),
    "qwen2_all": ("qwen2", ALL, 4, 8, False, 403),
    # PEFT's all-linear on a mixture of experts: every expert, the shared expert and both routers.
    "qwen2_moe_all": ("qwen2_moe", "all-linear", 4, 8, False, 404),
}
PROMPT = [1, 17, 5, 93, 44, 12, 7, 101, 66, 3, 29, 58]


def base_config(kind):
    import transformers
    common = dict(num_hidden_layers=2, intermediate_size=88, max_position_embeddings=256,
                  rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, torch_dtype="float32")
    if kind == "llama":
        return transformers.LlamaConfig(hidden_size=64, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=16, vocab_size=128,
                                        tie_word_embeddings=False, **common)
    if kind == "qwen2_moe":
        return transformers.Qwen2MoeConfig(hidden_size=48, num_attention_heads=6, num_key_value_heads=2,
                                           vocab_size=131, tie_word_embeddings=False,
                                           num_experts=4, num_experts_per_tok=2, moe_intermediate_size=20,
                                           shared_expert_intermediate_size=40, norm_topk_prob=False,
                                           decoder_sparse_step=1, use_sliding_window=False, **common)
    return transformers.Qwen2Config(hidden_size=48, num_attention_heads=6, num_key_value_heads=2,
                                    vocab_size=131, tie_word_embeddings=True,
                                    use_sliding_window=False, **common)


def make_base(out, kind, seed):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(base_config(kind))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if "norm" in name else 0.1 * torch.randn_like(p))
    d = os.path.join(out, "base_" + kind)
    model.save_pretrained(d, safe_serialization=True)
    return d


def load_base(model_dir):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                             attn_implementation="eager")
    return m.eval()


def logits_of(model):
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0].to(torch.float32)


def write_f32(path, t):
    t.contiguous().numpy().astype("<f4").tofile(path)


def read_f32(path, shape):
    import numpy
    return torch.from_numpy(numpy.fromfile(path, dtype="<f4").reshape(shape))


def make_peft_case(out, name, model_dir):
    import peft
    kind, targets, r, alpha, rslora, seed = CASES[name]
    torch.manual_seed(seed)
    cfg = peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0,
                          use_rslora=rslora, task_type="CAUSAL_LM")
    pm = peft.get_peft_model(load_base(model_dir), cfg)
    with torch.no_grad():
        for pname, p in pm.named_parameters():
            if "lora_B" in pname:
                p.normal_(0.0, 0.1)
    pm.eval()
    cdir = os.path.join(out, name)
    os.makedirs(cdir, exist_ok=True)
    pm.save_pretrained(os.path.join(cdir, "peft_adapter"))
    write_f32(os.path.join(cdir, "peft_logits.f32"), logits_of(pm))
    return {"name": name, "model_dir": os.path.relpath(model_dir, out),
            "peft_adapter": os.path.join(name, "peft_adapter"),
            "peft_logits": os.path.join(name, "peft_logits.f32"), "prompt_ids": PROMPT,
            "targets": "all" if targets == "all-linear" else targets, "r": r, "lora_alpha": alpha,
            "use_rslora": rslora, "seed": seed, "atol": ATOL}


def check_unillm_adapter(out, case):
    import peft
    cdir = os.path.join(out, case["name"])
    model_dir = os.path.join(out, case["model_dir"])
    pm = peft.PeftModel.from_pretrained(load_base(model_dir), os.path.join(cdir, "unillm_adapter"))
    pm.eval()
    theirs = logits_of(pm)
    ours = read_f32(os.path.join(cdir, "unillm_logits.f32"), theirs.shape)
    d = float((theirs - ours).abs().max())
    merged = logits_of(pm.merge_and_unload())
    ours_m = read_f32(os.path.join(cdir, "unillm_merged_logits.f32"), merged.shape)
    dm = float((merged - ours_m).abs().max())
    base = logits_of(load_base(model_dir))
    effect = float((theirs - base).abs().max())
    ok = d <= ATOL and dm <= ATOL and effect > 1e-2
    print(f"[{'ok' if ok else 'FAIL'}] {case['name']:18s} unillm-saved adapter in PEFT: logits "
          f"max |d| {d:.2e}, merge_and_unload vs unillm merged {dm:.2e} (adapter effect "
          f"{effect:.3f})")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="work directory (created)")
    ap.add_argument("--unillm", required=True, help="the lora_peft_parity binary")
    args = ap.parse_args()
    import peft
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"peft {peft.__version__}")
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    bases = {k: make_base(args.out, k, s) for k, s in (("llama", 11), ("qwen2", 12), ("qwen2_moe", 13))}
    cases = [make_peft_case(args.out, n, bases[CASES[n][0]]) for n in CASES]
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=2)
    rc = subprocess.run([args.unillm, args.out]).returncode
    sys.stdout.flush()
    ok = rc == 0
    if rc in (0, 1):  # 1: a comparison failed, but the files for the other direction exist
        for case in cases:
            ok = check_unillm_adapter(args.out, case) and ok
    print("peft_check: " + ("all comparisons within 1e-4" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
