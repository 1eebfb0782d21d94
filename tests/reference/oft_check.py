"""Cross-checks unillm's OFT adapters (finetuning_type: oft) against Hugging Face PEFT 0.17.1's
OFT (the Cayley-Neumann form with oft_block_size), both directions, on the tiny random llama
(GQA) and qwen2 (qkv bias, tied embeddings) models of peft_check.py:

  1. PEFT creates an OFT adapter with random oft_R weights (init_weights=False), saves it; unillm
     loads it onto the original base: its logits, and its merged model's, must match PEFT's
     (<= 1e-5).
  2. unillm creates an OFT adapter with the same config and trains it a few SGD steps, saves it;
     PEFT loads it and its logits and merge_and_unload()'s must match unillm's (<= 1e-5), and the
     saved tensors must have PEFT's names and shapes.

The cases cover oft_block_size and r, the exact Cayley transform, another number of Neumann terms,
a fused q/k/v subset and block sizes PEFT adjusts (48 and 88 inputs with oft_block_size 32).

PEFT 0.17.1 is not the reference venv's peft (0.13.2, which other checks need): it lives in
<venv>/peft017 (pip install --no-deps --target, scripts/setup-reference-venv.sh) and is put first
on sys.path here. Run by ctest (label `reference`) as
  .venv-ref/bin/python tests/reference/oft_check.py --out DIR --unillm BUILD/tests/reference/oft_parity
Exit status 1 when any comparison fails.
"""
import argparse
import json
import os
import subprocess
import sys

PEFT017 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(sys.executable))), "peft017")
sys.path.insert(0, PEFT017)
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))
import peft_check as pc  # noqa: E402  (base models, logits and f32 files, shared)
import torch  # noqa: E402

ATOL = 1e-5
# name -> (base model, targets as given to PEFT, r, oft_block_size, use_cayley_neumann,
# num_cayley_neumann_terms, seed, unillm's SGD learning rate)
CASES = {
    "oft_llama_qv_b16": ("llama", ["q_proj", "v_proj"], 0, 16, True, 5, 601, 0.5),
    "oft_llama_all_r4": ("llama", "all-linear", 4, 0, True, 5, 602, 0.5),
    "oft_llama_kv_cayley_b8": ("llama", ["k_proj", "v_proj", "down_proj"], 0, 8, False, 5, 603, 0.5),
    "oft_qwen2_all_b32_adjusted": ("qwen2", pc.ALL, 0, 32, True, 3, 604, 0.5),
}


def peft_config(name, init_weights=True):
    import peft
    _, targets, r, block, neumann, terms, _, _ = CASES[name]
    return peft.OFTConfig(r=r, oft_block_size=block, target_modules=targets, module_dropout=0.0,
                          use_cayley_neumann=neumann, num_cayley_neumann_terms=terms,
                          init_weights=init_weights, task_type="CAUSAL_LM")


def make_peft_case(out, name, model_dir):
    import peft
    _, targets, r, block, neumann, terms, seed, lr = CASES[name]
    torch.manual_seed(seed)
    pm = peft.get_peft_model(pc.load_base(model_dir), peft_config(name, init_weights=False))
    pm.eval()
    cdir = os.path.join(out, name)
    os.makedirs(cdir, exist_ok=True)
    pm.save_pretrained(os.path.join(cdir, "peft_adapter"))
    pc.write_f32(os.path.join(cdir, "peft_logits.f32"), pc.logits_of(pm))
    return {"name": name, "model_dir": os.path.relpath(model_dir, out),
            "peft_adapter": os.path.join(name, "peft_adapter"),
            "peft_logits": os.path.join(name, "peft_logits.f32"), "prompt_ids": pc.PROMPT,
            "targets": "all" if targets == "all-linear" else targets, "r": r,
            "oft_block_size": block, "use_cayley_neumann": neumann,
            "num_cayley_neumann_terms": terms, "lr": lr, "atol": ATOL}


def check_unillm_adapter(out, case):
    """PEFT loads unillm's adapter: same tensor names and shapes as PEFT's own, logits and
    merge_and_unload's within ATOL."""
    import peft
    from safetensors.torch import load_file
    cdir = os.path.join(out, case["name"])
    adapter = os.path.join(cdir, "unillm_adapter")
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        config = json.load(f)
    ours = {k: v.shape for k, v in load_file(os.path.join(adapter, "adapter_model.safetensors")).items()}
    theirs = {k: v.shape for k, v in
              load_file(os.path.join(out, case["peft_adapter"], "adapter_model.safetensors")).items()}
    same_layout = ours == theirs and config["peft_type"] == "OFT"
    pm = peft.PeftModel.from_pretrained(pc.load_base(os.path.join(out, case["model_dir"])), adapter)
    pm.eval()
    got = pc.logits_of(pm)
    mine = pc.read_f32(os.path.join(cdir, "unillm_logits.f32"), got.shape)
    d = float((got - mine).abs().max())
    merged = pc.logits_of(pm.merge_and_unload())
    mine_m = pc.read_f32(os.path.join(cdir, "unillm_merged_logits.f32"), merged.shape)
    dm = float((merged - mine_m).abs().max())
    ok = same_layout and d <= ATOL and dm <= ATOL
    print(f"[{'ok' if ok else 'FAIL'}] {case['name']:26s} unillm-trained OFT adapter in PEFT: logits "
          f"max |d| {d:.2e}, merge_and_unload vs unillm merged {dm:.2e}, "
          f"{len(ours)} tensors {'as PEFT names and shapes them' if same_layout else 'DIFFER from PEFT'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="work directory (created)")
    ap.add_argument("--unillm", required=True, help="the oft_parity binary")
    args = ap.parse_args()
    import peft
    if peft.__version__ != "0.17.1":
        print(f"oft_check: needs peft 0.17.1 in {PEFT017} (scripts/setup-reference-venv.sh), "
              f"found {peft.__version__} at {peft.__file__}")
        return 1
    print(f"torch {torch.__version__}, peft {peft.__version__}")
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    bases = {k: pc.make_base(args.out, k, s) for k, s in (("llama", 31), ("qwen2", 32))}
    cases = [make_peft_case(args.out, n, bases[CASES[n][0]]) for n in CASES]
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=2)
    rc = subprocess.run([args.unillm, args.out]).returncode
    sys.stdout.flush()
    ok = rc == 0
    if rc in (0, 1):  # 1: a comparison failed, but the files for the other direction exist
        for case in cases:
            ok = check_unillm_adapter(args.out, case) and ok
    print("oft_check: " + ("all comparisons within 1e-5" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
