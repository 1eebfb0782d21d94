#!/usr/bin/env python3
"""`unillm eval` metrics against the packages LLaMA-Factory's sft/metric.py calls (jieba 0.42.1,
rouge-chinese 1.0.3, nltk 3.10.4, pinned in tests/reference/constraints.txt): jieba.cut token for
token on tests/data/metrics/segment.txt and on every prediction and label, the per-sample
BLEU-4/ROUGE-1/2/L (x100, rounded to 4 decimals) and their means (`eval similarity`, `eval bleu`,
`eval rouge`) on tests/data/metrics/predictions.jsonl, plus a bad-line error naming file:line.

  metrics_check.py --unillm build/unillm
"""
import argparse
import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

import jieba
import numpy as np
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
from rouge_chinese import Rouge

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "metrics"


def run(unillm, *args):
    r = subprocess.run([unillm, "eval", *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"unillm eval {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r.stdout.split("\n")[:-1]  # not splitlines(): U+2028 and others would split a line


def lf_scores(pred, label):
    """The body of LLaMA-Factory's ComputeSimilarity.__call__ loop (train/sft/metric.py)."""
    hypothesis = list(jieba.cut(pred))
    reference = list(jieba.cut(label))
    if len(" ".join(hypothesis).split()) == 0 or len(" ".join(reference).split()) == 0:
        result = {"rouge-1": {"f": 0.0}, "rouge-2": {"f": 0.0}, "rouge-l": {"f": 0.0}}
    else:
        result = Rouge().get_scores(" ".join(hypothesis), " ".join(reference))[0]
    out = {k: round(v["f"] * 100, 4) for k, v in result.items()}
    bleu = sentence_bleu([list(label)], list(pred), smoothing_function=SmoothingFunction().method3)
    out["bleu-4"] = round(bleu * 100, 4)
    return out


def check_segmentation(unillm, texts, what):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8", delete=False) as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
    got = [json.loads(l) for l in run(unillm, "segment", "--file", f.name, "--json-lines")]
    Path(f.name).unlink()
    assert len(got) == len(texts), (len(got), len(texts))
    bad = [(t, g, list(jieba.cut(t))) for t, g in zip(texts, got) if g != list(jieba.cut(t))]
    for t, g, w in bad[:3]:
        print(f"segmentation differs on {t!r}:\n  unillm {g}\n  jieba  {w}")
    tokens = sum(len(g) for g in got)
    print(f"segment {what}: {len(texts) - len(bad)}/{len(texts)} texts token-exact ({tokens} tokens)")
    return not bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unillm", required=True)
    unillm = ap.parse_args().unillm
    jieba.setLogLevel(logging.ERROR)
    ok = True
    lines = (DATA / "segment.txt").read_text(encoding="utf-8").split("\n")[:-1]
    ok &= check_segmentation(unillm, lines, "segment.txt")
    rows = [json.loads(l) for l in (DATA / "predictions.jsonl").read_text(encoding="utf-8").split("\n")[:-1]]
    texts = [r["predict"] for r in rows] + [r["label"] for r in rows]
    ok &= check_segmentation(unillm, texts, "predictions.jsonl")

    pred_file = str(DATA / "predictions.jsonl")
    ref = [lf_scores(r["predict"], r["label"]) for r in rows]
    out = run(unillm, "similarity", "--predictions", pred_file, "--per-sample")
    keys = ["bleu-4", "rouge-1", "rouge-2", "rouge-l"]
    per = [json.loads(l) for l in out[:-1]]
    exact = 0
    for i, (g, r) in enumerate(zip(per, ref)):
        want = [r[k] for k in keys]
        exact += g == want
        if any(abs(a - b) > 5e-5 for a, b in zip(g, want)):
            print(f"sample {i + 1}: unillm {g} vs reference {want}")
            ok = False
    print(f"per-sample scores: {exact}/{len(ref)} bit-identical to the reference")
    means = {f"predict_{k}": float(np.mean([r[k] for r in ref])) for k in keys}
    got = json.loads(out[-1])
    print("reference", json.dumps(means))
    print("unillm   ", json.dumps(got))
    for k, v in means.items():
        if abs(got[k] - v) > 5e-5:
            print(f"{k}: unillm {got[k]} vs reference {v}")
            ok = False
    if got != means:
        print("note: means agree to 4 decimals but not bit for bit")
    bleu = json.loads(run(unillm, "bleu", "--predictions", pred_file)[0])
    rouge = json.loads(run(unillm, "rouge", "--predictions", pred_file)[0])
    if bleu != {"predict_bleu-4": got["predict_bleu-4"]} or {**bleu, **rouge} != got:
        print(f"eval bleu {bleu} / eval rouge {rouge} disagree with eval similarity {got}")
        ok = False

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write('{"predict": "a", "label": "b"}\n{"predict": "a"}\n')
    r = subprocess.run([unillm, "eval", "similarity", "--predictions", f.name], capture_output=True, text=True)
    Path(f.name).unlink()
    if r.returncode == 0 or f"{f.name} line 2" not in r.stderr or "'label'" not in r.stderr:
        print(f"a missing label should fail naming the line: rc={r.returncode} {r.stderr!r}")
        ok = False
    print("metrics_check:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
