"""Training fixtures for tests/reference/train_parity_test.cpp, made by make_fixtures.py in its
process: per-parameter gradients of the tiny family models and five steps of a reference trainer.

Expected values come from hf_llama_reference.py run under torch autograd in float64 from the
stored float32 weights (the exact gradient of the f32 model, up to f64 rounding); the same
computation in float32 is recorded beside it as the size of f32 noise. Losses follow HF: labels
are not shifted, position t is scored against labels[t + 1], -100 is ignored, and the loss is
the sum over scored tokens divided by their count.

Files (offsets count f32 elements; names are HF's; tied embeddings have one entry):
  DIR/<model>/grad_<variant>.json  batch, loss_sum, count, tensors [{name, shape, offset}], noise
  DIR/<model>/grad_<variant>.f32   gradients of loss_sum / count, concatenated
  DIR/<moe model>/grad_aux.{json,f32}  the same with the router load-balancing loss added
                                   (loss_sum / count + router_aux_loss_coef * aux_loss), padded rows
  DIR/train_steps/{config.json, model.safetensors, steps.json, final_weights.f32}
"""
import json
import os

import torch

import hf_llama_reference as ref
import safetensors_py

GRAD_B, GRAD_T = 2, 13
# Ignored labels per row of the plain batch (index 0 is never scored after the shift anyway).
PLAIN_IGNORED = ((4, 9), (2, 11, 12))
# Packed rows: segment lengths; each segment's first label is -100 (no cross-sample target).
PACKED_SEGMENTS = ((5, 4, 4), (7, 6))
PACKED_EXTRA_IGNORED = ((), (10,))
# The router load-balancing loss fixture (mixture-of-experts models): real tokens per row, and a
# coefficient large enough that its gradient is a sizeable part of every router's.
AUX_ROW_LENGTHS = (GRAD_T, 9)
AUX_COEF = 0.25

# The five-step pretraining reference (HF Trainer defaults except where the test sets them).
STEPS = dict(model="llama_gqa", seed=106, data_seed=107, steps=5, batch=2, tokens=16,
             lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, warmup_steps=2,
             max_grad_norm=1.0, scheduler="linear")


def _write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


# ------------------------------------------------------------------------------- reference loss


def leaf_model(cfg, state, dtype):
    """A ReferenceLM whose weights are leaf tensors requiring grad; returns (model, leaves).
    Tied embeddings: lm_head reads the embedding leaf, so its gradient lands there once."""
    leaves = {k: v.detach().to(dtype).clone().requires_grad_(True) for k, v in state.items()}
    model = ref.ReferenceLM(cfg, leaves, dtype)
    assert all(model.w[k] is leaves[k] for k in leaves), "ReferenceLM copied its weights"
    return model, leaves


def batch_loss(model, batch):
    """(loss_sum, count) over B rows: Σ_t -log p(labels[t + 1] | ids[..t]), -100 skipped. With
    row_lengths, each row's padding after its length is not run at all."""
    total, count = 0.0, 0
    segs = batch.get("segment_ids")
    for b, ids in enumerate(batch["input_ids"]):
        n = batch["row_lengths"][b] if batch.get("row_lengths") else len(ids)
        h = model.hidden_states(ids[:n], batch["position_ids"][b][:n], segs[b][:n] if segs else None)
        logits = h @ model.w["lm_head.weight"].t()  # [T, V]
        target = torch.tensor(batch["labels"][b][1:n], dtype=torch.int64)  # [T-1]
        total = total + torch.nn.functional.cross_entropy(
            logits[:-1], target, ignore_index=-100, reduction="sum")
        count += int((target != -100).sum())
    return total, count


def plain_batch(seed, vocab):
    g = torch.Generator().manual_seed(seed + 1000)
    ids = torch.randint(3, vocab, (GRAD_B, GRAD_T), generator=g)
    ids[:, 0] = 1
    labels = ids.clone()
    for b, cols in enumerate(PLAIN_IGNORED):
        labels[b, list(cols)] = -100
    pos = [list(range(GRAD_T))] * GRAD_B
    return {"input_ids": ids.tolist(), "labels": labels.tolist(), "position_ids": pos,
            "segment_ids": None}


def packed_batch(seed, vocab):
    g = torch.Generator().manual_seed(seed + 2000)
    ids = torch.randint(3, vocab, (GRAD_B, GRAD_T), generator=g)
    labels, pos, segs = ids.clone(), [], []
    for b, lengths in enumerate(PACKED_SEGMENTS):
        assert sum(lengths) == GRAD_T
        row_pos, row_seg, start = [], [], 0
        for s, n in enumerate(lengths):
            ids[b, start] = 1  # each sample starts with BOS
            labels[b, start] = -100
            row_pos += list(range(n))
            row_seg += [s] * n
            start += n
        labels[b, list(PACKED_EXTRA_IGNORED[b])] = -100
        pos.append(row_pos)
        segs.append(row_seg)
    return {"input_ids": ids.tolist(), "labels": labels.tolist(), "position_ids": pos,
            "segment_ids": segs}


def reference_grads(cfg, state, batch, dtype):
    """(loss_sum, count, {name: grad of loss_sum / count}) in dtype."""
    model, leaves = leaf_model(cfg, state, dtype)
    loss_sum, count = batch_loss(model, batch)
    (loss_sum / count).backward()
    # A parameter the batch never reached (an expert no token was routed to) has a zero gradient.
    return float(loss_sum), count, {k: v.grad if v.grad is not None else torch.zeros_like(v)
                                    for k, v in leaves.items()}


def load_balancing_loss(routes, num_experts):
    """transformers' load_balancing_loss_func (Switch Transformer eq. 4-6) over every sparse
    layer's routing of the real tokens: E * sum_e f_e * P_e, f_e the fraction of (layer, token)
    rows that chose expert e among their top k, P_e the mean of its softmax probability. Written
    from the paper's definition (one-hot counts over the concatenated rows), not HF's mask code."""
    probs = torch.cat([p for p, _ in routes])  # [L*N, E]
    chosen = torch.cat([c for _, c in routes])  # [L*N, k]
    frac = torch.nn.functional.one_hot(chosen, num_experts).sum(dim=1).to(probs.dtype).mean(dim=0)
    return num_experts * (frac * probs.mean(dim=0)).sum()


def aux_batch(seed, vocab):
    """The plain batch of another seed, row 1 padded after AUX_ROW_LENGTHS[1] tokens (pad id 0,
    labels -100): the padding must count neither in the token loss nor in the routing."""
    b = plain_batch(seed + 7, vocab)
    for r, n in enumerate(AUX_ROW_LENGTHS):
        for t in range(n, GRAD_T):
            b["input_ids"][r][t], b["labels"][r][t] = 0, -100
    b["row_lengths"] = list(AUX_ROW_LENGTHS)
    return b


def reference_aux_grads(cfg, state, batch, dtype, coef):
    """(loss_sum, count, aux, {name: grad of loss_sum / count + coef * aux}): HF's training loss
    with output_router_logits (the token mean plus router_aux_loss_coef * aux)."""
    model, leaves = leaf_model(cfg, state, dtype)
    model.routes = []
    loss_sum, count = batch_loss(model, batch)
    aux = load_balancing_loss(model.routes, cfg["num_experts"])
    (loss_sum / count + coef * aux).backward()
    return float(loss_sum), count, float(aux), {k: v.grad if v.grad is not None else torch.zeros_like(v)
                                                for k, v in leaves.items()}


def make_aux_fixture(out, name, cfg, state, seed):
    batch = aux_batch(seed, cfg["vocab_size"])
    loss64, count, aux64, g64 = reference_aux_grads(cfg, state, batch, torch.float64, AUX_COEF)
    loss32, _, aux32, g32 = reference_aux_grads(cfg, state, batch, torch.float32, AUX_COEF)
    worst = max(((rel_err(g32[k], g64[k]), k) for k in g64))
    fdir = os.path.join(out, name)
    index = write_tensors(os.path.join(fdir, "grad_aux.f32"), list(state), g64)
    _write_json(os.path.join(fdir, "grad_aux.json"), {
        "name": name, "variant": "aux", "model_dir": ".", "batch": batch,
        "loss_sum": loss64, "count": count, "router_aux_loss_coef": AUX_COEF, "aux_loss": aux64,
        "tensors_file": "grad_aux.f32", "tensors": index, "grad_rtol": 1e-4, "loss_rtol": 1e-5,
        "f32_reference_noise": {"loss_sum_rel": abs(loss32 - loss64) / abs(loss64),
                                "aux_rel": abs(aux32 - aux64) / abs(aux64),
                                "worst_grad_rel": worst[0], "worst_grad_name": worst[1]},
        "made_by": "tests/reference/train_fixtures.py (hf_llama_reference.py + load_balancing_loss, f64)"})
    print(f"{name:16s} grads aux    loss_sum {loss64:.6f} over {count} tokens, aux {aux64:.6f} "
          f"(coef {AUX_COEF}); f32 reference vs f64: worst rel {worst[0]:.1e} ({worst[1]})")


def rel_err(a, b):
    a, b = a.to(torch.float64), b.to(torch.float64)
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def write_tensors(path, names, tensors):
    """Concatenates f32 tensors into path; returns the index [{name, shape, offset}]."""
    index, offset = [], 0
    with open(path, "wb") as f:
        for n in names:
            t = tensors[n].detach().to(torch.float32).contiguous()
            f.write(t.numpy().astype("<f4").tobytes())
            index.append({"name": n, "shape": list(t.shape), "offset": offset})
            offset += t.numel()
    return index


def make_grad_fixture(out, name, cfg, state, seed, variant):
    batch = (packed_batch if variant == "packed" else plain_batch)(seed, cfg["vocab_size"])
    loss64, count, g64 = reference_grads(cfg, state, batch, torch.float64)
    loss32, count32, g32 = reference_grads(cfg, state, batch, torch.float32)
    assert count == count32
    worst = max(((rel_err(g32[k], g64[k]), k) for k in g64))
    fdir = os.path.join(out, name)
    index = write_tensors(os.path.join(fdir, f"grad_{variant}.f32"), list(state), g64)
    _write_json(os.path.join(fdir, f"grad_{variant}.json"), {
        "name": name, "variant": variant, "model_dir": ".", "batch": batch,
        "loss_sum": loss64, "count": count, "tensors_file": f"grad_{variant}.f32",
        "tensors": index, "grad_rtol": 1e-4, "loss_rtol": 1e-5,
        "f32_reference_noise": {"loss_sum_rel": abs(loss32 - loss64) / abs(loss64),
                                "worst_grad_rel": worst[0], "worst_grad_name": worst[1]},
        "made_by": "tests/reference/train_fixtures.py (hf_llama_reference.py, autograd, f64)"})
    print(f"{name:16s} grads {variant:6s} loss_sum {loss64:.6f} over {count} tokens, "
          f"{len(index)} tensors; f32 reference vs f64: worst rel {worst[0]:.1e} ({worst[1]})")


# ------------------------------------------------------------------------------- five steps


def no_decay(name):
    # HF Trainer.get_decay_parameter_names, for these models: no decay for biases and norms.
    return "bias" in name or "norm" in name


def linear_lambda(step, warmup, total):
    # transformers.optimization._get_linear_schedule_with_warmup_lr_lambda.
    if step < warmup:
        return float(step) / float(max(1, warmup))
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


def run_steps(cfg, state, blocks, dtype):
    """HF-style pretraining steps; returns per-step records and the final weights."""
    s = STEPS
    model, leaves = leaf_model(cfg, state, dtype)
    groups = [{"params": [p for n, p in leaves.items() if not no_decay(n)],
               "weight_decay": s["weight_decay"]},
              {"params": [p for n, p in leaves.items() if no_decay(n)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=s["lr"], betas=s["betas"], eps=s["eps"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: linear_lambda(k, s["warmup_steps"], s["steps"]))
    records = []
    for step, ids in enumerate(blocks):
        batch = {"input_ids": ids, "labels": ids, "segment_ids": None,
                 "position_ids": [list(range(len(ids[0])))] * len(ids)}
        loss_sum, count = batch_loss(model, batch)
        (loss_sum / count).backward()
        norm = torch.nn.utils.clip_grad_norm_(list(leaves.values()), s["max_grad_norm"])
        lr = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        opt.zero_grad()
        records.append({"step": step, "loss": float(loss_sum) / count, "count": count,
                        "grad_norm": float(norm), "lr": lr})
    return records, {k: v.detach() for k, v in leaves.items()}


def make_steps_fixture(out, cfg, state):
    s = STEPS
    fdir = os.path.join(out, "train_steps")
    os.makedirs(fdir, exist_ok=True)
    _write_json(os.path.join(fdir, "config.json"), cfg)
    safetensors_py.save_file(state, os.path.join(fdir, "model.safetensors"),
                             metadata={"format": "pt"})
    g = torch.Generator().manual_seed(s["data_seed"])
    blocks = torch.randint(3, cfg["vocab_size"], (s["steps"], s["batch"], s["tokens"]),
                           generator=g)
    blocks[:, :, 0] = 1  # pt packing puts BOS first in each block
    blocks = blocks.tolist()
    rec64, w64 = run_steps(cfg, state, blocks, torch.float64)
    rec32, w32 = run_steps(cfg, state, blocks, torch.float32)
    index = write_tensors(os.path.join(fdir, "final_weights.f32"), list(state), w64)
    _write_json(os.path.join(fdir, "steps.json"), {
        "model_dir": ".", "blocks": blocks, "steps": rec64, "tensors_file": "final_weights.f32",
        "tensors": index, "no_decay": [n for n in state if no_decay(n)],
        "trainer": {k: v for k, v in s.items() if k not in ("seed", "data_seed", "model")},
        "loss_rtol": 1e-4, "weights_rtol": 1e-4, "update_rtol": 1e-3,
        "f32_reference_noise": {
            "loss_rel": max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(rec32, rec64)),
            "weights_worst_rel": max(rel_err(w32[k], w64[k]) for k in w64)},
        "made_by": "tests/reference/train_fixtures.py (torch.optim.AdamW, LambdaLR, "
                   "clip_grad_norm_, f64)"})
    print("train_steps      " + "; ".join(
        f"step {r['step']}: loss {r['loss']:.6f} |g| {r['grad_norm']:.4f} lr {r['lr']:.2e}"
        for r in rec64))
    moved = max(rel_err(w64[k], state[k]) for k in state)
    print(f"train_steps      weights moved up to {moved:.2e} rel; f32 reference vs f64: loss "
          f"{max(abs(a['loss'] - b['loss']) / b['loss'] for a, b in zip(rec32, rec64)):.1e}, "
          f"weights {max(rel_err(w32[k], w64[k]) for k in w64):.1e}")


def make_all(out, models, random_state, packed_model):
    """Every training fixture; models: name -> (seed, cfg), fixtures already made for them."""
    for name, (seed, cfg) in models.items():
        make_grad_fixture(out, name, cfg, random_state(cfg, seed), seed, "plain")
    seed, cfg = models[packed_model]
    make_grad_fixture(out, packed_model, cfg, random_state(cfg, seed), seed, "packed")
    for name, (seed, cfg) in models.items():
        if cfg.get("num_experts", 0) > 0:
            make_aux_fixture(out, name, cfg, random_state(cfg, seed), seed)
    cfg = models[STEPS["model"]][1]
    make_steps_fixture(out, cfg, random_state(cfg, STEPS["seed"]))


# ------------------------------------------------------------------------------- self-test


def selftest(check, models, random_state):
    """Checks the training reference against independent computations."""
    for name in ("qwen2", "qwen3", "llama_gqa"):
        _selftest_central_differences(check, name, *models[name], random_state)
    _selftest_packing(check, *models["llama_gqa"], random_state)
    want = [0.0, 0.5, 1.0, 2.0 / 3.0, 1.0 / 3.0]
    got = [linear_lambda(k, 2, 5) for k in range(5)]
    check("linear schedule, warmup 2 of 5", got == want, f"{got}")


def _selftest_central_differences(check, name, seed, cfg, random_state):
    # d(loss_sum / count)/dw by autograd vs (f(w + h) - f(w - h)) / 2h in f64, a few coordinates
    # of tensors that cover the embedding (tied for qwen2), biases, qk-norm and the final norm.
    state = random_state(cfg, seed)
    batch = (packed_batch if name == "llama_gqa" else plain_batch)(seed, cfg["vocab_size"])
    _, count, grads = reference_grads(cfg, state, batch, torch.float64)
    w64 = {k: v.to(torch.float64) for k, v in state.items()}
    picks = [n for n in w64 if n.endswith(("embed_tokens.weight", "lm_head.weight",
                                           "layers.0.self_attn.q_proj.bias", "k_norm.weight",
                                           "layers.1.mlp.down_proj.weight", "model.norm.weight",
                                           "layers.0.self_attn.k_proj.weight"))]
    g = torch.Generator().manual_seed(seed)
    worst, h = 0.0, 1e-6
    for n in picks:
        flat = w64[n].view(-1)
        for i in torch.randint(0, flat.numel(), (3,), generator=g).tolist():
            if n.endswith("embed_tokens.weight"):  # a row that the batch uses
                i = batch["input_ids"][0][3] * w64[n].shape[1] + i % w64[n].shape[1]
            vals = []
            for sgn in (1, -1):
                w = {k: v.clone() for k, v in w64.items()}
                w[n].view(-1)[i] += sgn * h
                with torch.no_grad():
                    vals.append(float(batch_loss(ref.ReferenceLM(cfg, w, torch.float64),
                                                 batch)[0]) / count)
            fd = (vals[0] - vals[1]) / (2 * h)
            an = float(grads[n].view(-1)[i])
            worst = max(worst, abs(fd - an) / max(abs(an), 1e-3))
    check(f"{name} reference grads vs central differences (f64, {len(picks)} tensors)",
          worst < 1e-6, f"worst rel {worst:.1e}")


def _selftest_packing(check, seed, cfg, random_state):
    # A packed row's loss equals the sum of its segments run as separate sequences.
    state = random_state(cfg, seed)
    batch = packed_batch(seed, cfg["vocab_size"])
    model = ref.ReferenceLM(cfg, state, torch.float64)
    with torch.no_grad():
        packed, count = batch_loss(model, batch)
        split, split_count = 0.0, 0
        for b, lengths in enumerate(PACKED_SEGMENTS):
            start = 0
            for n in lengths:
                row = {"input_ids": [batch["input_ids"][b][start:start + n]],
                       "labels": [batch["labels"][b][start:start + n]],
                       "position_ids": [list(range(n))], "segment_ids": None}
                s, c = batch_loss(model, row)
                split, split_count = split + float(s), split_count + c
                start += n
    d = abs(float(packed) - split) / abs(split)
    check("packed rows vs segments run separately (f64)", d < 1e-12 and count == split_count,
          f"loss rel {d:.1e}, count {count} vs {split_count}")
