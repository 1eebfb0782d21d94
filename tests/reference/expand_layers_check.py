"""`unillm expand-layers` against LLaMA-Factory's scripts/llama_pro.py and transformers.

    expand_layers_check.py --unillm build/unillm [--work DIR]

Expands the bundled stories260K (5 layers) by 5 and by 1. The reference is llama_pro.py's
block_expansion restated on the state dict transformers loads (its loop over layers: copy, and
after each group's last layer a copy with o_proj / down_proj zeroed, renumbered; config's
num_hidden_layers += num_expand). Checks: unillm's tensors equal the reference's name for name
and bit for bit; transformers loads the expanded dir; its logits equal the original model's
exactly (the added layers are identities).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "assets", "stories260K")
FAILURES = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def reference_expansion(state_dict, num_layers, num_expand):
    """llama_pro.py's block_expansion loop (its state_dict lacks lm_head when tied)."""
    def change_name(name, old, new):
        return name.replace(f".{old:d}.", f".{new:d}.")

    split = num_layers // num_expand
    out, cnt = {}, 0
    for i in range(num_layers):
        for key, value in state_dict.items():
            if f".{i:d}." in key:
                out[change_name(key, i, cnt)] = value
        cnt += 1
        if (i + 1) % split == 0:
            for key, value in state_dict.items():
                if f".{i:d}." in key:
                    zero = "down_proj" in key or "o_proj" in key
                    out[change_name(key, i, cnt)] = torch.zeros_like(value) if zero else torch.clone(value)
            cnt += 1
    for key, value in state_dict.items():
        if key not in out:
            out[key] = value
    return out


def logits(model_dir, ids):
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0], model


def check(unillm, num_expand, work):
    out_dir = os.path.join(work, f"pro{num_expand}")
    subprocess.run([unillm, "expand-layers", "--model", MODEL, "--output", out_dir, "--num-expand",
                    str(num_expand), "--force"], check=True, stdout=subprocess.DEVNULL)
    cfg = AutoConfig.from_pretrained(MODEL)
    n = cfg.num_hidden_layers
    ids = [1, 403, 407, 261, 378, 288, 263, 339, 281, 1, 75, 300]
    base, base_model = logits(MODEL, ids)
    state = base_model.state_dict()
    if getattr(base_model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # llama_pro.py: `del model.lm_head` for safetensors
    ref = reference_expansion(state, n, num_expand)
    got = safetensors_py.load_dir(out_dir)
    expect(sorted(got) == sorted(ref), f"expand {num_expand}: tensor names match llama_pro.py's ({len(ref)})")
    same = all(k in got and got[k].shape == ref[k].shape and torch.equal(got[k], ref[k]) for k in ref)
    expect(same, f"expand {num_expand}: every tensor equals llama_pro.py's bit for bit")
    with open(os.path.join(out_dir, "config.json")) as f:
        layers = json.load(f)["num_hidden_layers"]
    expect(layers == n + num_expand, f"expand {num_expand}: num_hidden_layers {layers} == {n + num_expand}")
    expanded, model = logits(out_dir, ids)
    expect(model.config.num_hidden_layers == n + num_expand, f"expand {num_expand}: transformers loads the dir")
    diff = (expanded - base).abs().max().item()
    expect(diff == 0.0, f"expand {num_expand}: transformers' logits equal the original's (max diff {diff})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unillm", required=True)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="expand_layers_check_")
    os.makedirs(work, exist_ok=True)
    for num_expand in (5, 1):
        check(args.unillm, num_expand, work)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all expand-layers checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
