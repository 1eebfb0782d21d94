#!/usr/bin/python3
"""Makes the model-parity fixtures for tests/reference/parity_test.cpp in one Python process.

For each tiny random model: DIR/<name>/{config.json, model.safetensors, meta.json, logits.f32}.
For the bundled stories260K (--stories MODEL_DIR, skipped when absent): DIR/stories260K/
{meta.json, logits.f32, perplexity.json}; its weights stay in MODEL_DIR.
Training fixtures (train_fixtures.py, for train_parity_test.cpp): DIR/<name>/grad_plain.{json,f32}
per tiny model, DIR/llama_gqa/grad_packed.{json,f32} and DIR/train_steps/ (five AdamW steps).
LoRA fixtures (lora_fixtures.py, for lora_parity_test.cpp): DIR/lora_<case>/ (a PEFT-layout
adapter, its A/B gradients, one AdamW step and the adapted logits).
Preference-loss fixtures (pref_fixtures.py, for pref_loss_parity_test.cpp): DIR/pref/pref_loss.json
KTO-loss fixtures (kto_fixtures.py, for kto_loss_parity_test.cpp): DIR/kto/kto_loss.json
DPO fixtures (dpo_fixtures.py, for dpo_parity_test.cpp): DIR/dpo_<case>/ (a LoRA policy over a tiny
model, one micro-batch of pairs: loss, metrics and the adapter's gradients).
Expected values come from hf_llama_reference.py, an independent PyTorch forward (float32, as HF
runs it). Run: /usr/bin/python3 tests/reference/make_fixtures.py --out DIR [--stories MODEL_DIR]
[--selftest]. Needs Debian's python3-torch (apt-get install python3-torch).
"""
import argparse
import json
import math
import os
import sys
import time

try:
    import torch
except ImportError:
    sys.stderr.write(
        "make_fixtures.py: cannot import torch under %s.\n"
        "The reference fixtures need Debian's PyTorch: apt-get install python3-torch\n"
        "(run with /usr/bin/python3; see DEVELOPERS.md).\n" % sys.executable)
    sys.exit(2)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_llama_reference as ref  # noqa: E402
import lora_fixtures  # noqa: E402
import pref_fixtures  # noqa: E402
import kto_fixtures  # noqa: E402
import dpo_fixtures  # noqa: E402
import safetensors_py  # noqa: E402
import train_fixtures  # noqa: E402

PROMPT_LEN = 19
ATOL = 1e-4
STORIES_PPL_LEN = 150
STORIES_PPL_RUNS = ((64, 32), (64, 64))  # (max_length, stride)

_COMMON = {"attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
           "initializer_range": 0.02, "num_hidden_layers": 2, "torch_dtype": "float32",
           "use_cache": True}

# name -> (seed, config as HF writes it for that architecture).
MODELS = {
    "llama_gqa": (101, dict(_COMMON, **{
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "head_dim": 16, "hidden_size": 64, "intermediate_size": 88,
        "max_position_embeddings": 512, "mlp_bias": False, "num_attention_heads": 4,
        "num_key_value_heads": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        # Thresholds chosen so that with D=16 the bands high / blended / divided all occur and
        # matter within 19 positions.
        "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 64, "rope_type": "llama3"},
        "rope_theta": 10000.0, "tie_word_embeddings": False, "transformers_version": "4.46.3",
        "vocab_size": 128})),
    "llama_linear": (102, dict(_COMMON, **{
        # An older-style llama config: no head_dim, rope_scaling with "type".
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "hidden_size": 32, "intermediate_size": 88, "max_position_embeddings": 256,
        "num_attention_heads": 4, "num_key_value_heads": 4, "pretraining_tp": 1,
        "rms_norm_eps": 1e-06, "rope_scaling": {"factor": 2.0, "type": "linear"},
        "rope_theta": 10000.0, "tie_word_embeddings": False, "transformers_version": "4.36.2",
        "vocab_size": 97})),
    "qwen2": (103, dict(_COMMON, **{
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 48,
        "intermediate_size": 88, "max_position_embeddings": 32768, "max_window_layers": 2,
        "num_attention_heads": 6, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 32768,
        "tie_word_embeddings": True, "transformers_version": "4.46.3",
        "use_sliding_window": False, "vocab_size": 131})),
    "qwen3": (104, dict(_COMMON, **{
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
        "head_dim": 16, "hidden_size": 48, "intermediate_size": 88,
        "max_position_embeddings": 40960, "max_window_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False,
        "transformers_version": "4.51.3", "use_sliding_window": False, "vocab_size": 151})),
    "mistral": (105, dict(_COMMON, **{
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "head_dim": 8,
        "hidden_size": 64, "intermediate_size": 88, "max_position_embeddings": 32768,
        "num_attention_heads": 8, "num_key_value_heads": 2, "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False,
        "transformers_version": "4.46.3", "vocab_size": 256})),
    # YaRN in Qwen's documented form (original length = max_position_embeddings), short enough
    # that the 19-token prompt runs past it and the ramp reaches the fast dimensions.
    "qwen2_yarn": (106, dict(_COMMON, **{
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 48,
        "intermediate_size": 88, "max_position_embeddings": 16, "max_window_layers": 2,
        "num_attention_heads": 6, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 16, "type": "yarn"},
        "rope_theta": 10000.0, "sliding_window": 32768, "tie_word_embeddings": True,
        "transformers_version": "4.46.3", "use_sliding_window": False, "vocab_size": 131})),
    # Dynamic NTK: 19 positions past max_position_embeddings 8 grow the base.
    "llama_dynamic": (107, dict(_COMMON, **{
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "hidden_size": 32, "intermediate_size": 88, "max_position_embeddings": 8,
        "num_attention_heads": 4, "num_key_value_heads": 2, "pretraining_tp": 1,
        "rms_norm_eps": 1e-06, "rope_scaling": {"factor": 2.0, "type": "dynamic"},
        "rope_theta": 10000.0, "tie_word_embeddings": False, "transformers_version": "4.46.3",
        "vocab_size": 97})),
    # Mixture of experts: Qwen3-MoE (q/k norm, renormalised top-k) with a dense layer between
    # sparse ones (mlp_only_layers), and Qwen2-MoE (q/k/v bias, raw top-k probabilities, a
    # shared expert behind its sigmoid gate).
    "qwen3_moe": (108, dict(_COMMON, **{
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_bias": False,
        "decoder_sparse_step": 1, "head_dim": 16, "hidden_size": 48, "intermediate_size": 88,
        "max_position_embeddings": 40960, "mlp_only_layers": [1], "moe_intermediate_size": 24,
        "norm_topk_prob": True, "num_attention_heads": 4, "num_experts": 8,
        "num_experts_per_tok": 2, "num_hidden_layers": 3, "num_key_value_heads": 2,
        "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
        "tie_word_embeddings": False, "transformers_version": "4.51.3",
        "use_sliding_window": False, "vocab_size": 151})),
    "qwen2_moe": (109, dict(_COMMON, **{
        "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
        "decoder_sparse_step": 1, "hidden_size": 48, "intermediate_size": 88,
        "max_position_embeddings": 32768, "max_window_layers": 2, "mlp_only_layers": [],
        "moe_intermediate_size": 20, "norm_topk_prob": False, "num_attention_heads": 6,
        "num_experts": 6, "num_experts_per_tok": 3, "num_key_value_heads": 2,
        "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": 40, "sliding_window": 32768,
        "tie_word_embeddings": True, "transformers_version": "4.46.3",
        "use_sliding_window": False, "vocab_size": 131})),
}
BF16_VARIANT = ("llama_gqa_bf16", "llama_gqa")  # (name, f32 model it rounds)


def param_shapes(cfg):
    """HF parameter names and shapes, in a fixed order (the order weights are drawn)."""
    c, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    h = cfg["num_attention_heads"]
    hkv = cfg.get("num_key_value_heads") or h
    d = ref.head_dim_of(cfg)
    qkv_bias = cfg["model_type"] in ("qwen2", "qwen2_moe") or cfg.get("attention_bias", False)
    shapes = [("model.embed_tokens.weight", [v, c])]
    for li in range(cfg["num_hidden_layers"]):
        a = f"model.layers.{li}.self_attn."
        m = f"model.layers.{li}.mlp."
        shapes += [(a + "q_proj.weight", [h * d, c]), (a + "k_proj.weight", [hkv * d, c]),
                   (a + "v_proj.weight", [hkv * d, c]), (a + "o_proj.weight", [c, h * d])]
        if qkv_bias:
            shapes += [(a + "q_proj.bias", [h * d]), (a + "k_proj.bias", [hkv * d]),
                       (a + "v_proj.bias", [hkv * d])]
        if cfg.get("attention_bias", False):  # llama-style attention_bias also biases o_proj
            shapes.append((a + "o_proj.bias", [c]))
        if cfg["model_type"] in ("qwen3", "qwen3_moe"):
            shapes += [(a + "q_norm.weight", [d]), (a + "k_norm.weight", [d])]
        if ref.is_sparse_layer(cfg, li):
            fm = cfg["moe_intermediate_size"]
            shapes.append((m + "gate.weight", [cfg["num_experts"], c]))
            for e in range(cfg["num_experts"]):
                x = m + f"experts.{e}."
                shapes += [(x + "gate_proj.weight", [fm, c]), (x + "up_proj.weight", [fm, c]),
                           (x + "down_proj.weight", [c, fm])]
            fs = cfg.get("shared_expert_intermediate_size", 0)
            if fs:
                x = m + "shared_expert."
                shapes += [(x + "gate_proj.weight", [fs, c]), (x + "up_proj.weight", [fs, c]),
                           (x + "down_proj.weight", [c, fs]), (m + "shared_expert_gate.weight", [1, c])]
        else:
            shapes += [(m + "gate_proj.weight", [f, c]), (m + "up_proj.weight", [f, c]),
                       (m + "down_proj.weight", [c, f])]
        shapes += [(f"model.layers.{li}.input_layernorm.weight", [c]),
                   (f"model.layers.{li}.post_attention_layernorm.weight", [c])]
    shapes.append(("model.norm.weight", [c]))
    if not cfg.get("tie_word_embeddings", False):
        shapes.append(("lm_head.weight", [v, c]))
    return shapes


def random_state(cfg, seed):
    """Weights N(0, 0.1); norm weights 1 + N(0, 0.1) so the signal keeps its scale."""
    torch.manual_seed(seed)
    state = {}
    for name, shape in param_shapes(cfg):
        w = torch.randn(shape, dtype=torch.float32) * 0.1
        state[name] = w + 1.0 if "norm" in name else w
    return state


def prompt_ids(seed, vocab, n=PROMPT_LEN):
    g = torch.Generator().manual_seed(seed)
    return [1] + torch.randint(3, vocab, (n - 1,), generator=g).tolist()


def write_logits(fdir, logits):
    logits.to(torch.float32).contiguous().numpy().astype("<f4").tofile(
        os.path.join(fdir, "logits.f32"))


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def max_abs(a, b):
    return float((a.to(torch.float64) - b.to(torch.float64)).abs().max())


def make_random_fixture(out, name, cfg, state, seed, weights_dtype="float32"):
    """Writes one tiny model and its expected logits; returns the f32 logits."""
    fdir = os.path.join(out, name)
    os.makedirs(fdir, exist_ok=True)
    write_json(os.path.join(fdir, "config.json"), cfg)
    stored = {k: v.to(getattr(torch, weights_dtype)) for k, v in state.items()}
    safetensors_py.save_file(stored, os.path.join(fdir, "model.safetensors"),
                             metadata={"format": "pt"})
    # The expected values use exactly the stored weights (bf16-rounded for the bf16 variant),
    # computed in f32 like HF loading them with torch_dtype=float32.
    loaded = safetensors_py.load_dir(fdir)
    ids = prompt_ids(seed, cfg["vocab_size"])
    model32 = ref.ReferenceLM(cfg, loaded, torch.float32)
    logits = model32.logits(ids)
    logits64 = ref.ReferenceLM(cfg, loaded, torch.float64).logits(ids)
    meta = {"name": name, "architecture": cfg["architectures"][0],
            "model_type": cfg["model_type"], "model_dir": ".", "weights_dtype": weights_dtype,
            "prompt_ids": ids, "shape": list(logits.shape), "logits_file": "logits.f32",
            "atol": ATOL, "f64_max_abs_diff": max_abs(logits, logits64),
            "logits_abs_max": float(logits.abs().max()),
            "made_by": "tests/reference/make_fixtures.py (hf_llama_reference.py, float32)"}
    if hasattr(model32, "min_router_margin"):  # experts chosen with room to spare over f32 noise
        meta["min_router_margin"] = model32.min_router_margin
        assert model32.min_router_margin > 1e-4, f"{name}: near-tie in the router"
    kind, _ = ref.rope_scaling_of(cfg)
    if kind != "default":  # how much the scaling moves the logits: the test's sensitivity
        plain = dict(cfg, rope_scaling=None)
        meta["rope_scaling_effect"] = max_abs(logits, ref.ReferenceLM(plain, loaded).logits(ids))
    write_json(os.path.join(fdir, "meta.json"), meta)
    write_logits(fdir, logits)
    print(f"{name:16s} {cfg['model_type']:8s} logits {list(logits.shape)} "
          f"|f32-f64| {meta['f64_max_abs_diff']:.2e}"
          + (f"  rope_scaling effect {meta['rope_scaling_effect']:.3f}"
             if "rope_scaling_effect" in meta else ""))
    return logits


# ------------------------------------------------------------------------------- perplexity


def perplexity(model, ids, max_length, stride):
    """HF perplexity-guide windows; window [b, e) scores positions max(prev_end, b+1)..e-1,
    i.e. exactly the labels that are not -100 after the shift. Mean NLL over those tokens."""
    n = len(ids)
    nll_sum, count, prev_end, windows = 0.0, 0, 0, []
    for begin in range(0, n, stride):
        end = min(begin + max_length, n)
        first = max(prev_end, begin + 1)
        logp = torch.log_softmax(model.logits(ids[begin:end]).to(torch.float64), dim=-1)
        for pos in range(first, end):
            nll_sum -= float(logp[pos - begin - 1, ids[pos]])
        count += max(0, end - first)
        windows.append({"begin": begin, "end": end, "first_scored": first})
        prev_end = end
        if end == n:
            break
    nll = nll_sum / count
    return {"max_length": max_length, "stride": stride, "nll": nll, "tokens": count,
            "ppl": math.exp(nll), "windows": windows}


def perplexity_hf_literal(model, ids, max_length, stride):
    """The guide's loop as written (labels -100, shift inside the loss), summing exactly."""
    seq = torch.tensor(ids)
    total, count, prev_end = 0.0, 0, 0
    for begin in range(0, len(ids), stride):
        end = min(begin + max_length, len(ids))
        trg_len = end - prev_end
        input_ids = seq[begin:end]
        labels = input_ids.clone()
        labels[:-trg_len] = -100
        logits = model.logits(input_ids).to(torch.float64)
        shift_labels = labels[1:]
        total += float(torch.nn.functional.cross_entropy(
            logits[:-1], shift_labels, ignore_index=-100, reduction="sum"))
        count += int((shift_labels != -100).sum())
        prev_end = end
        if end == len(ids):
            break
    return total / count, count


# ------------------------------------------------------------------------------- stories260K


def load_hf_dir(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if os.path.exists(os.path.join(model_dir, "model.safetensors")) or os.path.exists(
            os.path.join(model_dir, "model.safetensors.index.json")):
        state = safetensors_py.load_dir(model_dir)
    else:
        state = torch.load(os.path.join(model_dir, "pytorch_model.bin"), map_location="cpu")
    return cfg, {k: v.to(torch.float32) for k, v in state.items()}


def make_stories_fixture(out, model_dir):
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        print(f"stories260K      skipped: {model_dir}/config.json not found")
        return
    cfg, state = load_hf_dir(model_dir)
    model = ref.ReferenceLM(cfg, state, torch.float32)
    v = cfg["vocab_size"]
    fdir = os.path.join(out, "stories260K")
    os.makedirs(fdir, exist_ok=True)
    ids = prompt_ids(201, v)
    logits = model.logits(ids)
    write_logits(fdir, logits)
    ppl_ids = prompt_ids(202, v, STORIES_PPL_LEN)
    runs = [perplexity(model, ppl_ids, ml, st) for ml, st in STORIES_PPL_RUNS]
    write_json(os.path.join(fdir, "perplexity.json"), {"ids": ppl_ids, "runs": runs})
    write_json(os.path.join(fdir, "meta.json"), {
        "name": "stories260K", "architecture": cfg.get("architectures", ["?"])[0],
        "model_type": cfg.get("model_type"), "model_dir": os.path.abspath(model_dir),
        "weights_dtype": "checkpoint", "prompt_ids": ids, "shape": list(logits.shape),
        "logits_file": "logits.f32", "atol": ATOL,
        "made_by": "tests/reference/make_fixtures.py (hf_llama_reference.py, float32)"})
    print(f"stories260K      logits {list(logits.shape)}; "
          + "; ".join(f"ppl(ml={r['max_length']}, stride={r['stride']}): nll {r['nll']:.6f} "
                      f"over {r['tokens']} tokens, ppl {r['ppl']:.3f}" for r in runs))
    greedy = [1]
    for _ in range(20):
        greedy.append(int(model.logits(greedy)[-1].argmax()))
    print(f"stories260K      self-check, greedy from BOS: {greedy}")
    print(f"                 decoded: {decode(model_dir, greedy)!r}")


def decode(model_dir, ids):
    """Best-effort text for the self-check print (sentencepiece or tokenizer.json if present)."""
    try:
        import sentencepiece
        path = os.path.join(model_dir, "tokenizer.model")
        if os.path.exists(path):
            return sentencepiece.SentencePieceProcessor(model_file=path).decode(ids)
    except ImportError:
        pass
    path = os.path.join(model_dir, "tokenizer.json")
    if os.path.exists(path):
        with open(path) as f:
            vocab = json.load(f).get("model", {}).get("vocab", {})
        inv = {i: t for t, i in vocab.items()}
        return "".join(inv.get(i, "?") for i in ids).replace("\u2581", " ")
    return "(no tokenizer to decode)"


# ------------------------------------------------------------------------------- self-test


def selftest():
    """Checks the reference against naive alternatives; returns the number of failures."""
    fails = 0

    def check(what, ok, detail):
        nonlocal fails
        fails += 0 if ok else 1
        print(f"  [{'ok' if ok else 'FAIL'}] {what}: {detail}")

    print("selftest:")
    for name, (seed, cfg) in MODELS.items():
        state = random_state(cfg, seed)
        ids = prompt_ids(seed, cfg["vocab_size"])
        fast = ref.ReferenceLM(cfg, state, torch.float32).logits(ids)
        naive = ref.naive_logits(cfg, state, ids)
        d = max_abs(fast, naive)
        check(f"{name} vectorised f32 vs naive loop f64", d < 2e-5, f"max |d| {d:.2e}")
    # A sliding window (mistral) shorter than the prompt.
    seed, cfg = MODELS["mistral"]
    cfg = dict(cfg, sliding_window=5)
    state = random_state(cfg, seed)
    ids = prompt_ids(seed, cfg["vocab_size"])
    d = max_abs(ref.ReferenceLM(cfg, state, torch.float64).logits(ids),
                ref.naive_logits(cfg, state, ids))
    check("mistral sliding_window=5 vs naive", d < 1e-9, f"max |d| {d:.2e}")
    fails += _selftest_rope() + _selftest_safetensors(check) + _selftest_perplexity(check)
    train_fixtures.selftest(check, MODELS, random_state)
    lora_fixtures.selftest(check, MODELS, random_state)
    pref_fixtures.selftest(check)
    kto_fixtures.selftest(check)
    return fails


def _selftest_rope():
    # llama3 inverse frequencies, element by element with scalar Python math.
    cfg = MODELS["llama_gqa"][1]
    rs = cfg["rope_scaling"]
    d = ref.head_dim_of(cfg)
    got = ref.inv_freq(cfg, torch.float64).tolist()
    worst, bands = 0.0, set()
    for i in range(d // 2):
        f = cfg["rope_theta"] ** (-2 * i / d)
        wl = 2 * math.pi / f
        ctx = rs["original_max_position_embeddings"]
        if wl < ctx / rs["high_freq_factor"]:
            want, band = f, "high"
        elif wl > ctx / rs["low_freq_factor"]:
            want, band = f / rs["factor"], "low"
        else:
            s = (ctx / wl - rs["low_freq_factor"]) / (rs["high_freq_factor"] - rs["low_freq_factor"])
            want, band = (1 - s) * f / rs["factor"] + s * f, "mid"
        bands.add(band)
        worst = max(worst, abs(got[i] - want) / want)
    ok = worst < 1e-12 and bands == {"high", "mid", "low"}
    print(f"  [{'ok' if ok else 'FAIL'}] llama3 inv_freq vs scalar formula: rel {worst:.1e}, "
          f"bands {sorted(bands)}")
    return 0 if ok else 1


def _selftest_safetensors(check):
    import tempfile
    t = {"a": torch.randn(3, 5), "b": torch.randn(7).to(torch.bfloat16),
         "c": torch.arange(6, dtype=torch.int64).reshape(2, 3), "d": torch.randn(2, 2).double(),
         "e": torch.randn(4).half(), "z": torch.zeros(0, 3)}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.safetensors")
        safetensors_py.save_file(t, path, metadata={"format": "pt"})
        back, meta = safetensors_py.load_file(path)
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
    ok = (set(back) == set(t) and meta == {"format": "pt"} and n % 8 == 0 and all(
        back[k].dtype == t[k].dtype and torch.equal(back[k], t[k]) for k in t))
    check("safetensors round trip (f32, bf16, f16, f64, i64, empty)", ok, f"header {n} bytes")
    return 0


def _selftest_perplexity(check):
    seed, cfg = MODELS["llama_linear"]
    model = ref.ReferenceLM(cfg, random_state(cfg, seed), torch.float64)
    ids = prompt_ids(7, cfg["vocab_size"], 150)
    # (max_length, stride) -> scored tokens expected by counting the window rule by hand.
    expected = {(64, 32): 149, (64, 64): 147, (50, 20): 149, (40, 64): 39 + 39 + 21}
    for (ml, st), want_count in expected.items():
        r = perplexity(model, ids, ml, st)
        nll, count = perplexity_hf_literal(model, ids, ml, st)
        ok = count == r["tokens"] == want_count and abs(nll - r["nll"]) < 1e-12 * abs(nll)
        check(f"perplexity ml={ml} stride={st} vs HF-guide loop", ok,
              f"tokens {r['tokens']} (guide {count}, expected {want_count}), nll {r['nll']:.9f}"
              f" vs {nll:.9f}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="fixture directory (created)")
    ap.add_argument("--stories", help="HF dir of stories260K (skipped when absent)")
    ap.add_argument("--selftest", action="store_true", help="also check against naive loops")
    args = ap.parse_args()
    torch.set_num_threads(1)  # deterministic reductions; the models are tiny
    start = time.time()
    if args.selftest and selftest():
        print("selftest FAILED")
        return 1
    os.makedirs(args.out, exist_ok=True)
    for name, (seed, cfg) in MODELS.items():
        make_random_fixture(args.out, name, cfg, random_state(cfg, seed), seed)
    name, base = BF16_VARIANT
    seed, cfg = MODELS[base]
    make_random_fixture(args.out, name, dict(cfg, torch_dtype="bfloat16"),
                        random_state(cfg, seed), seed, weights_dtype="bfloat16")
    if args.stories:
        make_stories_fixture(args.out, args.stories)
    train_fixtures.make_all(args.out, MODELS, random_state, packed_model="llama_gqa")
    lora_fixtures.make_all(args.out, MODELS, random_state)
    pref_fixtures.make_all(args.out)
    kto_fixtures.make_all(args.out)
    dpo_fixtures.make_all(args.out, MODELS, random_state)
    print(f"fixtures written to {args.out} in {time.time() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
