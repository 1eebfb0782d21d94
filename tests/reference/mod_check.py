"""Mixture-of-depths (LLaMA-Factory's mixture_of_depths, src/models/mixture_of_depths.h) against
the mixture-of-depth package itself, the one LLaMA-Factory imports.

    mod_check.py --dump build/tests/reference/mod_dump --unillm build/unillm [--work DIR]

The bundled stories260K (5 layers) is converted as the package converts a model: its
LlamaMoDForCausalLM routes layers 1 and 3 (a seeded nn.Linear(C, 1) router each) and is saved with
save_pretrained. unillm loads that checkpoint (mixture_of_depths: load) and runs three training
forwards of a [2, 24] batch and one evaluation forward (mod_dump, with and without per-layer
recompute); the package runs the same on the same model in train() and then eval() mode. The
capacity follows the package's per-call counter (1, then 0.5625, 0.4167 of the tokens; the
evaluation keeps the last), so the three calls route different tokens. Every loss (1e-5 relative)
and every parameter gradient (1e-4 relative to the largest) must agree with the package's f64 run,
or stay within 3x of the package's own f32 run's distance from it (these models are
ill-conditioned: the third call's gradients differ by ~7e-4 between the package's f32 and f64). Then `unillm train` with
mixture_of_depths: convert trains stories260K for two steps and saves; the package's
AutoMoDModelForCausalLM (LLaMA-Factory's `load`) must load that directory and give unillm's
evaluation loss on it, and `unillm eval ppl` on it the package's sliding-window perplexity. The
evaluation's token accuracy (the trainer's, compute_accuracy) and one row's logits_all (what eval
ppl scores) come from the routed forward of the batch or row itself, as the package's.
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
import transformers  # noqa: E402
from MoD import AutoMoDModelForCausalLM  # noqa: E402
from MoD.modeling.models.LlamaMoD import LlamaMoDForCausalLM  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODEL = os.path.join(ROOT, "assets", "stories260K")
B, T, CALLS = 2, 24, 3
FAILURES = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
    return r


def convert(out):
    """stories260K as the package's LlamaMoDForCausalLM: odd layers under .block., new routers."""
    cfg = transformers.LlamaConfig.from_pretrained(MODEL)
    cfg.architectures = ["LlamaMoDForCausalLM"]
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    m = LlamaMoDForCausalLM(cfg)
    plain, _ = safetensors_py.load_file(os.path.join(MODEL, "model.safetensors"))
    state = {}
    for name, t in plain.items():
        parts = name.split(".")
        if name.startswith("model.layers.") and int(parts[2]) % 2 == 1:
            name = ".".join(parts[:3] + ["block"] + parts[3:])
        state[name] = torch.as_tensor(t)
    missing, unexpected = m.load_state_dict(state, strict=False)
    expect(not unexpected and all(".router." in k or k == "lm_head.weight" for k in missing),
           "stories260K's weights fill the package's model but for its routers")
    m.tie_weights()
    m.save_pretrained(out, safe_serialization=True)
    return m


def forward(m, ids):
    pos = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
    return m(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=pos, labels=ids, use_cache=False).loss


def logits(m, ids):
    pos = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
    return m(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=pos, use_cache=False).logits


def rel(a, b):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def compare(model_dir, ids, dump, work, recompute):
    # The exact values come from the package in f64. These routed models are ill-conditioned (the
    # router's weight scales each routed token's whole residual stream), so the package's own f32
    # run strays from them too: unillm (f32) must stay within 1e-5 (losses) / 1e-4 (gradients,
    # relative to each one's largest) or within 3x of the f32 package's own distance.
    m64 = LlamaMoDForCausalLM.from_pretrained(model_dir, attn_implementation="eager").double()
    m32 = LlamaMoDForCausalLM.from_pretrained(model_dir, attn_implementation="eager")
    inp, out = os.path.join(work, "in.safetensors"), os.path.join(work, "out.safetensors")
    safetensors_py.save_file({"input_ids": ids.int(), "calls": torch.tensor([CALLS], dtype=torch.int32)}, inp)
    run([dump, model_dir, inp, out] + (["recompute"] if recompute else []))
    got, _ = safetensors_py.load_file(out)
    how = "recompute" if recompute else "no recompute"
    for m in (m64, m32):
        m.train()
    for c in range(CALLS):
        losses = []
        for m in (m64, m32):
            m.zero_grad(set_to_none=True)
            loss = forward(m, ids)
            loss.backward()
            losses.append(loss.item())
        cap = m64.model.layers[1].capacity
        want, f32 = losses
        err, own = abs(got[f"loss.{c}"][0] - want) / abs(want), abs(f32 - want) / abs(want)
        expect(err <= max(1e-5, 3 * own),
               f"{how}: training call {c + 1} (capacity {cap:.4f}): loss {got[f'loss.{c}'][0]:.7f} vs {want:.7f} "
               f"(relative {err:.1e}; the package in f32 {own:.1e})")
        worst, where, ok = 0.0, "", True
        grads32 = dict(m32.named_parameters())
        for name, p in m64.named_parameters():
            g = got.get(f"grad.{c}.{name}")
            if g is None:
                expect(False, f"{how}: unillm has no gradient for {name}")
                continue
            r, r32 = rel(g, p.grad), rel(grads32[name].grad, p.grad)
            ok = ok and r <= max(1e-4, 3 * r32)
            if r > worst:
                worst, where = r, f"{name}, the package in f32 {r32:.1e}"
        expect(ok, f"{how}: call {c + 1}: every gradient within 1e-4 or 3x the f32 package's (worst {worst:.1e} at {where})")
    m64.eval()
    m32.eval()
    with torch.no_grad():
        want = forward(m64, ids).item()
        # HF's compute_accuracy: the argmax of the batch's own evaluation logits at t against t + 1.
        # Labelled with the package's own predictions (position t's argmax as label t + 1), every
        # position the trainer scores must be right: its accuracy reads the same routed logits.
        predicted = torch.cat([ids[:, :1], logits(m64, ids)[:, :-1].argmax(-1)], 1)
        # One row alone (what `unillm eval ppl` scores): its own top-k over its T tokens.
        row64, row32 = (logits(m, ids[:1])[0] for m in (m64, m32))
    expect(abs(got["eval_loss"][0] - want) <= 1e-5 * abs(want),
           f"{how}: evaluation forward (capacity kept): {got['eval_loss'][0]:.7f} vs {want:.7f}")
    safetensors_py.save_file({"input_ids": ids.int(), "calls": torch.tensor([CALLS], dtype=torch.int32),
                              "labels": predicted.int()}, inp)
    run([dump, model_dir, inp, out] + (["recompute"] if recompute else []))
    acc = [int(v) for v in safetensors_py.load_file(out)[0]["accuracy"]]
    expect(acc == [B * (T - 1)] * 2,
           f"{how}: the trainer's token accuracy against the package's predictions: {acc[0]}/{acc[1]} right")
    err, own = rel(got["logits_row0"], row64), rel(row32, row64)
    expect(err <= max(1e-5, 3 * own), f"{how}: logits of one row alone (eval ppl's forward): relative {err:.1e} "
           f"(the package in f32 {own:.1e})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--unillm", required=True)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="mod_check_")
    os.makedirs(work, exist_ok=True)
    mod = os.path.join(work, "mod")
    convert(mod)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 512, (B, T), generator=g)
    for recompute in (False, True):
        compare(mod, ids, args.dump, work, recompute)

    # `unillm train` converts and saves; the package's loader (LLaMA-Factory's `load`) reads it.
    trained = os.path.join(work, "trained")
    cfg = os.path.join(work, "train.yaml")
    with open(cfg, "w") as f:
        f.write(f"model_name_or_path: {MODEL}\nstage: pt\ndo_train: true\nfinetuning_type: full\n"
                f"mixture_of_depths: convert\ndataset: tinyshakespeare\ndataset_dir: {os.path.join(ROOT, 'data')}\n"
                f"cutoff_len: 32\nmax_samples: 32\nper_device_train_batch_size: 2\nlearning_rate: 1.0e-3\n"
                f"max_steps: 2\nsave_strategy: \"no\"\noverwrite_output_dir: true\noutput_dir: {trained}\n")
    run([args.unillm, "train", cfg, "--quiet"])
    loaded = AutoMoDModelForCausalLM.from_pretrained(trained, attn_implementation="eager").double().eval()
    expect(type(loaded).__name__ == "LlamaMoDForCausalLM", f"the package loads unillm's output as {type(loaded).__name__}")
    inp, out = os.path.join(work, "in0.safetensors"), os.path.join(work, "out0.safetensors")
    safetensors_py.save_file({"input_ids": ids.int(), "calls": torch.tensor([0], dtype=torch.int32)}, inp)
    run([args.dump, trained, inp, out])
    got, _ = safetensors_py.load_file(out)
    with torch.no_grad():
        want = forward(loaded, ids).item()
    expect(abs(got["eval_loss"][0] - want) <= 1e-5 * abs(want),
           f"unillm's converted and trained model in the package: loss {want:.7f} = unillm's {got['eval_loss'][0]:.7f}")

    # `unillm eval ppl` on the routed model: HF's sliding-window perplexity, each window routed over
    # its own tokens (the package's forward of the window; capacity 0.125 on a fresh load).
    text = os.path.join(work, "text.txt")
    with open(text, "w") as f:
        f.write("Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
                "One day, she saw a big red ball in the park and ran to get it.")
    tokens = [int(v) for v in run([args.unillm, "tokenize", "--model", trained, "--file", text]).stdout.strip()[1:-1].split(",")]
    ppl = json.loads(run([args.unillm, "eval", "ppl", "--model", trained, "--file", text, "--max-length", "16",
                          "--stride", "8", "--json"]).stdout)
    ids_all, nll, count, prev_end = torch.tensor([tokens]), 0.0, 0, 0
    with torch.no_grad():
        for begin in range(0, len(tokens), 8):
            end = min(begin + 16, len(tokens))
            window = ids_all[:, begin:end]
            logp = torch.log_softmax(logits(loaded, window)[0], -1)
            for p in range(max(prev_end, begin + 1), end):
                nll -= logp[p - 1 - begin, tokens[p]].item()
                count += 1
            prev_end = end
            if end == len(tokens):
                break
    expect(ppl["tokens"] == count and abs(ppl["nll"] - nll / count) <= 1e-5 * (nll / count),
           f"unillm eval ppl on the routed model ({len(tokens)} tokens, windows of 16 by 8): nll {ppl['nll']:.7f} over "
           f"{ppl['tokens']} tokens, the package's windows {nll / count:.7f} over {count}")
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all mixture-of-depths checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
