"""Cross-checks the preference-loss fixture (DIR/pref/pref_loss.json, which
pref_loss_parity_test.cpp holds unillm's train::pref_loss to) against TRL 0.8.6 itself, the
library LLaMA-Factory's CustomDPOTrainer calls: DPOTrainer.dpo_loss (sigmoid with label smoothing,
hinge, ipo, kto_pair) and ORPOTrainer.odds_ratio_loss (orpo), each called unbound on a minimal
object. LLaMA-Factory's own wrapper (length averaging, pref_ftx, metrics) is pref_fixtures.py's;
only the loss kernels are swapped for TRL's. TRL 0.8.6 has no simpo (LLaMA-Factory's own
simpo_loss), so simpo cases are left to the fixture. Loss, gradients w.r.t. the summed policy
log-probs and metrics must agree to relative 1e-10.
Run with the reference venv (scripts/setup-reference-venv.sh):
  .venv-ref/bin/python tests/reference/pref_trl_check.py --fixture DIR/pref/pref_loss.json
"""
import argparse
import json
import os
import sys
import types
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pref_fixtures  # noqa: E402

warnings.filterwarnings("ignore")
import trl  # noqa: E402
from trl import DPOTrainer, ORPOTrainer  # noqa: E402

REL, ABS = 1e-10, 1e-13
CHECKED = ("sigmoid", "hinge", "ipo", "kto_pair", "orpo")


class TrlKernels(pref_fixtures.ReferencePrefTrainer):
    """LLaMA-Factory's wrapper with TRL's loss functions in place of the reference's."""

    def _trl_self(self):
        return types.SimpleNamespace(
            beta=self.beta, label_smoothing=self.label_smoothing, loss_type=self.loss_type,
            reference_free=False, accelerator=types.SimpleNamespace(device=torch.device("cpu")))

    def dpo_loss(self, pc, pr, rc, rr):
        return DPOTrainer.dpo_loss(self._trl_self(), pc, pr, rc, rr)

    def odds_ratio_loss(self, chosen_logps, rejected_logps):
        # TRL returns β·logσ(log_odds) per pair (its loss is nll − mean of that); LLaMA-Factory's
        # per-pair loss is sft_loss + β·(−logσ(log_odds)).
        ratio = ORPOTrainer.odds_ratio_loss(self._trl_self(), chosen_logps, rejected_logps)[0]
        return -chosen_logps - ratio


def close(got, want):
    return abs(got - want) <= REL * abs(want) + ABS


def compare(case, got):
    want, bad = case["expected"], []
    if not close(got["loss"], want["loss"]):
        bad.append(f"loss {got['loss']!r} vs {want['loss']!r}")
    for key in ("d_policy_chosen", "d_policy_rejected"):
        for i, (g, w) in enumerate(zip(got[key], want[key])):
            if not close(g, w):
                bad.append(f"{key}[{i}] {g!r} vs {w!r}")
    if [m[0] for m in got["metrics"]] != [m[0] for m in want["metrics"]]:
        bad.append("metric names differ")
    for (name, g), (_, w) in zip(got["metrics"], want["metrics"]):
        if not close(g, w):
            bad.append(f"{name} {g!r} vs {w!r}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixture", required=True, help="pref_loss.json from make_fixtures.py")
    args = ap.parse_args()
    if not os.path.exists(args.fixture):
        sys.stderr.write(f"pref_trl_check: {args.fixture} missing; "
                         "run ctest -R reference_fixtures\n")
        return 1
    with open(args.fixture) as f:
        cases = json.load(f)["cases"]
    checked, failures = {}, 0
    for case in cases:
        if case["loss"] not in CHECKED:
            continue
        bad = compare(case, pref_fixtures.evaluate(case, TrlKernels))
        checked[case["loss"]] = checked.get(case["loss"], 0) + 1
        if bad:
            failures += 1
            print(f"FAIL {case['name']}: " + "; ".join(bad[:4]))
    print(f"pref_trl_check: trl {trl.__version__}, torch {torch.__version__}: "
          + ", ".join(f"{k} {v}" for k, v in checked.items())
          + f" cases; {failures} failed")
    if set(checked) != set(CHECKED):
        print(f"FAIL: fixture lacks cases for {sorted(set(CHECKED) - set(checked))}")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
