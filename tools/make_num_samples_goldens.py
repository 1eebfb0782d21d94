"""Writes tests/data/num_samples/goldens.json: what numpy's legacy global generator and
LLaMA-Factory 0.9.2's dataset loader pick for dataset_info.json's `num_samples`, for
tests/data_layer/num_samples_test.cpp to compare unillm's data/num_samples.h and readers with.

  bench/.venv-lf/bin/python tools/make_num_samples_goldens.py   # LLaMA-Factory 0.9.2 (bench/setup.sh)

numpy part: np.random.RandomState(seed) raw 32-bit outputs (randint over [0, 2^32) with
dtype uint64 returns them unchanged) and, after np.random.seed(seed) as transformers.set_seed
does, a sequence of (rows, num_samples) picks as LLaMA-Factory's _load_single_dataset makes them.
LLaMA-Factory part: its _get_merged_dataset over tests/data/num_samples/dataset_info.json after
transformers.set_seed(seed), train names then eval names; each row is recorded as the text of its
last prompt message and of its first response.
"""
import json
import os
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIR = os.path.join(ROOT, "tests", "data", "num_samples")

SEEDS = [0, 1, 42, 1234, 2**32 - 1]
PICKS = [  # seed, [(rows, num_samples), ...] drawn in order from one generator
    (42, [(367, 50), (3, 7), (367, 500), (1, 1)]),
    (7, [(1000, 1000), (5, 2), (2, 9)]),
    (2**32 - 1, [(70000, 3), (65536, 10)]),
]
LOADS = [  # seed, stage, train names, eval names, max_samples
    (42, "sft", ["head_50", "sharegpt_7", "head_500"], ["head_50"], None),
    (7, "sft", ["head_500", "head"], ["sharegpt_7"], 20),
    (123, "pt", ["docs_6"], [], None),
    (42, "rm", ["pairs_5"], [], None),
]


def lf_pick(rows, num_samples):
    indexes = np.random.permutation(rows)[:num_samples]
    left = num_samples - len(indexes)
    if left > 0:
        indexes = np.concatenate((indexes, np.random.choice(rows, left)), axis=0)
    return [int(i) for i in indexes]


def row_key(row):
    prompt = row["_prompt"][-1]["content"] if row["_prompt"] else ""
    response = row["_response"][0]["content"] if row["_response"] else ""
    return prompt + "\x1f" + response


def lf_loads():
    import transformers
    from llamafactory.data.loader import _get_merged_dataset
    from llamafactory.hparams import DataArguments, ModelArguments

    with open(os.path.join(DIR, "dataset_info.json"), encoding="utf-8") as f:
        info = json.load(f)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        # Each dataset without num_samples, for the row of each sampled text.
        plain = {name: {k: v for k, v in entry.items() if k != "num_samples"} for name, entry in info.items()}
        for entry in plain.values():
            entry["file_name"] = os.path.join(DIR, entry["file_name"])
        with open(os.path.join(tmp, "dataset_info.json"), "w", encoding="utf-8") as f:
            json.dump(plain, f)
        rows_of = {}
        for name, entry in info.items():
            stage = "rm" if entry.get("ranking") else "sft"
            ds = _get_merged_dataset([name], ModelArguments(model_name_or_path="unused"),
                                     DataArguments(dataset_dir=tmp, overwrite_cache=True),
                                     transformers.Seq2SeqTrainingArguments(output_dir=tmp), stage)
            keys = [row_key(r) for r in ds]
            rows_of[name] = {}
            for i, k in enumerate(keys):
                rows_of[name].setdefault(k, i)  # a repeated record is named by its first row
        for seed, stage, train, evals, max_samples in LOADS:
            model_args = ModelArguments(model_name_or_path="unused")
            data_args = DataArguments(dataset_dir=DIR, max_samples=max_samples, overwrite_cache=True)
            training_args = transformers.Seq2SeqTrainingArguments(output_dir=tmp, seed=seed)
            transformers.set_seed(seed)
            rows = {}
            for part, names in (("train", train), ("eval", evals)):
                ds = _get_merged_dataset(names or None, model_args, data_args, training_args, stage)
                keys = [row_key(r) for r in ds] if ds is not None else []
                # concat: each name's rows in turn, num_samples of them (or max_samples of those)
                counts = [min(info[n]["num_samples"] if "num_samples" in info[n] else len(rows_of[n]),
                              max_samples or 10**9) for n in names]
                assert sum(counts) == len(keys)
                rows[part] = []
                for n, c in zip(names, counts):
                    rows[part] += [[n, rows_of[n][k]] for k in keys[:c]]
                    keys = keys[c:]
            out.append({"seed": seed, "stage": stage, "train_names": train, "eval_names": evals,
                        "max_samples": max_samples, **rows})
    return out


def main():
    raw = []
    for seed in SEEDS:
        rs = np.random.RandomState(seed)
        raw.append({"seed": seed, "uint32": [int(v) for v in rs.randint(0, 2**32, size=12, dtype=np.uint64)]})
    picks = []
    for seed, seq in PICKS:
        np.random.seed(seed)
        picks.append({"seed": seed, "draws": [{"rows": r, "num_samples": n, "indexes": lf_pick(r, n)} for r, n in seq]})
    doc = {"numpy": np.__version__, "raw": raw, "picks": picks, "loads": lf_loads()}
    import llamafactory
    doc["llamafactory"] = llamafactory.__version__
    with open(os.path.join(DIR, "goldens.json"), "w", encoding="utf-8") as f:
        # one line per generator, pick sequence and load (the lists are long)
        f.write("{\n" + ",\n".join(
            json.dumps(k) + ": " + (json.dumps(v) if not isinstance(v, list) else
                                    "[\n  " + ",\n  ".join(json.dumps(x) for x in v) + "\n]")
            for k, v in doc.items()) + "\n}\n")


if __name__ == "__main__":
    main()
