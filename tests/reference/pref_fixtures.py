"""Preference-loss fixtures for tests/reference/pref_loss_parity_test.cpp, made by make_fixtures.py
in its process: LLaMA-Factory's DPO losses (sigmoid, hinge, ipo, kto_pair, orpo, simpo; pref_ftx;
dpo_label_smoothing; pref_bco_weight's BCO term with TRL's RunningMoments baseline) under torch autograd in float64, written independently of unillm's C++ from
LLaMA-Factory's src/llamafactory/train/dpo/trainer.py (concatenated_forward,
compute_preference_loss, odds_ratio_loss, simpo_loss, get_batch_loss_metrics) and TRL 0.8's
DPOTrainer.dpo_loss, with their structure kept.

File DIR/pref/pref_loss.json: {"cases": [{name, loss, beta, label_smoothing, ftx, simpo_gamma,
policy_chosen, policy_rejected, reference_chosen, reference_rejected (summed log-probs; [] for
orpo/simpo), chosen_len, rejected_len, [bco_weight, bco_history: the baseline's earlier inputs],
expected: {loss, [bco_mean: the baseline after this batch], d_policy_chosen, d_policy_rejected (d loss
/ d summed policy log-probs), metrics: [[name, value], ...] in LLaMA-Factory's order, without
logits/*}}]}. Every number is a float64 written exactly (Python's repr).
"""
import json
import math
import os

import torch
import torch.nn.functional as F

LOSSES = ("sigmoid", "hinge", "ipo", "kto_pair", "orpo", "simpo")
REFERENCE_FREE = ("orpo", "simpo")  # LLaMA-Factory: use_ref_model is False for these
AVERAGED = ("ipo", "orpo", "simpo")
# (seed, B, beta, simpo_gamma) of the random batches.
BATCHES = ((1, 1, 0.1, 0.5), (2, 4, 0.25, 1.0), (3, 8, 0.5, 0.5))


class ReferencePrefTrainer:
    """The loss math of LLaMA-Factory's CustomDPOTrainer over TRL 0.8's DPOTrainer.dpo_loss, on
    per-sequence summed log-probs instead of a model (get_batch_logps' output)."""

    def __init__(self, loss_type, beta, label_smoothing=0.0, ftx=0.0, simpo_gamma=0.5, bco=0.0,
                 bco_history=()):
        self.loss_type, self.beta, self.label_smoothing = loss_type, beta, label_smoothing
        self.ftx_gamma, self.simpo_gamma = ftx, simpo_gamma
        self.bco_gemma = bco
        if self.bco_gemma >= 1e-6:
            self.running = RunningMoments()
            for x in bco_history:  # the batches before this one
                self.running.update(torch.tensor([x], dtype=torch.float64))
        self.use_ref_model = loss_type not in REFERENCE_FREE
        self.reference_free = False

    def concatenated_forward(self, all_logps, valid_length):
        if self.loss_type in AVERAGED:
            all_logps = all_logps / valid_length
        batch_size = all_logps.size(0) // 2
        chosen_logps, rejected_logps = all_logps.split(batch_size, dim=0)
        chosen_length, _ = valid_length.split(batch_size, dim=0)
        if self.loss_type in AVERAGED:
            chosen_logps_avg = chosen_logps
        else:
            chosen_logps_avg = chosen_logps / chosen_length
        return chosen_logps, rejected_logps, chosen_logps_avg

    def dpo_loss(self, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                 reference_rejected_logps):
        pi_logratios = policy_chosen_logps - policy_rejected_logps
        ref_logratios = reference_chosen_logps - reference_rejected_logps
        logits = pi_logratios - ref_logratios
        if self.loss_type == "sigmoid":
            losses = (-F.logsigmoid(self.beta * logits) * (1 - self.label_smoothing)
                      - F.logsigmoid(-self.beta * logits) * self.label_smoothing)
        elif self.loss_type == "hinge":
            losses = torch.relu(1 - self.beta * logits)
        elif self.loss_type == "ipo":
            losses = (logits - 1 / (2 * self.beta)) ** 2
        elif self.loss_type == "kto_pair":
            chosen_kl = (policy_chosen_logps - reference_chosen_logps).mean().clamp(min=0)
            rejected_kl = (policy_rejected_logps - reference_rejected_logps).mean().clamp(min=0)
            chosen_logratios = policy_chosen_logps - reference_chosen_logps
            rejected_logratios = policy_rejected_logps - reference_rejected_logps
            losses = torch.cat((1 - torch.sigmoid(self.beta * (chosen_logratios - rejected_kl)),
                                1 - torch.sigmoid(self.beta * (chosen_kl - rejected_logratios))), 0)
        else:
            raise ValueError(self.loss_type)
        chosen_rewards = self.beta * (policy_chosen_logps - reference_chosen_logps).detach()
        rejected_rewards = self.beta * (policy_rejected_logps - reference_rejected_logps).detach()
        return losses, chosen_rewards, rejected_rewards

    def odds_ratio_loss(self, chosen_logps, rejected_logps):
        log_odds = (chosen_logps - rejected_logps) - (
            torch.log1p(-torch.exp(chosen_logps)) - torch.log1p(-torch.exp(rejected_logps)))
        sft_loss = -chosen_logps
        odds_ratio_loss = -F.logsigmoid(log_odds)
        return sft_loss + self.beta * odds_ratio_loss

    def simpo_loss(self, chosen_logps, rejected_logps):
        pi_logratios = chosen_logps - rejected_logps
        gamma_logratios = self.simpo_gamma / self.beta
        logits = pi_logratios - gamma_logratios
        return -F.logsigmoid(self.beta * logits)

    def bco_loss(self, pc, pr, rc, rr):
        chosen_logratios = pc - rc
        rejected_logratios = pr - rr
        rewards = torch.cat((self.beta * chosen_logratios, self.beta * rejected_logratios), 0)
        self.running.update(rewards.mean().detach())
        delta = self.running.mean
        return (-F.logsigmoid(self.beta * chosen_logratios - delta)
                - F.logsigmoid(-(self.beta * rejected_logratios - delta)))

    def compute_preference_loss(self, pc, pr, rc, rr):
        if not self.use_ref_model:
            if self.loss_type == "orpo":
                losses = self.odds_ratio_loss(pc, pr)
            else:
                losses = self.simpo_loss(pc, pr)
            return losses, self.beta * pc.detach(), self.beta * pr.detach()
        losses, chosen_rewards, rejected_rewards = self.dpo_loss(pc, pr, rc, rr)
        if self.bco_gemma > 1e-6:
            bco_losses = self.bco_loss(pc, pr, rc, rr)
            losses = (losses + bco_losses * self.bco_gemma) / (1.0 + self.bco_gemma)
        return losses, chosen_rewards, rejected_rewards

    def get_batch_loss_metrics(self, policy_logps, valid_length, reference_logps):
        """policy_logps [2B] summed (chosen rows, then rejected), reference_logps [2B] or None."""
        pc, pr, pc_avg = self.concatenated_forward(policy_logps, valid_length)
        rc = rr = None
        if self.use_ref_model:
            with torch.no_grad():
                rc, rr, _ = self.concatenated_forward(reference_logps, valid_length)
        losses, chosen_rewards, rejected_rewards = self.compute_preference_loss(pc, pr, rc, rr)
        sft_loss = -pc_avg
        if self.ftx_gamma > 1e-6:
            # LLaMA-Factory writes `losses += ...`: the same values, but in place it breaks
            # backward for hinge (torch.relu saves its output), so here it is out of place.
            losses = losses + self.ftx_gamma * sft_loss
        metrics = [("rewards/chosen", chosen_rewards.mean().item()),
                   ("rewards/rejected", rejected_rewards.mean().item()),
                   ("rewards/accuracies",
                    (chosen_rewards > rejected_rewards).to(pc.dtype).mean().item()),
                   ("rewards/margins", (chosen_rewards - rejected_rewards).mean().item()),
                   ("logps/chosen", pc.mean().item()), ("logps/rejected", pr.mean().item())]
        if self.loss_type == "orpo":
            metrics.append(("sft_loss", sft_loss.mean().item()))
            metrics.append(("odds_ratio_loss", ((losses - sft_loss) / self.beta).mean().item()))
        return losses.mean(), metrics


class RunningMoments:
    """TRL's RunningMoments.update (one process), in float64: TRL rounds its moments to float32;
    float64 keeps the comparison at the loss math's precision."""

    def __init__(self):
        self.mean, self.var, self.count = 0.0, 1.0, 1e-24

    def update(self, xs):
        xs = xs.reshape(-1).to(torch.float64)
        xs_count = xs.numel()
        xs_var, xs_mean = torch.var_mean(xs, unbiased=False)
        delta = xs_mean.item() - self.mean
        tot_count = self.count + xs_count
        new_sum = xs_var.item() * xs_count
        old_sum = self.var * self.count + delta ** 2 * self.count * xs_count / tot_count
        self.mean += delta * xs_count / tot_count
        self.var = (old_sum + new_sum) / tot_count
        self.count = tot_count


def evaluate(case, trainer_class=ReferencePrefTrainer):
    """loss, d loss / d summed policy log-probs and metrics of one case, by autograd in f64
    (pref_trl_check.py passes a trainer_class whose loss kernels are TRL's)."""
    t = lambda k: torch.tensor(case[k], dtype=torch.float64)  # noqa: E731
    pc = t("policy_chosen").requires_grad_(True)
    pr = t("policy_rejected").requires_grad_(True)
    lens = torch.cat((t("chosen_len"), t("rejected_len")))
    ref_logps = (torch.cat((t("reference_chosen"), t("reference_rejected")))
                 if case["reference_chosen"] else None)
    bco = {"bco": case["bco_weight"], "bco_history": case["bco_history"]} if case.get("bco_weight") else {}
    trainer = trainer_class(case["loss"], case["beta"], case["label_smoothing"],
                            case["ftx"], case["simpo_gamma"], **bco)
    loss, metrics = trainer.get_batch_loss_metrics(torch.cat((pc, pr)), lens, ref_logps)
    loss.backward()
    out = {"loss": loss.item(), "d_policy_chosen": pc.grad.tolist(),
           "d_policy_rejected": pr.grad.tolist(), "metrics": [list(m) for m in metrics]}
    if bco:
        out["bco_mean"] = trainer.running.mean
    return out


def random_batch(seed, b, reference):
    """Summed log-probs over 1..40 tokens (-3..-0.2 nats a token); the reference within +-4."""
    g = torch.Generator().manual_seed(1000 + seed)
    u = lambda lo, hi: (lo + (hi - lo) * torch.rand(b, generator=g, dtype=torch.float64))  # noqa
    lc = torch.randint(1, 41, (b,), generator=g).to(torch.float64)
    lr = torch.randint(1, 41, (b,), generator=g).to(torch.float64)
    pc, pr = u(-3.0, -0.2) * lc, u(-3.0, -0.2) * lr
    batch = {"policy_chosen": pc.tolist(), "policy_rejected": pr.tolist(),
             "chosen_len": lc.tolist(), "rejected_len": lr.tolist(),
             "reference_chosen": [], "reference_rejected": []}
    if reference:
        batch["reference_chosen"] = torch.clamp(pc + u(-4.0, 4.0), max=-0.01).tolist()
        batch["reference_rejected"] = torch.clamp(pr + u(-4.0, 4.0), max=-0.01).tolist()
    return batch


def special_batches():
    """(name, losses it applies to, batch): z = 0, a clamped kto_pair KL, saturated sigmoids."""
    at_ref = {"policy_chosen": [-12.5, -3.25, -40.0], "policy_rejected": [-9.0, -17.5, -2.0],
              "chosen_len": [5, 2, 31], "rejected_len": [4, 9, 1]}
    at_ref.update(reference_chosen=at_ref["policy_chosen"],
                  reference_rejected=at_ref["policy_rejected"])
    # chosen log-ratios {-6, +1, +2}: mean < 0, KL_c clamped; rejected {+3, -1, +2}: KL_r = 4/3.
    kto = {"policy_chosen": [-20.0, -9.0, -13.0], "policy_rejected": [-11.0, -15.0, -7.0],
           "reference_chosen": [-14.0, -10.0, -15.0], "reference_rejected": [-14.0, -14.0, -9.0],
           "chosen_len": [7, 3, 6], "rejected_len": [5, 6, 2]}
    # |beta·z| up to ~150: logsigmoid far in both tails; per-token log-probs near 0 and -20.
    wide = {"policy_chosen": [-2.0, -400.0, -35.0, -0.3],
            "policy_rejected": [-300.0, -1.5, -36.0, -80.0],
            "reference_chosen": [-5.0, -10.0, -35.5, -0.25],
            "reference_rejected": [-5.0, -9.0, -36.2, -79.0],
            "chosen_len": [20, 20, 3, 1], "rejected_len": [15, 40, 4, 4]}
    return [("at_reference", ("sigmoid", "hinge", "ipo", "kto_pair"), at_ref),
            ("kto_clamped", ("kto_pair", "sigmoid"), kto),
            ("wide", ("sigmoid", "hinge", "ipo", "kto_pair"), wide),
            ("wide_free", ("orpo", "simpo"),
             dict(wide, reference_chosen=[], reference_rejected=[]))]


def all_cases():
    cases = []

    def add(name, loss, beta, batch, eps=0.0, ftx=0.0, gamma=0.5):
        case = dict(name=name, loss=loss, beta=beta, label_smoothing=eps, ftx=ftx,
                    simpo_gamma=gamma, **{k: [float(x) for x in v] for k, v in batch.items()})
        case["expected"] = evaluate(case)
        cases.append(case)

    for seed, b, beta, gamma in BATCHES:
        with_ref, free = random_batch(seed, b, True), random_batch(seed, b, False)
        for loss in LOSSES:
            batch = free if loss in REFERENCE_FREE else with_ref
            for ftx in ((0.0,) if loss == "kto_pair" else (0.0, 0.5)):
                add(f"{loss}_s{seed}_b{b}_ftx{ftx}", loss, beta, batch, ftx=ftx, gamma=gamma)
        for eps in (0.1, 0.5):
            add(f"sigmoid_s{seed}_b{b}_eps{eps}", "sigmoid", beta, with_ref, eps=eps)
        add(f"sigmoid_s{seed}_b{b}_eps0.2_ftx0.5", "sigmoid", beta, with_ref, eps=0.2, ftx=0.5)
    # BCO (pref_bco_weight): the running baseline after a few earlier batches' mean rewards.
    for seed, b, beta, _ in BATCHES:
        with_ref = random_batch(seed, b, True)
        for loss in ("sigmoid", "hinge", "ipo"):
            for ftx in (0.0, 0.5):
                case = dict(name=f"{loss}_s{seed}_b{b}_ftx{ftx}_bco0.5", loss=loss, beta=beta,
                            label_smoothing=0.0, ftx=ftx, simpo_gamma=0.5, bco_weight=0.5,
                            bco_history=[0.3, -1.1, 0.05 * seed],
                            **{k: [float(x) for x in v] for k, v in with_ref.items()})
                case["expected"] = evaluate(case)
                cases.append(case)
    for name, losses, batch in special_batches():
        for loss in losses:
            add(f"{loss}_{name}", loss, 0.5, batch, gamma=1.0)
    return cases


def make_all(out):
    fdir = os.path.join(out, "pref")
    os.makedirs(fdir, exist_ok=True)
    cases = all_cases()
    with open(os.path.join(fdir, "pref_loss.json"), "w") as f:
        json.dump({"made_by": "tests/reference/pref_fixtures.py (torch autograd, float64)",
                   "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"pref             {len(cases)} preference-loss cases "
          f"({', '.join(LOSSES)}; ftx, label smoothing, bco)")


# ------------------------------------------------------------------------------- self-test


def selftest(check):
    """The reference's gradients against central differences, and its closed-form points."""
    worst = 0.0
    for loss in LOSSES:
        for ftx in ((0.0,) if loss == "kto_pair" else (0.0, 0.5)):
            case = dict(loss=loss, beta=0.25, label_smoothing=0.1 if loss == "sigmoid" else 0.0,
                        ftx=ftx, simpo_gamma=1.0,
                        **random_batch(7, 3, loss not in REFERENCE_FREE))
            got = evaluate(case)
            for side in ("chosen", "rejected"):
                for i in range(3):
                    h = 1e-5
                    plus, minus = json.loads(json.dumps(case)), json.loads(json.dumps(case))
                    plus["policy_" + side][i] += h
                    minus["policy_" + side][i] -= h
                    fd = (evaluate(plus)["loss"] - evaluate(minus)["loss"]) / (2 * h)
                    g = got["d_policy_" + side][i]
                    worst = max(worst, abs(g - fd) / (1e-6 + abs(fd)))
    check("pref losses: autograd vs central differences (f64, every loss, ftx)", worst < 1e-5,
          f"worst rel {worst:.1e}")
    case = dict(loss="sigmoid", beta=0.1, label_smoothing=0.0, ftx=0.0, simpo_gamma=0.5,
                **special_batches()[0][2])
    got = evaluate(case)
    ok = abs(got["loss"] - math.log(2)) < 1e-15 and got["metrics"][2][1] == 0.0
    check("pref sigmoid at the reference: loss ln 2, accuracies 0", ok, f"loss {got['loss']!r}")
