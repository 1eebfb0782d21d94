"""Cross-checks unillm's init_special_tokens desc_init / desc_init_w_noise against a torch
re-statement of LLaMA-Factory's _description_based_initialization (model_utils/embedding.py @
ff6d4d1), with transformers 4.46 reading unillm's output, on the bundled stories260K model (Llama 2
tokenizer, tied embeddings) and LLaMA-Factory's vendored extras/multi_tokens/tokens_cfg.yaml:

  `unillm train` (full, learning_rate 0, so the saved weights are the initialised ones) with
  new_special_tokens_config tokens_cfg.yaml; transformers loads the saved tokenizer and model.
  desc_init: each new token's row equals the mean of the base embedding rows of its description's
  ids, as transformers tokenizes the description (add_special_tokens=False), new tokens excluded
  (<= 1e-6); the 512 old rows are unchanged. desc_init_w_noise: the rows minus those means have
  LLaMA-Factory's noise scale 1/sqrt(hidden) (within 15 %, 16 x 64 draws).

  .venv-ref/bin/python tests/reference/desc_init_check.py --out DIR --unillm BUILD/unillm
Exit status 1 when any comparison fails.
"""
import argparse
import math
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import yaml  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.path.join(ROOT, "assets", "stories260K")
TOKENS = os.path.join(ROOT, "tests", "data", "llamafactory_examples", "extras", "multi_tokens",
                      "tokens_cfg.yaml")


def train(unillm, out, mode):
    cfg = os.path.join(out, mode + ".yaml")
    with open(cfg, "w") as f:
        f.write(f"model_name_or_path: {BASE}\nstage: sft\ndo_train: true\nfinetuning_type: full\n"
                f"dataset: alpaca_en_demo\ndataset_dir: {ROOT}/data\ntemplate: alpaca\ncutoff_len: 64\n"
                f"max_samples: 4\noutput_dir: {out}/{mode}\noverwrite_output_dir: true\n"
                f"per_device_train_batch_size: 4\nlearning_rate: 0\nmax_steps: 1\nseed: 11\n"
                f"new_special_tokens_config: {TOKENS}\ninit_special_tokens: {mode}\n")
    r = subprocess.run([unillm, "train", cfg, "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"unillm train {cfg} failed:\n{r.stderr}")
    return os.path.join(out, mode)


def description_means(tok, base, descriptions):
    """LLaMA-Factory's rule without noise: {token id: mean of its description's embedding rows}."""
    vocab = base.size(0)
    new_ids = {tok.convert_tokens_to_ids(t) for t in descriptions}
    fallback = base[[i for i in range(vocab) if i not in new_ids]].mean(dim=0)
    out = {}
    for token, desc in descriptions.items():
        ids = tok(desc, add_special_tokens=False)["input_ids"]
        valid = [i for i in ids if i not in new_ids and 0 <= i < vocab]
        out[tok.convert_tokens_to_ids(token)] = base[valid].mean(dim=0) if valid else fallback
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--unillm", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(TOKENS) as f:
        descriptions = yaml.safe_load(f)
    base = AutoModelForCausalLM.from_pretrained(BASE).get_input_embeddings().weight.detach().double()
    failures = []
    for mode in ("desc_init", "desc_init_w_noise"):
        out = train(args.unillm, args.out, mode)
        tok = AutoTokenizer.from_pretrained(out)
        got = AutoModelForCausalLM.from_pretrained(out).get_input_embeddings().weight.detach().double()
        if got.size(0) != 576:
            failures.append(f"{mode}: {got.size(0)} rows, expected 576 (512 + 16 padded to 64)")
            continue
        # The grown rows are read through the base rows they average: pad base to the new size.
        grown = torch.cat([base, got[base.size(0):]])
        want = description_means(tok, grown, descriptions)
        if (got[:512] - base).abs().max().item() != 0:
            failures.append(f"{mode}: old rows changed")
        resid = torch.stack([got[i] - m for i, m in want.items()])
        if mode == "desc_init":
            err = resid.abs().max().item()
            print(f"{mode}: {len(want)} rows, max |unillm - mean of description rows| = {err:.2e}")
            if err > 1e-6:
                failures.append(f"{mode}: rows differ from their description means by {err:.2e}")
        else:
            sd, want_sd = resid.std().item(), 1 / math.sqrt(got.size(1))
            print(f"{mode}: noise std {sd:.4f}, LLaMA-Factory's 1/sqrt(hidden) = {want_sd:.4f}")
            if abs(sd / want_sd - 1) > 0.15:
                failures.append(f"{mode}: noise std {sd:.4f}, expected about {want_sd:.4f}")
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
