"""Cross-checks the independent reference (hf_llama_reference.py) against Hugging Face
transformers on every fixture that make_fixtures.py wrote. Not part of CI: it needs the venv of
DEVELOPERS.md (transformers pinned by tests/reference/constraints.txt, torch from Debian).

  .venv/bin/python tests/reference/hf_check.py DIR      # DIR = make_fixtures.py --out
Exit status 1 when a model differs by more than 1e-5 (max |logits difference|; for the
mixture-of-experts fixtures also the router load-balancing loss, relative).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_llama_reference as ref  # noqa: E402
import make_fixtures  # noqa: E402

TOL = 1e-5


def hf_logits(model_dir, ids):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def check_dir(fdir):
    with open(os.path.join(fdir, "meta.json")) as f:
        meta = json.load(f)
    model_dir = os.path.normpath(os.path.join(fdir, meta["model_dir"]))
    ids = meta["prompt_ids"]
    try:
        theirs = hf_logits(model_dir, ids)
    except (ImportError, ValueError, KeyError, RuntimeError, AttributeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, f"skipped: transformers cannot load it ({first[:120]})"
    cfg, state = make_fixtures.load_hf_dir(model_dir)
    ours = ref.ReferenceLM(cfg, state, torch.float32).logits(ids)
    d = float((ours - theirs).abs().max())
    text = f"max |ours - transformers| {d:.2e}"
    ok = d <= TOL
    if "perplexity.json" in os.listdir(fdir):
        text += "; " + check_perplexity(fdir, model_dir)
    if "grad_aux.json" in os.listdir(fdir):
        aux_ok, aux_text = check_aux(fdir, model_dir)
        ok, text = ok and aux_ok, text + "; " + aux_text
    return ok, text


def check_aux(fdir, model_dir):
    """The router load-balancing loss of the grad_aux fixture (train_fixtures.py) against
    transformers' own: output_router_logits with the fixture's coefficient, the padded batch with
    its attention_mask; HF's loss is the token mean + router_aux_loss_coef * aux_loss."""
    from transformers import AutoModelForCausalLM
    with open(os.path.join(fdir, "grad_aux.json")) as f:
        fix = json.load(f)
    coef, batch = fix["router_aux_loss_coef"], fix["batch"]
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float64,
                                                 attn_implementation="eager",
                                                 output_router_logits=True, router_aux_loss_coef=coef)
    ids = torch.tensor(batch["input_ids"])
    mask = torch.zeros_like(ids)
    for r, n in enumerate(batch["row_lengths"]):
        mask[r, :n] = 1
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, labels=torch.tensor(batch["labels"]))
    aux_rel = abs(float(out.aux_loss) - fix["aux_loss"]) / fix["aux_loss"]
    want = fix["loss_sum"] / fix["count"] + coef * fix["aux_loss"]
    loss_rel = abs(float(out.loss) - want) / want
    return max(aux_rel, loss_rel) <= TOL, (f"aux_loss rel diff {aux_rel:.1e}, "
                                           f"loss (tokens + {coef} aux) rel diff {loss_rel:.1e}")


def check_perplexity(fdir, model_dir):
    """Recomputes the stored perplexities with transformers' own loss (the guide's loop)."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                 attn_implementation="eager")

    class Wrap:
        def logits(self, ids):
            with torch.no_grad():
                return model(torch.as_tensor(ids).view(1, -1)).logits[0]

    with open(os.path.join(fdir, "perplexity.json")) as f:
        data = json.load(f)
    out = []
    for run in data["runs"]:
        nll, count = make_fixtures.perplexity_hf_literal(Wrap(), data["ids"], run["max_length"],
                                                         run["stride"])
        out.append(f"ppl(ml={run['max_length']}, stride={run['stride']}) nll rel diff "
                   f"{abs(nll - run['nll']) / run['nll']:.1e}, tokens {count}/{run['tokens']}")
    return "; ".join(out)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    root = sys.argv[1]
    failed = 0
    for name in sorted(os.listdir(root)):
        fdir = os.path.join(root, name)
        if not os.path.exists(os.path.join(fdir, "meta.json")):
            continue
        ok, text = check_dir(fdir)
        tag = "skip" if ok is None else ("ok" if ok else "FAIL")
        failed += ok is False
        print(f"[{tag:4s}] {name:16s} {text}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
