"""Cross-checks unillm's vocabulary growth (resize_vocab, template stop words added as special
tokens) and PEFT modules_to_save against transformers 4.46 and PEFT 0.13, on the bundled
stories260K model (Llama 2 tokenizer, tied embeddings) with the chatml template:

  1. `unillm train` (full, template chatml, resize_vocab, add_tokens [NEW]): the saved tokenizer
     loads in transformers with [NEW] = 512, <|im_end|> = 513 (the EOS), <|im_start|> = 514,
     encodes texts to the ids `unillm tokenize` gives, and the saved model (vocab 576 = 515 padded
     to 64) gives the NLL `unillm eval ppl` gives (<= 1e-5).
  2. `unillm train` (lora, resize_vocab): adapter_config.json lists modules_to_save
     [embed_tokens, lm_head]; PEFT loads the adapter on the resized base with the same NLL.
  3. PEFT makes an adapter with modules_to_save (random B, perturbed embed_tokens/lm_head copies);
     `unillm eval ppl --adapter` on the 512-row base gives PEFT's NLL.
  4. `unillm train` (lora, additional_target: norm): PEFT loads it (norms as modules_to_save, the
     grown embedding as save_embedding_layers stores it) with the same NLL.
  5. `unillm train` (split_special_tokens: true): the saved tokenizer_config.json says so,
     transformers loads it with split_special_tokens on and encodes the texts (special-token
     strings as text, the non-special [NEW] still split off) to the ids `unillm tokenize
     --parse-special` gives on the saved dir.

  .venv-ref/bin/python tests/reference/vocab_check.py --out DIR --unillm BUILD/unillm
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.path.join(ROOT, "assets", "stories260K")
TOL = 1e-5
TEXTS = ["<|im_start|>user\nOnce upon a time<|im_end|>\n<|im_start|>assistant\nThe cat sat.<|im_end|>",
         "<|im_start|>system\nYou are kind.<|im_end|>\n", "Lily and Tom<|im_end|>played<|im_start|>",
         "a [NEW] b", "x[NEW]y", "[NEW] start<|im_end|>"]
STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
         "One day, she saw a big red ball in the park. She ran to get it and played with her friend Tom.")


def run(unillm, *args):
    r = subprocess.run([unillm, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"unillm {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


def train(unillm, out, name, extra):
    cfg = os.path.join(out, name + ".yaml")
    with open(cfg, "w") as f:
        f.write(f"model_name_or_path: {BASE}\nstage: sft\ndo_train: true\ndataset: alpaca_en_demo\n"
                f"dataset_dir: {ROOT}/data\ntemplate: chatml\nresize_vocab: true\ncutoff_len: 96\n"
                f"max_samples: 16\noutput_dir: {out}/{name}\noverwrite_output_dir: true\n"
                f"per_device_train_batch_size: 4\nlearning_rate: 5.0e-3\nmax_steps: 3\nseed: 5\n{extra}")
    run(unillm, "train", cfg, "--quiet")
    return os.path.join(out, name)


def hf_nll(model, tok):
    ids = tok(STORY, return_tensors="pt").input_ids
    with torch.no_grad():
        return float(model(ids, labels=ids).loss)


def unillm_nll(unillm, story_file, model, adapter=None):
    args = ["eval", "ppl", "--model", model, "--file", story_file, "--json"]
    if adapter:
        args += ["--adapter", adapter]
    return json.loads(run(unillm, *args))["nll"]


def report(ok, what):
    print(f"[{'ok' if ok else 'FAIL'}] {what}")
    return ok


def check_full(unillm, out, story):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d = train(unillm, out, "full", "finetuning_type: full\nadd_tokens: '[NEW]'\n")
    tok = AutoTokenizer.from_pretrained(d)
    ids = [tok.convert_tokens_to_ids(t) for t in ("[NEW]", "<|im_end|>", "<|im_start|>")]
    ok = report(len(tok) == 515 and ids == [512, 513, 514] and tok.eos_token == "<|im_end|>",
                f"saved tokenizer: len {len(tok)}, [NEW] <|im_end|> <|im_start|> = {ids}, eos {tok.eos_token}")
    for t in TEXTS:
        theirs = tok(t, add_special_tokens=False).input_ids
        ours = json.loads(run(unillm, "tokenize", "--model", d, "--text", t, "--parse-special",
                              "--no-special-tokens"))
        ours = ours["ids"] if isinstance(ours, dict) else ours
        ok = report(theirs == ours, f"encode {t!r}: {'same ids' if theirs == ours else f'{theirs} vs {ours}'}") and ok
    model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    ok = report(model.config.vocab_size == 576 and model.get_input_embeddings().weight.shape[0] == 576,
                f"saved model vocab_size {model.config.vocab_size}") and ok
    theirs, ours = hf_nll(model, tok), unillm_nll(unillm, story, d)
    return report(abs(theirs - ours) <= TOL, f"full model NLL transformers {theirs:.7f} unillm {ours:.7f}") and ok


def resized_base(n):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(BASE, torch_dtype=torch.float32)
    m.resize_token_embeddings(n)  # what LLaMA-Factory does before loading the adapter
    return m


def check_lora(unillm, out, story):
    import peft
    from safetensors import safe_open
    from transformers import AutoTokenizer
    d = train(unillm, out, "lora", "finetuning_type: lora\nlora_rank: 4\n")
    cfg = json.load(open(os.path.join(d, "adapter_config.json")))
    with safe_open(os.path.join(d, "adapter_model.safetensors"), "pt") as f:
        keys = set(f.keys())
    ok = report(sorted(cfg["modules_to_save"]) == ["embed_tokens", "lm_head"]
                and {"base_model.model.model.embed_tokens.weight", "base_model.model.lm_head.weight"} <= keys,
                f"adapter_config modules_to_save {cfg['modules_to_save']}")
    tok = AutoTokenizer.from_pretrained(d)
    pm = peft.PeftModel.from_pretrained(resized_base(576), d).eval()
    theirs, ours = hf_nll(pm, tok), unillm_nll(unillm, story, BASE, d)
    return report(abs(theirs - ours) <= TOL, f"unillm LoRA + modules_to_save in PEFT: NLL {theirs:.7f} "
                  f"unillm {ours:.7f}") and ok


def check_additional_target(unillm, out, story):
    import peft
    from transformers import AutoTokenizer
    d = train(unillm, out, "norm", "finetuning_type: lora\nlora_rank: 4\nadditional_target: norm\n")
    cfg = json.load(open(os.path.join(d, "adapter_config.json")))
    tok = AutoTokenizer.from_pretrained(d)
    pm = peft.PeftModel.from_pretrained(resized_base(576), d).eval()
    theirs, ours = hf_nll(pm, tok), unillm_nll(unillm, story, BASE, d)
    return report(cfg["modules_to_save"] == ["norm"] and abs(theirs - ours) <= TOL,
                  f"additional_target: norm (+ the grown embeddings PEFT's save_embedding_layers stores) "
                  f"in PEFT: NLL {theirs:.7f} unillm {ours:.7f}")


def check_split_special(unillm, out):
    from transformers import AutoTokenizer
    d = train(unillm, out, "split", "finetuning_type: full\nadd_tokens: '[NEW]'\nsplit_special_tokens: true\n")
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    tok = AutoTokenizer.from_pretrained(d)
    ok = report(cfg.get("split_special_tokens") is True and tok.split_special_tokens,
                f"split_special_tokens in the saved config: {cfg.get('split_special_tokens')}, "
                f"transformers: {tok.split_special_tokens}")
    for t in TEXTS + ["Lily</s>Tom<s>"]:
        theirs = tok(t, add_special_tokens=False).input_ids
        ours = json.loads(run(unillm, "tokenize", "--model", d, "--text", t, "--parse-special",
                              "--no-special-tokens"))
        ours = ours["ids"] if isinstance(ours, dict) else ours
        ok = report(theirs == ours, f"split_special_tokens encode {t!r}: "
                    f"{'same ids' if theirs == ours else f'{theirs} vs {ours}'}") and ok
    return ok


def check_peft_made(unillm, out, story):
    import peft
    from transformers import AutoTokenizer
    torch.manual_seed(7)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                          modules_to_save=["embed_tokens", "lm_head"], task_type="CAUSAL_LM")
    pm = peft.get_peft_model(resized_base(576), cfg)
    with torch.no_grad():
        for name, p in pm.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.1)
            elif "modules_to_save" in name:
                p.add_(0.05 * torch.randn_like(p))
    pm.eval()
    d = os.path.join(out, "peft_made")
    pm.save_pretrained(d)
    tok = AutoTokenizer.from_pretrained(os.path.join(out, "lora"))
    theirs, ours = hf_nll(pm, tok), unillm_nll(unillm, story, BASE, d)
    return report(abs(theirs - ours) <= TOL, f"PEFT-made adapter with modules_to_save in unillm: NLL "
                  f"{theirs:.7f} unillm {ours:.7f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="work directory (created)")
    ap.add_argument("--unillm", required=True, help="the unillm binary")
    args = ap.parse_args()
    import peft
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    story = os.path.join(args.out, "story.txt")
    with open(story, "w") as f:
        f.write(STORY)
    ok = check_full(args.unillm, args.out, story)
    ok = check_lora(args.unillm, args.out, story) and ok
    ok = check_peft_made(args.unillm, args.out, story) and ok
    ok = check_additional_target(args.unillm, args.out, story) and ok
    ok = check_split_special(args.unillm, args.out) and ok
    print("vocab_check: " + ("all comparisons agree" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
