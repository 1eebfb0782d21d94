"""LLaMA-Pro with LoRA (use_llama_pro, finetuning_type: lora) against LLaMA-Factory's rule and PEFT.

    llama_pro_lora_check.py --unillm build/unillm [--work DIR]

The bundled stories260K (5 layers) is expanded by 5 (`unillm expand-layers`: 10 layers, the new
ones 1, 3, 5, 7, 9) and a LoRA adapter trained on it for three steps with use_llama_pro and
freeze_trainable_layers 5, lora_target all. The reference for which modules get the adapter is
LLaMA-Factory's own code restated on transformers' model: find_all_linear_modules (every Linear's
last name but lm_head) then find_expanded_modules (module names holding a target and ".{i}." for
i = stride − 1, 2·stride − 1, …), handed to PEFT's get_peft_model: unillm's adapter must hold
exactly PEFT's tensor names and list the same target_modules. PEFT then loads unillm's adapter onto
the expanded model, and its logits must equal those of `unillm export` (the adapter merged) as
transformers computes them (1e-4, as peft_check.py), while differing from the base model's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODEL = os.path.join(ROOT, "assets", "stories260K")
PROMPT = [1, 403, 407, 261, 378, 288, 263, 339, 281, 2, 17, 99]
TRAINABLE = 5
FAILURES = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def load(model_dir):
    m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    return m.eval()


def find_all_linear_modules(model):  # LLaMA-Factory's model_utils/misc.py, text models
    names = set()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and "lm_head" not in name:
            names.add(name.split(".")[-1])
    return list(names)


def find_expanded_modules(model, targets, num_layer_trainable):  # LLaMA-Factory's rule
    num_layers = model.config.num_hidden_layers
    stride = num_layers // num_layer_trainable
    layers = [f".{i:d}." for i in range(stride - 1, num_layers + stride - 1, stride)]
    return [name for name, _ in model.named_modules()
            if any(t in name for t in targets) and any(layer in name for layer in layers)]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unillm", required=True)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="llama_pro_lora_check_")
    os.makedirs(work, exist_ok=True)
    pro, adapter, merged = (os.path.join(work, d) for d in ("pro", "adapter", "merged"))
    run([args.unillm, "expand-layers", "--model", MODEL, "--output", pro, "--num-expand", "5", "--force"])
    cfg = os.path.join(work, "train.yaml")
    with open(cfg, "w") as f:
        f.write(f"model_name_or_path: {pro}\nstage: pt\ndo_train: true\nfinetuning_type: lora\n"
                f"lora_target: all\nlora_rank: 4\nuse_llama_pro: true\nfreeze_trainable_layers: {TRAINABLE}\n"
                f"dataset: tinyshakespeare\ndataset_dir: {os.path.join(ROOT, 'data')}\ncutoff_len: 64\n"
                f"max_samples: 64\nper_device_train_batch_size: 4\nlearning_rate: 5.0e-3\nmax_steps: 3\n"
                f"save_strategy: \"no\"\noverwrite_output_dir: true\noutput_dir: {adapter}\n")
    run([args.unillm, "train", cfg, "--quiet"])
    exp = os.path.join(work, "export.yaml")
    with open(exp, "w") as f:
        f.write(f"model_name_or_path: {pro}\nadapter_name_or_path: {adapter}\nfinetuning_type: lora\n"
                f"export_dir: {merged}\n")
    run([args.unillm, "export", exp])

    base = load(pro)
    targets = find_expanded_modules(base, find_all_linear_modules(base), TRAINABLE)
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        saved = json.load(f)
    expect(sorted(saved["target_modules"]) == sorted(targets),
           f"target_modules: the {len(targets)} modules LLaMA-Factory's find_expanded_modules gives")
    ref = get_peft_model(load(pro), LoraConfig(r=4, lora_alpha=8, target_modules=targets))
    want = sorted(k.replace(".default", "") for k in ref.state_dict() if "lora_" in k)
    got, _ = safetensors_py.load_file(os.path.join(adapter, "adapter_model.safetensors"))
    expect(sorted(got) == want, f"adapter tensors: PEFT's names for that config ({len(want)})")
    layers = sorted({int(k.split(".layers.")[1].split(".")[0]) for k in got})
    expect(layers == [1, 3, 5, 7, 9], f"adapted layers {layers} are the expanded ones")

    peft = PeftModel.from_pretrained(load(pro), adapter).eval()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        a = peft(ids).logits[0]
        b = load(merged)(ids).logits[0]
        c = base(ids).logits[0]
    diff = (a - b).abs().max().item()
    expect(diff <= 1e-4, f"PEFT loading unillm's adapter = unillm's merged export (max diff {diff:.2e})")
    moved = (a - c).abs().max().item()
    expect(moved > 1e-4, f"the trained adapter changes the logits (max {moved:.2e})")
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all LLaMA-Pro LoRA checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
