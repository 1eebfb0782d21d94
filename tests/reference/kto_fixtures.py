"""KTO-loss fixtures for tests/reference/kto_loss_parity_test.cpp, made by make_fixtures.py in its
process: LLaMA-Factory's KTO loss (stage kto) under torch autograd in float64, written
independently of unillm's C++ from LLaMA-Factory's src/llamafactory/train/kto/trainer.py
(CustomKTOTrainer.concatenated_forward, get_batch_loss_metrics) and TRL 0.8's KTOTrainer.kto_loss,
with their structure kept: boolean-mask indexing of the targets by kto_tags, the policy's KL
forward under no_grad, KL = mean(policy_KL - reference_KL).clamp(min=0), the chosen and rejected
losses concatenated and nan-averaged, the pref_ftx term rescaled by B / n_chosen.

File DIR/kto/kto_loss.json: {"cases": [{name, beta, desirable_weight, undesirable_weight, ftx,
policy, reference, policy_kl, reference_kl (summed log-probs), length (scored target tokens),
desirable (0/1), expected: {loss, d_policy (d loss / d summed policy target log-probs), kl,
metrics: [[name, value], ...] as get_batch_loss_metrics stores them, in its order, without
logits/*}}]}. Every number is a float64 written exactly (Python's repr).
"""
import json
import math
import os

import torch
import torch.nn.functional as F

# (seed, B, beta) of the random batches.
BATCHES = ((1, 1, 0.1), (2, 4, 0.25), (3, 8, 0.5), (4, 6, 0.1))
# (desirable_weight, undesirable_weight): LLaMA-Factory's defaults and unequal ones.
WEIGHTS = ((1.0, 1.0), (1.33, 0.75))


class ReferenceKtoTrainer:
    """The loss math of LLaMA-Factory's CustomKTOTrainer over TRL 0.8's KTOTrainer.kto_loss, on
    per-sequence summed log-probs instead of a model (get_batch_logps' output)."""

    def __init__(self, beta, desirable_weight=1.0, undesirable_weight=1.0, ftx=0.0):
        self.beta, self.desirable_weight = beta, desirable_weight
        self.undesirable_weight, self.ftx_gamma = undesirable_weight, ftx

    @staticmethod
    def forward(logps, valid_length):
        """CustomKTOTrainer.forward's return, past the model: (logps, logps / valid_length)."""
        return logps, logps / valid_length

    def concatenated_forward(self, batch, target_logps, kl_logps):
        target_logps, target_logps_avg = self.forward(target_logps, batch["length"])
        with torch.no_grad():
            kl_logps, _ = self.forward(kl_logps.clone(), batch["kl_length"])
        tags = batch["kto_tags"]
        if len(target_logps) != len(tags):
            raise ValueError("Mismatched shape of inputs and labels.")
        chosen_logps = target_logps[tags]
        rejected_logps = target_logps[~tags]
        chosen_logps_avg = target_logps_avg[tags]
        return chosen_logps, rejected_logps, kl_logps, chosen_logps_avg

    def kto_loss(self, policy_chosen_logps, policy_rejected_logps, policy_kl_logps,
                 reference_chosen_logps, reference_rejected_logps, reference_kl_logps):
        kl = (policy_kl_logps - reference_kl_logps).mean().detach()
        kl = kl.mean().clamp(min=0)  # accelerator.gather over one process, then mean
        empty = policy_chosen_logps.new_zeros(0)
        if policy_chosen_logps.shape[0] != 0:
            chosen_logratios = policy_chosen_logps - reference_chosen_logps
            chosen_losses = 1 - torch.sigmoid(self.beta * (chosen_logratios - kl))
            chosen_rewards = self.beta * chosen_logratios.detach()
        else:
            chosen_losses, chosen_rewards = empty, empty
        if policy_rejected_logps.shape[0] != 0:
            rejected_logratios = policy_rejected_logps - reference_rejected_logps
            rejected_losses = 1 - torch.sigmoid(self.beta * (kl - rejected_logratios))
            rejected_rewards = self.beta * rejected_logratios.detach()
        else:
            rejected_losses, rejected_rewards = empty, empty
        losses = torch.cat((self.desirable_weight * chosen_losses,
                            self.undesirable_weight * rejected_losses), 0)
        return losses, chosen_rewards, rejected_rewards, kl

    def get_batch_loss_metrics(self, batch, policy, policy_kl, reference, reference_kl):
        pc, pr, pkl, pc_avg = self.concatenated_forward(batch, policy, policy_kl)
        with torch.no_grad():
            rc, rr, rkl, _ = self.concatenated_forward(batch, reference, reference_kl)
        losses, chosen_rewards, rejected_rewards, kl = self.kto_loss(pc, pr, pkl, rc, rr, rkl)
        losses = losses.nanmean()
        if self.ftx_gamma > 1e-6 and len(pc) > 0:  # LLaMA-Factory's "remember to rescale"
            sft_loss = -pc_avg
            losses = losses + self.ftx_gamma * sft_loss.nanmean() / len(pc) * len(batch["length"])
        metrics = []
        if len(chosen_rewards) > 0:
            metrics += [("rewards/chosen_sum", chosen_rewards.nansum().item()),
                        ("logps/chosen_sum", pc.nansum().item()),
                        ("count/chosen", float(len(chosen_rewards)))]
        if len(rejected_rewards) > 0:
            metrics += [("rewards/rejected_sum", rejected_rewards.nansum().item()),
                        ("logps/rejected_sum", pr.nansum().item()),
                        ("count/rejected", float(len(rejected_rewards)))]
        metrics.append(("kl", kl.item()))
        return losses, metrics


def evaluate(case, trainer_class=ReferenceKtoTrainer):
    """loss, d loss / d summed policy target log-probs, kl and metrics of one case, by autograd
    in f64 (kto_trl_check.py passes a trainer_class whose kto_loss is TRL's)."""
    t = lambda k: torch.tensor(case[k], dtype=torch.float64)  # noqa: E731
    policy = t("policy").requires_grad_(True)
    policy_kl = t("policy_kl").requires_grad_(True)
    batch = {"length": t("length"), "kl_length": torch.ones(len(case["length"]),
                                                           dtype=torch.float64),
             "kto_tags": torch.tensor([bool(x) for x in case["desirable"]])}
    trainer = trainer_class(case["beta"], case["desirable_weight"], case["undesirable_weight"],
                            case["ftx"])
    loss, metrics = trainer.get_batch_loss_metrics(batch, policy, policy_kl, t("reference"),
                                                   t("reference_kl"))
    loss.backward()
    if policy_kl.grad is not None and bool((policy_kl.grad != 0).any()):
        raise AssertionError("the KL rows must carry no gradient (no_grad forward)")
    return {"loss": loss.item(), "d_policy": policy.grad.tolist(),
            "kl": dict(metrics)["kl"], "metrics": [list(m) for m in metrics]}


def random_batch(seed, b, tags):
    """Summed log-probs over 1..40 tokens (-3..-0.2 nats a token); the reference within +-4; the
    KL rows likewise. tags: "mixed" (random, both kinds), "desirable", "undesirable"."""
    g = torch.Generator().manual_seed(2000 + seed)
    u = lambda lo, hi: (lo + (hi - lo) * torch.rand(b, generator=g, dtype=torch.float64))  # noqa
    length = torch.randint(1, 41, (b,), generator=g).to(torch.float64)
    kl_length = torch.randint(1, 41, (b,), generator=g).to(torch.float64)
    policy, policy_kl = u(-3.0, -0.2) * length, u(-3.0, -0.2) * kl_length
    desirable = torch.randint(0, 2, (b,), generator=g).tolist()
    if tags == "mixed" and b > 1:
        desirable[0], desirable[-1] = 1, 0
    elif tags != "mixed":
        desirable = [1 if tags == "desirable" else 0] * b
    return {"policy": policy.tolist(),
            "reference": torch.clamp(policy + u(-4, 4), max=-0.01).tolist(),
            "policy_kl": policy_kl.tolist(),
            "reference_kl": torch.clamp(policy_kl + u(-4, 4), max=-0.01).tolist(),
            "length": length.tolist(), "desirable": desirable}


def special_batches():
    """(name, batch): at the reference, a clamped KL, a positive KL, saturated sigmoids."""
    at_ref = {"policy": [-12.5, -3.25, -40.0], "policy_kl": [-9.0, -17.5, -2.0],
              "length": [5, 2, 31], "desirable": [1, 0, 1]}
    at_ref.update(reference=at_ref["policy"], reference_kl=at_ref["policy_kl"])
    # KL log-ratios {-6, +1, +2}: mean -1, clamped to 0.
    clamped = {"policy": [-20.0, -9.0, -13.0], "reference": [-14.0, -10.0, -15.0],
               "policy_kl": [-20.0, -9.0, -13.0], "reference_kl": [-14.0, -10.0, -15.0],
               "length": [7, 3, 6], "desirable": [0, 1, 1]}
    # KL log-ratios {+3, -1, +2, +4}: KL = 2.
    positive = {"policy": [-11.0, -15.0, -7.0, -30.0],
                "reference": [-14.0, -14.0, -9.0, -26.0],
                "policy_kl": [-11.0, -15.0, -7.0, -22.0],
                "reference_kl": [-14.0, -14.0, -9.0, -26.0],
                "length": [5, 6, 2, 9], "desirable": [1, 0, 1, 0]}
    # |beta * (ratio - KL)| up to ~200: the sigmoids far in both tails.
    wide = {"policy": [-2.0, -400.0, -35.0, -0.3, -300.0],
            "reference": [-5.0, -10.0, -35.5, -0.25, -1.0],
            "policy_kl": [-1.0, -2.0, -3.0, -4.0, -5.0],
            "reference_kl": [-1.5, -2.0, -3.0, -4.0, -5.0],
            "length": [20, 20, 3, 1, 40], "desirable": [1, 1, 0, 0, 0]}
    return [("at_reference", at_ref), ("kl_clamped", clamped), ("kl_positive", positive),
            ("wide", wide)]


def all_cases():
    cases = []

    def add(name, beta, batch, weights=(1.0, 1.0), ftx=0.0):
        case = dict(name=name, beta=beta, desirable_weight=weights[0],
                    undesirable_weight=weights[1], ftx=ftx,
                    **{k: ([int(x) for x in v] if k == "desirable" else [float(x) for x in v])
                       for k, v in batch.items()})
        case["expected"] = evaluate(case)
        cases.append(case)

    for seed, b, beta in BATCHES:
        for tags in ("mixed", "desirable", "undesirable"):
            batch = random_batch(seed, b, tags)
            for wi, weights in enumerate(WEIGHTS):
                for ftx in (0.0, 0.5):
                    add(f"s{seed}_b{b}_{tags}_w{wi}_ftx{ftx}", beta, batch, weights, ftx)
    for name, batch in special_batches():
        for ftx in (0.0, 0.5):
            add(f"{name}_ftx{ftx}", 0.5, batch, (1.0, 1.0), ftx)
    return cases


def make_all(out):
    fdir = os.path.join(out, "kto")
    os.makedirs(fdir, exist_ok=True)
    cases = all_cases()
    with open(os.path.join(fdir, "kto_loss.json"), "w") as f:
        json.dump({"made_by": "tests/reference/kto_fixtures.py (torch autograd, float64)",
                   "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"kto              {len(cases)} KTO-loss cases (mixed / one-sided batches; weights, "
          f"ftx, clamped KL)")


# ------------------------------------------------------------------------------- self-test


def selftest(check):
    """The reference's gradients against central differences, and its closed-form points."""
    worst = 0.0
    for tags in ("mixed", "desirable", "undesirable"):
        for ftx in (0.0, 0.5):
            case = dict(beta=0.25, desirable_weight=1.33, undesirable_weight=0.75, ftx=ftx,
                        **random_batch(7, 4, tags))
            got = evaluate(case)
            for i in range(4):
                h = 1e-5
                plus, minus = json.loads(json.dumps(case)), json.loads(json.dumps(case))
                plus["policy"][i] += h
                minus["policy"][i] -= h
                fd = (evaluate(plus)["loss"] - evaluate(minus)["loss"]) / (2 * h)
                worst = max(worst, abs(got["d_policy"][i] - fd) / (1e-6 + abs(fd)))
    check("kto loss: autograd vs central differences (f64, mixed/one-sided, ftx)", worst < 1e-5,
          f"worst rel {worst:.1e}")
    case = dict(beta=0.1, desirable_weight=1.0, undesirable_weight=1.0, ftx=0.0,
                **special_batches()[0][1])
    got = evaluate(case)
    ok = abs(got["loss"] - 0.5) < 1e-15 and got["kl"] == 0.0
    check("kto at the reference: loss 1/2, KL 0", ok, f"loss {got['loss']!r}")
    # The clamped batch: KL 0, so each term is a plain sigmoid of beta * (pi - rho).
    case = dict(beta=0.5, desirable_weight=1.0, undesirable_weight=1.0, ftx=0.0,
                **special_batches()[1][1])
    got = evaluate(case)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    want = ((1 - sig(0.5 * 6.0)) + (1 - sig(0.5 * 1.0)) + (1 - sig(0.5 * 2.0))) / 3
    check("kto clamped KL: closed form", abs(got["loss"] - want) < 1e-15 and got["kl"] == 0.0,
          f"loss {got['loss']!r} vs {want!r}")
