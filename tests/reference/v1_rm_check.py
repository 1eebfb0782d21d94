"""LLaMA-Factory v1's reward model (`stage=rm`, its rm_trainer) as transformers and PEFT load it.

    v1_rm_check.py --unillm build/unillm --scores build/tests/reference/v1_rm_scores [--work DIR]

A tiny random Qwen2 (`unillm init`, an untied lm_head, the bundled Qwen2 tokenizer) trains v1's
reward model for three steps on v1's demo pairs through `unillm train` on the vendored v1 examples
with `stage=rm` (`llamafactory-cli rm`): full fine-tuning and LoRA. v1 trains an
AutoModelForTokenClassification with one label, so:
- full: transformers' AutoModelForTokenClassification loads the output with no missing and no
  unexpected key (the decoder and score.weight / score.bias, no lm_head), one label;
- LoRA: adapter_config.json says task_type TOKEN_CLS with "classifier" and "score" in
  modules_to_save, and PEFT loads the adapter onto AutoModelForTokenClassification of the base
  (its score from the adapter);
- both: transformers' score of each row's last token (what v1's loss reads) equals unillm's
  (v1_rm_scores: the stage's score head on its model) within 1e-4, and the trained head is no
  longer v1's initialisation (N(0, (1/(10 hidden))^2)).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from peft import PeftModel  # noqa: E402
from transformers import AutoConfig, AutoModelForTokenClassification  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
EXAMPLES = os.path.join(ROOT, "tests", "data", "llamafactory_examples", "v1")
FAILURES = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
    return r.stdout


def tiny_qwen2(unillm, work):
    cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
           "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 512,
           "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False,
           "bos_token_id": 151643, "eos_token_id": 151645, "initializer_range": 0.2}
    path = os.path.join(work, "qwen2.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    out = os.path.join(work, "base")
    run([unillm, "init", "--config", path, "--out", out, "--tokenizer",
         os.path.join(ROOT, "tests", "data", "qwen2-tokenizer"), "--force"])
    return out


def rows(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 151000, (n,), generator=g).tolist() for n in (7, 12, 5, 9)]


def last_scores(model, ids_rows):
    out = []
    with torch.no_grad():
        for ids in ids_rows:
            out.append(float(model(torch.tensor([ids])).logits[0, -1, 0]))
    return out


def compare(name, hf_model, unillm_scores_cmd, ids_rows, hidden):
    path = os.path.join(os.path.dirname(unillm_scores_cmd[-1]), f"rows_{name}.json")
    with open(path, "w") as f:
        json.dump(ids_rows, f)
    got = json.loads(run(unillm_scores_cmd[:-1] + [path]))["scores"]
    want = last_scores(hf_model, ids_rows)
    diff = max(abs(a - b) for a, b in zip(got, want))
    expect(diff <= 1e-4, f"{name}: transformers' last-token scores = unillm's (max |d| {diff:.2e}, "
                         f"scores {[round(x, 4) for x in want]})")
    w = hf_model.score.weight if not isinstance(hf_model, PeftModel) else \
        hf_model.base_model.model.score.modules_to_save["default"].weight
    std = float(w.detach().std())
    expect(std > 3 / (10 * hidden), f"{name}: the score head trained (weight std {std:.2e}, "
                                    f"v1's initialisation {1 / (10 * hidden):.2e})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unillm", required=True)
    ap.add_argument("--scores", required=True)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="v1_rm_check_"))
    shutil.rmtree(work, ignore_errors=True)  # a previous run's outputs
    os.makedirs(work)
    base = tiny_qwen2(args.unillm, work)
    common = [f"model={base}", "stage=rm", f"train_dataset={os.path.join(ROOT, 'data', 'v1_dpo_demo.jsonl')}",
              "max_steps=3", "cutoff_len=256", "bf16=false", "global_batch_size=2", "learning_rate=5e-3",
              "--quiet"]
    full, lora = os.path.join(work, "full"), os.path.join(work, "lora")
    run([args.unillm, "train", os.path.join(EXAMPLES, "train_full", "train_full_fsdp2.yaml"),
         f"output_dir={full}"] + common)
    run([args.unillm, "train", os.path.join(EXAMPLES, "train_lora", "train_lora_sft.yaml"),
         f"output_dir={lora}", "peft_config.lora_dropout=0"] + common)
    ids_rows = rows(7)

    model, info = AutoModelForTokenClassification.from_pretrained(full, torch_dtype=torch.float32,
                                                                  output_loading_info=True)
    model.eval()
    expect(not info["missing_keys"] and not info["unexpected_keys"],
           f"full: AutoModelForTokenClassification loads it whole (missing {info['missing_keys']}, "
           f"unexpected {info['unexpected_keys']})")
    expect(type(model).__name__ == "Qwen2ForTokenClassification" and model.config.num_labels == 1,
           f"full: {type(model).__name__} with {model.config.num_labels} label(s)")
    compare("full", model, [args.scores, full, os.path.join(work, "x")], ids_rows, 64)

    with open(os.path.join(lora, "adapter_config.json")) as f:
        cfg = json.load(f)
    expect(cfg["task_type"] == "TOKEN_CLS" and {"classifier", "score"} <= set(cfg["modules_to_save"] or []),
           f"LoRA: task_type {cfg['task_type']}, modules_to_save {cfg['modules_to_save']}")
    tc_config = AutoConfig.from_pretrained(base, num_labels=1)  # as v1's ModelEngine sets it
    tc_config.classifier_dropout = 0.0
    base_tc = AutoModelForTokenClassification.from_pretrained(base, config=tc_config, torch_dtype=torch.float32)
    peft = PeftModel.from_pretrained(base_tc, lora).eval()
    compare("lora", peft, [args.scores, base, "--adapter", lora, os.path.join(work, "x")], ids_rows, 64)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all v1 reward-model checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
