"""Writes split_golden.json: numpy.random.default_rng(seed).permutation(n) (what HF
datasets' train_test_split(seed=seed) uses) and HF's split sizes, the independent reference for
tests/data_layer/split_test.cpp. Run with Debian's python3-numpy: /usr/bin/python3 make_split_golden.py
"""
import json
import math

import numpy as np

cases = []
for seed, n in [(42, 10), (42, 1), (0, 7), (1234, 100), (2**32 + 5, 50), (7, 70000)]:
    perm = np.random.default_rng(seed).permutation(n).tolist()
    cases.append({"seed": seed, "n": n, "head": perm[:20], "tail": perm[-5:]})
sizes = []
for val_size, n in [(0.1, 30), (0.07, 100), (0.1, 10), (0.25, 7), (0.5, 3), (3, 10)]:
    n_test = math.ceil(val_size * n) if val_size < 1 else int(val_size)
    sizes.append({"val_size": val_size, "n": n, "test": n_test, "train": n - n_test})
with open("split_golden.json", "w") as f:
    json.dump({"permutations": cases, "sizes": sizes}, f, indent=1)
