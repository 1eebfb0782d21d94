"""Writes tests/data/interleave/goldens.json: what numpy 1.24's default_rng and HF datasets 2.14's
interleave_datasets (with probabilities, as LLaMA-Factory's interleave_probs calls it) give, for
tests/data_layer/numpy_random_test.cpp to compare unillm's data/numpy_random.h and data/mix.h with.

  .venv-ref/bin/python tools/make_interleave_goldens.py     # the reference venv has both
"""
import json
import os

import datasets
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "interleave", "goldens.json")

SEEDS = [0, 1, 42, 1234, 2**32 - 1, 2**32 + 5, 12345678901, 2**63 + 7]
CASES = [  # lengths, probabilities, seed, strategy
    ([3, 4, 5], [0.2, 0.3, 0.5], 42, "first_exhausted"),
    ([3, 4, 5], [0.2, 0.3, 0.5], 42, "all_exhausted"),
    ([10, 2], [0.9, 0.1], 7, "first_exhausted"),
    ([10, 2], [0.9, 0.1], 7, "all_exhausted"),
    ([50, 30, 20], [1 / 3, 1 / 3, 1 / 3], 1234, "all_exhausted"),
    ([50, 30, 20], [0.5, 0.25, 0.25], 0, "first_exhausted"),
    ([8, 8], [1.0, 0.0], 3, "first_exhausted"),
    ([40, 25], [0.3, 0.7], 2**32 + 5, "all_exhausted"),
]


def main():
    rngs = []
    for s in SEEDS:
        g = np.random.default_rng(s)
        raw = [int(v) for v in g.bit_generator.random_raw(6)]
        g = np.random.default_rng(s)
        rngs.append({"seed": s, "raw": [str(v) for v in raw], "random": [float(v) for v in g.random(4)]})
    cases = []
    for lengths, probs, seed, strategy in CASES:
        parts, start = [], 0
        for n in lengths:
            parts.append(datasets.Dataset.from_dict({"i": list(range(start, start + n))}))
            start += n
        mixed = datasets.interleave_datasets(parts, probabilities=probs, seed=seed, stopping_strategy=strategy)
        cases.append({"lengths": lengths, "probs": probs, "seed": seed, "strategy": strategy,
                      "indices": list(mixed["i"])})
    with open(OUT, "w") as f:
        json.dump({"numpy": np.__version__, "datasets": datasets.__version__, "generators": rngs, "cases": cases},
                  f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(rngs)} generators, {len(cases)} interleavings")


if __name__ == "__main__":
    main()
