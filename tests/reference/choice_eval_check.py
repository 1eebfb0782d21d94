#!/usr/bin/env python3
"""`unillm eval CONFIG.yaml` / `unillm eval choice` (LLaMA-Factory's `llamafactory-cli eval`)
against an independent Python evaluation written from LLaMA-Factory's eval/evaluator.py and
eval/template.py: the questions read with Python's csv module, each prompt rendered by
tools/make_template_goldens.py's re-implementation of LLaMA-Factory's templates (encode_oneturn's
prompt) on the Hugging Face tokenizer, the next-token logits of transformers'
LlamaForCausalLM at the prompt's last position compared over the last token of "A" … "D".
On tests/data/choice_tasks (MMLU's layout in English with the fewshot template, C-Eval's with a
header row in Chinese with the default template) and a random tiny Llama whose answers differ
between questions: every prediction (results.json), the printed and saved score table
(results.log), and a config with an unknown key is an error naming its line.

  choice_eval_check.py --unillm build/unillm --work DIR
"""
import argparse
import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import make_template_goldens as tg  # noqa: E402

TASKS = ROOT / "tests" / "data" / "choice_tasks"
CATEGORIES = ["Average", "STEM", "Social Sciences", "Humanities", "Other"]
FORMATS = {"en": ("The following are multiple choice questions (with answers) about {subject}.\n\n",
                  "\n{choice}. {content}", "\nAnswer:"),
           "zh": ("以下是中国关于{subject}考试的单项选择题，请选出其中的正确答案。\n\n", "\n{choice}. {content}", "\n答案：")}
MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
         "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.3}


def fail(msg):
    print(f"choice_eval_check: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd, ok=True):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600)
    if ok and r.returncode != 0:
        fail(f"{' '.join(map(str, cmd))} exited {r.returncode}: {r.stderr[-2000:]}")
    return r


def read_split(path):
    """question, [A, B, C, D], answer per row: by header names when a column is named question."""
    rows = list(csv.reader(path.open(encoding="utf-8", newline="")))
    if rows and any(f.lower() == "question" for f in rows[0]):
        h = [f.lower() for f in rows[0]]
        idx = [h.index(k) for k in ("question", "a", "b", "c", "d", "answer")]
        rows = rows[1:]
    else:
        idx = [0, 1, 2, 3, 4, 5]
    return [{"question": r[idx[0]], "choices": [r[i] for i in idx[1:5]], "answer": r[idx[5]]} for r in rows]


def split_path(d, key, s):
    for p in (d / "data" / s / f"{key}_{s}.csv", d / s / f"{key}_{s}.csv", d / s / f"{key}.csv"):
        if p.exists():
            return p
    fail(f"no {s} file for {key} in {d}")


def messages(fmt, shots, target, subject):
    """LLaMA-Factory's EvalTemplate.format_example."""
    system, choice, answer = fmt

    def parse(ex):
        return ex["question"] + "".join(choice.format(choice=c, content=t) for c, t in zip("ABCD", ex["choices"])) + answer

    out = []
    for ex in shots + [target]:
        out += [{"role": "user", "content": parse(ex)}, {"role": "assistant", "content": ex["answer"]}]
    out[0]["content"] = system.format(subject=subject) + out[0]["content"]
    return out


def reference(model_dir, task, lang, template, n_shot):
    name, split = task.rsplit("_", 1)
    files_split = {"train": "dev", "validation": "val", "test": "test"}[split]
    d = TASKS / name
    mapping = json.loads((d / "mapping.json").read_text(encoding="utf-8"))
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32)
    model.eval()
    renderer = tg.Renderer(template, tok)
    letters = [tok.encode(c, add_special_tokens=False)[-1] for c in "ABCD"]
    results, corrects = {}, {c: [] for c in CATEGORIES}
    for key, info in mapping.items():
        shots = read_split(split_path(d, key, "dev"))[:n_shot]
        preds = {}
        for i, q in enumerate(read_split(split_path(d, key, files_split))):
            ids = renderer.oneturn(messages(FORMATS[lang], shots, q, info["name"]), "")[0]
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0, -1]
            pred = "ABCD"[int(torch.argmax(logits[letters]))]
            preds[str(i)] = pred
            corrects.setdefault(info["category"], []).append(pred == q["answer"])
            corrects["Average"].append(pred == q["answer"])
        results[key] = preds
    score = "\n".join(f"{c:>15}: {100 * sum(v) / len(v):.2f}" for c, v in corrects.items() if v)
    return results, score


def check(args, model_dir, task, lang, template, n_shot, via_config):
    out = args.work / f"{task}-{lang}-{n_shot}"
    if via_config:
        cfg = args.work / f"{task}.yaml"
        cfg.write_text(f"model_name_or_path: {model_dir}\ntemplate: {template}\ntask: {task}\ntask_dir: {TASKS}\n"
                       f"lang: {lang}\nn_shot: {n_shot}\nsave_dir: {out}\nbatch_size: 4\nseed: 42\n"
                       f"finetuning_type: lora\n")
        r = run([args.unillm, "eval", cfg])
    else:
        r = run([args.unillm, "eval", "choice", "--model", model_dir, "--template", template, "--task", task,
                 "--task_dir", TASKS, "--lang", lang, "--n_shot", n_shot, "--save_dir", out])
    want_results, want_score = reference(model_dir, task, lang, template, n_shot)
    got = json.loads((out / "results.json").read_text())
    if got != want_results:
        fail(f"{task}: predictions differ:\n unillm    {got}\n reference {want_results}")
    letters = {p for s in got.values() for p in s.values()}
    if len(letters) < 2:
        fail(f"{task}: the model answers {letters} everywhere; the check needs differing answers")
    log = (out / "results.log").read_text()
    if log != want_score or r.stdout.rstrip("\n") != want_score:
        fail(f"{task}: scores differ:\n{r.stdout}\nvs the reference\n{want_score}")
    n = sum(len(s) for s in got.values())
    print(f"choice_eval_check: {task} ({lang}, {template}, {n_shot}-shot): {n} predictions ({sorted(letters)}) "
          f"and the score table equal the reference:\n{want_score}")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--unillm", required=True, type=Path)
    ap.add_argument("--work", required=True, type=Path)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    (args.work / "model.json").write_text(json.dumps(MODEL))
    model_dir = args.work / "tiny-llama"
    run([args.unillm, "init", "--config", args.work / "model.json", "--out", model_dir, "--tokenizer",
         ROOT / "assets" / "stories260K", "--seed", "3"])
    check(args, model_dir, "mmlu_test", "en", "fewshot", 5, via_config=True)
    check(args, model_dir, "mmlu_test", "en", "fewshot", 2, via_config=False)
    check(args, model_dir, "ceval_validation", "zh", "default", 1, via_config=False)
    bad = args.work / "bad.yaml"
    bad.write_text(f"model_name_or_path: {model_dir}\ntask: mmlu_test\ntask_dir: {TASKS}\nn_shots: 5\n")
    r = run([args.unillm, "eval", bad], ok=False)
    if r.returncode == 0 or "bad.yaml line 4: 'n_shots' is not a key" not in r.stderr:
        fail(f"a misspelt key: exit {r.returncode}, {r.stderr!r}")
    print("choice_eval_check: OK")


if __name__ == "__main__":
    main()
