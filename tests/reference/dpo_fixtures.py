"""DPO-through-the-model fixtures for tests/reference/dpo_parity_test.cpp, made by make_fixtures.py
in its process: one micro-batch of preference pairs through a tiny random model with a LoRA
adapter (the policy) and the same model without it (the reference, PEFT's disable_adapter()),
LLaMA-Factory's get_batch_logps (labels shifted, -100 masked, log-probs summed per row) and its
loss and metrics (pref_fixtures.ReferencePrefTrainer), differentiated by torch autograd in float64
w.r.t. the adapter's A and B.

The batch is laid out as LLaMA-Factory's PairwiseDataCollator lays it out: chosen rows 0..B-1,
then rejected rows B..2B-1, right-padded with id 0 and label -100. Each row is computed over its
real tokens only (right padding cannot change them under a causal mask).

Per case, DIR/dpo_<case>/: adapter/ (PEFT layout), dpo.json (batch, lengths, config, loss,
metrics incl. logits/chosen|rejected as the mean logit over each side's real positions), and
grads.f32 (d loss / dA, dB). The reward-model cases (dpo_<name>_rm/: rm.json, a value head in
adapter/value_head.safetensors) differentiate LLaMA-Factory's pairwise loss of TRL's value head.
"""
import os

import torch

import hf_llama_reference as ref
import kto_fixtures
import lora_fixtures
import pref_fixtures
import safetensors_py
import train_fixtures

# name -> (base model fixture, seed, pref_loss, beta, ftx, label_smoothing, lora targets)
CASES = {
    "llama_sigmoid": ("llama_gqa", 401, "sigmoid", 0.1, 0.0, 0.0, ["q_proj", "v_proj", "down_proj"]),
    "llama_sigmoid_ld": ("llama_gqa", 405, "sigmoid", 0.1, 0.0, 0.0, ["q_proj", "v_proj", "down_proj"]),
    "llama_sigmoid_smoothed_ftx": ("llama_gqa", 402, "sigmoid", 0.5, 0.3, 0.1, list(lora_fixtures.MODULES)),
    "qwen2_ipo": ("qwen2", 403, "ipo", 0.3, 0.0, 0.0, list(lora_fixtures.MODULES)),
    "qwen2_orpo": ("qwen2", 404, "orpo", 0.2, 0.0, 0.0, ["q_proj", "up_proj"]),
}
R, ALPHA = 4, 8
LD_ALPHA = {"llama_sigmoid_ld": 0.5}  # LD-DPO's ld_alpha of a case (policy log-probs only)
# (prompt, chosen, rejected) lengths of each pair.
PAIRS = ((4, 5, 3), (6, 2, 4))


def pair_batch(seed, vocab):
    """Chosen rows then rejected rows; a pair shares its prompt; right padding (id 0, label -100)."""
    g = torch.Generator().manual_seed(seed + 3000)
    rows = [[], []]  # chosen, rejected: (ids, labels)
    for p, c, r in PAIRS:
        prompt = [1] + torch.randint(3, vocab, (p - 1,), generator=g).tolist()
        for side, n in ((0, c), (1, r)):
            resp = torch.randint(3, vocab, (n,), generator=g).tolist()
            rows[side].append((prompt + resp, [-100] * p + resp))
    ordered = rows[0] + rows[1]
    t = max(len(ids) for ids, _ in ordered)
    ids = [i + [0] * (t - len(i)) for i, _ in ordered]
    labels = [lab + [-100] * (t - len(lab)) for _, lab in ordered]
    return {"input_ids": ids, "labels": labels, "position_ids": [list(range(t))] * len(ordered),
            "segment_ids": None, "lengths": [len(i) for i, _ in ordered]}


def ld_public_lengths(batch):
    """LLaMA-Factory's get_batch_logps with ld_alpha: per row, start (the first scored shifted
    position) + min(valid length of the pair's chosen, of its rejected)."""
    half = len(batch["input_ids"]) // 2
    starts, valid = [], []
    for labels in batch["labels"]:
        mask = [x != -100 for x in labels[1:]]
        starts.append(mask.index(True) if True in mask else 0)
        valid.append(sum(mask))
    return [starts[r] + min(valid[r % half], valid[r % half + half]) for r in range(2 * half)]


def row_logps(model, batch, ld_alpha=None):
    """(summed log-probs [2B], valid lengths [2B], per-side (logit sum, count)) over real tokens;
    with ld_alpha, tokens from each row's public length on count ld_alpha times (LD-DPO)."""
    logps, lengths, logit_sums = [], [], [[0.0, 0], [0.0, 0]]
    half = len(batch["input_ids"]) // 2
    public = ld_public_lengths(batch) if ld_alpha is not None else None
    for b, ids in enumerate(batch["input_ids"]):
        n = batch["lengths"][b]
        h = model.hidden_states(ids[:n], list(range(n)), None)
        logits = h @ model.w["lm_head.weight"].t()  # [n, V]
        target = torch.tensor(batch["labels"][b][1:n], dtype=torch.int64)
        mask = target != -100
        lp = torch.log_softmax(logits[:-1], dim=-1).gather(1, target.clamp(min=0)[:, None])[:, 0]
        weight = mask.to(lp.dtype)
        if public is not None:
            weight = weight * torch.tensor([1.0 if j < public[b] else ld_alpha for j in range(n - 1)],
                                           dtype=lp.dtype)
        logps.append((lp * weight).sum())
        lengths.append(float(mask.sum()))
        side = logit_sums[b >= half]
        side[0] += float(logits.detach().sum())
        side[1] += logits.numel()
    return torch.stack(logps), torch.tensor(lengths, dtype=torch.float64), logit_sums


def make_case(out, name, models, random_state):
    base, seed, loss, beta, ftx, smoothing, targets = CASES[name]
    bseed, cfg = models[base]
    state = random_state(cfg, bseed)
    lora = lora_fixtures.random_lora(cfg, seed, R, targets)
    scaling = lora_fixtures.scaling_of(R, ALPHA, False)
    fdir = os.path.join(out, "dpo_" + name)
    lora_fixtures.write_adapter(os.path.join(fdir, "adapter"), R, ALPHA, False, targets, "../" + base, lora)
    batch = pair_batch(seed, cfg["vocab_size"])
    leaves = lora_fixtures.lora_leaves(lora, torch.float64)
    policy = lora_fixtures.LoraReferenceLM(cfg, state, leaves, scaling, torch.float64)
    trainer = pref_fixtures.ReferencePrefTrainer(loss, beta, smoothing, ftx)
    ld_alpha = LD_ALPHA.get(name)
    logps, lengths, logit_sums = row_logps(policy, batch, ld_alpha)  # the reference never has ld
    reference = None
    if trainer.use_ref_model:
        with torch.no_grad():
            reference, _, _ = row_logps(ref.ReferenceLM(cfg, state, torch.float64), batch)
    value, metrics = trainer.get_batch_loss_metrics(logps, lengths, reference)
    value.backward()
    metrics = metrics[:6] + [("logits/chosen", logit_sums[0][0] / logit_sums[0][1]),
                             ("logits/rejected", logit_sums[1][0] / logit_sums[1][1])] + metrics[6:]
    grads = {}
    for mod, (a, b) in leaves.items():
        grads[f"base_model.model.{mod}.lora_A.weight"] = a.grad.detach().clone()
        grads[f"base_model.model.{mod}.lora_B.weight"] = b.grad.detach().clone()
    names = sorted(grads)
    gindex = train_fixtures.write_tensors(os.path.join(fdir, "grads.f32"), names, grads)
    train_fixtures._write_json(os.path.join(fdir, "dpo.json"), {
        "name": name, "model_dir": "../" + base, "adapter_dir": "adapter",
        "pref_loss": loss, "pref_beta": beta, "pref_ftx": ftx, "dpo_label_smoothing": smoothing,
        "ld_alpha": ld_alpha,
        "batch": batch, "loss": float(value), "metrics": [[k, float(v)] for k, v in metrics],
        "logps": logps.tolist(), "reference_logps": None if reference is None else reference.tolist(),
        "grads_file": "grads.f32", "grads": gindex, "grad_rtol": 1e-4, "loss_rtol": 1e-5,
        "made_by": "tests/reference/dpo_fixtures.py (LoraReferenceLM, pref_fixtures."
                   "ReferencePrefTrainer, autograd f64)"})
    print(f"dpo_{name:26s} {base} {loss} beta={beta} ftx={ftx} smoothing={smoothing}: "
          f"loss {float(value):.6f}, {len(lora)} LoRA modules")


# Reward model (stage rm): name -> (base model fixture, seed, lora targets). TRL's value head
# v_head.summary = Linear(hidden, 1) on the final hidden state (after the model's norm) of each
# row's last real token; loss = -logsigmoid(chosen - rejected).mean() (LLaMA-Factory's
# PairwiseTrainer.compute_loss); no dropout (the C++ side runs without an RNG).
RM_CASES = {
    "llama_rm": ("llama_gqa", 411, ["q_proj", "v_proj", "down_proj"]),
    "qwen2_rm": ("qwen2", 412, list(lora_fixtures.MODULES)),
}


def last_token_scores(model, batch, w, b):
    """A linear head (w [1, C], b [1]) on the final hidden state (after the norm) of each row's
    last real token; each row computed over its real tokens only."""
    scores = []
    for r, ids in enumerate(batch["input_ids"]):
        n = batch["lengths"][r]
        h = model.hidden_states(ids[:n], list(range(n)), None)  # [n, C]
        scores.append((h[n - 1] @ w.t() + b)[0])
    return torch.stack(scores)


def make_rm_case(out, name, models, random_state):
    base, seed, targets = RM_CASES[name]
    bseed, cfg = models[base]
    state = random_state(cfg, bseed)
    lora = lora_fixtures.random_lora(cfg, seed, R, targets)
    scaling = lora_fixtures.scaling_of(R, ALPHA, False)
    fdir = os.path.join(out, "dpo_" + name)
    adir = os.path.join(fdir, "adapter")
    lora_fixtures.write_adapter(adir, R, ALPHA, False, targets, "../" + base, lora)
    g = torch.Generator().manual_seed(seed + 5000)
    c = cfg["hidden_size"]
    head_w = (torch.rand(1, c, generator=g) * 2 - 1) / c ** 0.5
    head_b = (torch.rand(1, generator=g) * 2 - 1) / c ** 0.5
    safetensors_py.save_file({"v_head.summary.weight": head_w, "v_head.summary.bias": head_b},
                             os.path.join(adir, "value_head.safetensors"), metadata={"format": "pt"})
    batch = pair_batch(seed, cfg["vocab_size"])
    leaves = lora_fixtures.lora_leaves(lora, torch.float64)
    w = head_w.double().clone().requires_grad_(True)
    b = head_b.double().clone().requires_grad_(True)
    model = lora_fixtures.LoraReferenceLM(cfg, state, leaves, scaling, torch.float64)
    scores = last_token_scores(model, batch, w, b)
    half = len(scores) // 2
    chosen, rejected = scores[:half], scores[half:]
    loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
    loss.backward()
    grads = {}
    for mod, (a, bb) in leaves.items():
        grads[f"base_model.model.{mod}.lora_A.weight"] = a.grad.detach().clone()
        grads[f"base_model.model.{mod}.lora_B.weight"] = bb.grad.detach().clone()
    names = sorted(grads)
    gindex = train_fixtures.write_tensors(os.path.join(fdir, "grads.f32"), names, grads)
    train_fixtures._write_json(os.path.join(fdir, "rm.json"), {
        "name": name, "model_dir": "../" + base, "adapter_dir": "adapter", "batch": batch,
        "loss": float(loss), "scores": scores.tolist(),
        "head_grad": {"weight": w.grad[0].tolist(), "bias": float(b.grad[0])},
        "grads_file": "grads.f32", "grads": gindex, "grad_rtol": 1e-4, "loss_rtol": 1e-5,
        "made_by": "tests/reference/dpo_fixtures.py (LoraReferenceLM + a torch value head, autograd f64)"})
    print(f"dpo_{name:26s} {base} rm: loss {float(loss):.6f}, scores {[round(float(x), 4) for x in scores]}")


# LLaMA-Factory v1's reward model (v1 `stage=rm`, its rm_trainer): name -> (base model fixture,
# seed). The model is HF's *ForTokenClassification with one label, written here as
# save_pretrained lays one out (config.json naming that architecture with id2label of one label,
# the decoder's weights and score.weight / score.bias, no lm_head); score = Linear(hidden, 1) on
# the final hidden state (after the norm) of each side's last token (v1 scores the last token of
# each half of its concatenated row, whose block-diagonal mask and restarted positions make each
# half the row computed alone); loss = -logsigmoid(chosen - rejected).mean() over the micro-batch,
# times its scored tokens (v1's base_trainer weighs a micro-batch by them; the step divides by its
# total). Gradients of every decoder weight and of the score head, autograd in f64.
V1_RM_CASES = {
    "llama_v1_rm": ("llama_gqa", 431),
    "qwen2_v1_rm": ("qwen2", 432),
}


def make_v1_rm_case(out, name, models, random_state):
    base, seed = V1_RM_CASES[name]
    bseed, cfg = models[base]
    state = random_state(cfg, bseed)
    fdir = os.path.join(out, "dpo_" + name)
    mdir = os.path.join(fdir, "model")
    os.makedirs(mdir, exist_ok=True)
    g = torch.Generator().manual_seed(seed + 5000)
    c = cfg["hidden_size"]
    # Larger than v1's initialisation (N(0, 1/(10 c)^2)) so the scores, and the loss, move.
    score_w = torch.randn(1, c, generator=g) * 0.5
    score_b = torch.randn(1, generator=g) * 0.5
    tc = dict(cfg)
    tc["architectures"] = [cfg["architectures"][0].replace("ForCausalLM", "ForTokenClassification")]
    tc["id2label"] = {"0": "LABEL_0"}
    tc["label2id"] = {"LABEL_0": 0}
    tc["classifier_dropout"] = 0.0
    train_fixtures._write_json(os.path.join(mdir, "config.json"), tc)
    saved = {k: v for k, v in state.items() if k != "lm_head.weight"}
    saved["score.weight"], saved["score.bias"] = score_w, score_b
    safetensors_py.save_file(saved, os.path.join(mdir, "model.safetensors"), metadata={"format": "pt"})
    batch = pair_batch(seed, cfg["vocab_size"])
    model, leaves = train_fixtures.leaf_model(cfg, state, torch.float64)
    w = score_w.double().clone().requires_grad_(True)
    b = score_b.double().clone().requires_grad_(True)
    scores = last_token_scores(model, batch, w, b)
    half = len(scores) // 2
    mean = -torch.nn.functional.logsigmoid(scores[:half] - scores[half:]).mean()
    scored = sum(1 for row in batch["labels"] for t in row[1:] if t != -100)
    loss = mean * scored
    loss.backward()
    grads = {k: (v.grad if v.grad is not None else torch.zeros_like(v)).detach().clone()
             for k, v in leaves.items() if k != "lm_head.weight"}
    grads["score.weight"], grads["score.bias"] = w.grad.detach().clone(), b.grad.detach().clone()
    names = sorted(grads)
    gindex = train_fixtures.write_tensors(os.path.join(fdir, "grads.f32"), names, grads)
    train_fixtures._write_json(os.path.join(fdir, "v1rm.json"), {
        "name": name, "model_dir": "model", "batch": batch, "loss": float(loss), "scored": scored,
        "scores": scores.tolist(), "grads_file": "grads.f32", "grads": gindex, "grad_rtol": 1e-4,
        "loss_rtol": 1e-5,
        "made_by": "tests/reference/dpo_fixtures.py (ReferenceLM + a torch score head, autograd f64)"})
    print(f"dpo_{name:26s} {base} v1 rm: loss {float(loss):.6f} ({scored} scored tokens), "
          f"scores {[round(float(x), 4) for x in scores]}")


# KTO (stage kto): name -> (base model fixture, seed, beta, (desirable weight, undesirable), ftx).
# Example i's target row is prompt_i + response_i, its KL row prompt_i + response_{i-1} (the first
# takes the last: LLaMA-Factory's rotation); the micro-batch holds the target rows, then the KL rows.
KTO_CASES = {
    "llama_kto": ("llama_gqa", 421, 0.1, (1.0, 1.0), 0.0),
    "qwen2_kto_weighted_ftx": ("qwen2", 422, 0.3, (1.5, 0.7), 0.4),
}
KTO_EXAMPLES = ((4, 5, True), (6, 2, False), (3, 4, True), (5, 3, False))  # prompt, response, desirable


def kto_batch(seed, vocab):
    g = torch.Generator().manual_seed(seed + 7000)
    prompts = [[1] + torch.randint(3, vocab, (p - 1,), generator=g).tolist() for p, _, _ in KTO_EXAMPLES]
    responses = [torch.randint(3, vocab, (n,), generator=g).tolist() for _, n, _ in KTO_EXAMPLES]
    rows = [(prompts[i], responses[i]) for i in range(len(prompts))]
    rows += [(prompts[i], responses[i - 1]) for i in range(len(prompts))]
    t = max(len(p) + len(r) for p, r in rows)
    ids = [p + r + [0] * (t - len(p) - len(r)) for p, r in rows]
    labels = [[-100] * len(p) + r + [-100] * (t - len(p) - len(r)) for p, r in rows]
    return {"input_ids": ids, "labels": labels, "position_ids": [list(range(t))] * len(rows),
            "segment_ids": None, "lengths": [len(p) + len(r) for p, r in rows],
            "tags": [int(d) for _, _, d in KTO_EXAMPLES]}


def make_kto_case(out, name, models, random_state):
    base, seed, beta, (wd, wu), ftx = KTO_CASES[name]
    bseed, cfg = models[base]
    state = random_state(cfg, bseed)
    targets = list(lora_fixtures.MODULES)
    lora = lora_fixtures.random_lora(cfg, seed, R, targets)
    scaling = lora_fixtures.scaling_of(R, ALPHA, False)
    fdir = os.path.join(out, "dpo_" + name)
    lora_fixtures.write_adapter(os.path.join(fdir, "adapter"), R, ALPHA, False, targets, "../" + base, lora)
    batch = kto_batch(seed, cfg["vocab_size"])
    n = len(KTO_EXAMPLES)
    leaves = lora_fixtures.lora_leaves(lora, torch.float64)
    policy = lora_fixtures.LoraReferenceLM(cfg, state, leaves, scaling, torch.float64)
    logps, lengths, _ = row_logps(policy, batch)
    with torch.no_grad():
        reference, _, _ = row_logps(ref.ReferenceLM(cfg, state, torch.float64), batch)
    trainer = kto_fixtures.ReferenceKtoTrainer(beta, wd, wu, ftx)
    tb = {"length": lengths[:n], "kl_length": lengths[n:],
          "kto_tags": torch.tensor([bool(x) for x in batch["tags"]])}
    loss, metrics = trainer.get_batch_loss_metrics(tb, logps[:n], logps[n:].detach(), reference[:n], reference[n:])
    loss.backward()
    grads = {}
    for mod, (a, b) in leaves.items():
        grads[f"base_model.model.{mod}.lora_A.weight"] = a.grad.detach().clone()
        grads[f"base_model.model.{mod}.lora_B.weight"] = b.grad.detach().clone()
    names = sorted(grads)
    gindex = train_fixtures.write_tensors(os.path.join(fdir, "grads.f32"), names, grads)
    train_fixtures._write_json(os.path.join(fdir, "kto.json"), {
        "name": name, "model_dir": "../" + base, "adapter_dir": "adapter", "pref_beta": beta,
        "kto_chosen_weight": wd, "kto_rejected_weight": wu, "pref_ftx": ftx, "batch": batch,
        "loss": float(loss), "stored_metrics": [[k, float(v)] for k, v in metrics],
        "grads_file": "grads.f32", "grads": gindex, "grad_rtol": 1e-4, "loss_rtol": 1e-5,
        "made_by": "tests/reference/dpo_fixtures.py (LoraReferenceLM, kto_fixtures.ReferenceKtoTrainer, "
                   "autograd f64)"})
    print(f"dpo_{name:26s} {base} kto beta={beta} weights={wd},{wu} ftx={ftx}: loss {float(loss):.6f}")


def make_all(out, models, random_state):
    for name in CASES:
        make_case(out, name, models, random_state)
    for name in RM_CASES:
        make_rm_case(out, name, models, random_state)
    for name in V1_RM_CASES:
        make_v1_rm_case(out, name, models, random_state)
    for name in KTO_CASES:
        make_kto_case(out, name, models, random_state)
