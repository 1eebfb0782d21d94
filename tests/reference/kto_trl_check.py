"""Cross-checks the KTO-loss fixture (DIR/kto/kto_loss.json, which kto_loss_parity_test.cpp holds
unillm's train::kto_loss to) against TRL 0.8.6 itself, the library LLaMA-Factory's
CustomKTOTrainer calls: KTOTrainer.kto_loss, called unbound on a minimal object (one process:
accelerator.gather is the identity). LLaMA-Factory's own wrapper (kto_tags masks, the no-grad KL
forward, pref_ftx, stored metrics) is kto_fixtures.py's; only the loss kernel is swapped for TRL's.
Loss, KL, gradients w.r.t. the summed policy target log-probs and metrics must agree to relative
1e-10.
Run with the reference venv (scripts/setup-reference-venv.sh):
  .venv-ref/bin/python tests/reference/kto_trl_check.py --fixture DIR/kto/kto_loss.json
"""
import argparse
import json
import os
import sys
import types
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kto_fixtures  # noqa: E402

warnings.filterwarnings("ignore")
import trl  # noqa: E402
from trl import KTOTrainer  # noqa: E402

REL, ABS = 1e-10, 1e-13


class TrlKernel(kto_fixtures.ReferenceKtoTrainer):
    """LLaMA-Factory's wrapper with TRL's kto_loss in place of the reference's."""

    def kto_loss(self, *logps):
        trl_self = types.SimpleNamespace(
            beta=self.beta, desirable_weight=self.desirable_weight,
            undesirable_weight=self.undesirable_weight,
            accelerator=types.SimpleNamespace(device=torch.device("cpu"), gather=lambda t: t))
        return KTOTrainer.kto_loss(trl_self, *logps)


def close(got, want):
    return abs(got - want) <= REL * abs(want) + ABS


def compare(case, got):
    want, bad = case["expected"], []
    for key in ("loss", "kl"):
        if not close(got[key], want[key]):
            bad.append(f"{key} {got[key]!r} vs {want[key]!r}")
    for i, (g, w) in enumerate(zip(got["d_policy"], want["d_policy"])):
        if not close(g, w):
            bad.append(f"d_policy[{i}] {g!r} vs {w!r}")
    if [m[0] for m in got["metrics"]] != [m[0] for m in want["metrics"]]:
        bad.append("metric names differ")
    for (name, g), (_, w) in zip(got["metrics"], want["metrics"]):
        if not close(g, w):
            bad.append(f"{name} {g!r} vs {w!r}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixture", required=True, help="kto_loss.json from make_fixtures.py")
    args = ap.parse_args()
    if not os.path.exists(args.fixture):
        sys.stderr.write(f"kto_trl_check: {args.fixture} missing; "
                         "run ctest -R reference_fixtures\n")
        return 1
    with open(args.fixture) as f:
        cases = json.load(f)["cases"]
    failures = 0
    for case in cases:
        bad = compare(case, kto_fixtures.evaluate(case, TrlKernel))
        if bad:
            failures += 1
            print(f"FAIL {case['name']}: " + "; ".join(bad[:4]))
    print(f"kto_trl_check: trl {trl.__version__}, torch {torch.__version__}: "
          f"{len(cases)} cases; {failures} failed")
    return 1 if failures or not cases else 0


if __name__ == "__main__":
    sys.exit(main())
