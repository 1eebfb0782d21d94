#!/usr/bin/env python3
"""`unillm export --format gguf` read by an independent reader: the PyPI `gguf` package
(llama.cpp's gguf-py, pinned in tests/reference/constraints.txt).

For stories260K (llama: q/k permuted, tied embeddings, a 172-wide down_proj), a random tiny
Qwen2 with the real Qwen2 tokenizer (byte-level BPE, biases, untied), a random tiny Llama with
llama3 RoPE scaling and random tiny Qwen3-MoE / Qwen2-MoE (experts stacked per layer, routers F32,
a shared expert), in f32, f16, bf16, q8_0 and q4_0, it checks with gguf.GGUFReader every
metadata key (the key set is exact) and every tensor against the model's safetensors weights:
f32/f16/bf16 bit for bit, q8_0/q4_0 byte for byte against gguf.quants.quantize of the same
(permuted) weights. Then K-quants come in: a GGUF with random Q4_K/Q5_K/Q6_K blocks written by
gguf.GGUFWriter goes through `unillm convert gguf` and must equal gguf.quants.dequantize.

  gguf_check.py --unillm build/unillm --work DIR
"""
import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

import gguf
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
STORIES = ROOT / "assets" / "stories260K"
QWEN2_TOKENIZER = ROOT / "tests" / "data" / "qwen2-tokenizer"

FILE_TYPES = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2}
MATRIX_TYPES = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0}
LAYER_NAMES = {  # HF suffix after model.layers.N. -> GGUF suffix after blk.N.
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight"}
GLOBAL_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                "lm_head.weight": "output.weight"}
MOE_NAMES = {  # mixture of experts: the router and qwen2moe's shared expert
    "mlp.gate.weight": "ffn_gate_inp.weight", "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight"}
ARCHS = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen2_moe": "qwen2moe",
         "qwen3_moe": "qwen3moe"}


def fail(msg):
    print(f"gguf_check: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        fail(f"{' '.join(map(str, cmd))} exited {r.returncode}: {r.stderr[-2000:]}")
    return r


def gguf_name(hf):
    if hf in GLOBAL_NAMES:
        return GLOBAL_NAMES[hf]
    parts = hf.split(".", 3)  # model, layers, N, rest
    return f"blk.{parts[2]}.{LAYER_NAMES.get(parts[3]) or MOE_NAMES[parts[3]]}"


def expected_hf_tensors(weights):
    """{GGUF name: (what, array)}: each HF tensor by its GGUF name, except that one layer's experts
    are stacked per projection, expert e at index e (llama.cpp's converter: torch.stack(dim=0))."""
    want, experts = {}, {}
    for k, v in weights.items():
        parts = k.split(".")
        if len(parts) == 8 and parts[3] == "mlp" and parts[4] == "experts":  # model.layers.N.mlp.experts.E.proj.weight
            experts.setdefault((int(parts[2]), parts[6]), {})[int(parts[5])] = v
        else:
            want[gguf_name(k)] = (k, v)
    for (layer, proj), by_e in experts.items():
        stack = np.stack([by_e[e] for e in range(len(by_e))])
        want[f"blk.{layer}.ffn_{proj.split('_')[0]}_exps.weight"] = (f"layer {layer} {proj} experts", stack)
    return want


def permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf permute: HF rotate_half rows -> GGUF adjacent pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def f32(x):
    return float(np.float32(x))


# ---- models ----

def tiny_model(unillm, work, name, config, tokenizer, seed):
    """unillm init, then biases and norms randomised (init leaves them 0 and 1)."""
    out = work / name
    cfg = work / f"{name}.json"
    cfg.write_text(json.dumps(config))
    run([unillm, "init", "--config", cfg, "--out", out, "--tokenizer", tokenizer, "--seed", seed, "--force"])
    state = load_file(str(out / "model.safetensors"))
    rng = np.random.default_rng(seed)
    for k, v in state.items():
        if k.endswith(".bias"):
            state[k] = rng.normal(0, 0.5, v.shape).astype(np.float32)
        elif "norm" in k:
            state[k] = (1 + rng.normal(0, 0.1, v.shape)).astype(np.float32)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32,
         "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 151680, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
         "rope_theta": 1000000.0, "tie_word_embeddings": False, "bos_token_id": 151643,
         "eos_token_id": 151645, "initializer_range": 0.2, "use_sliding_window": False}
# Every layer sparse (llama.cpp's qwen2moe/qwen3moe have no dense layers); expert rows of 64
# (whole 32-blocks) and qwen2moe's shared expert of 96.
QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
             "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
             "norm_topk_prob": True, "vocab_size": 512, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
             "rope_theta": 1000000.0, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
             "initializer_range": 0.2}
QWEN2_MOE = dict(QWEN3_MOE, architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe", num_experts=6,
                 num_experts_per_tok=3, norm_topk_prob=False, shared_expert_intermediate_size=96)
LLAMA3 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 32, "vocab_size": 512, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5,
          "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
          "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                           "original_max_position_embeddings": 64, "rope_type": "llama3"},
          "initializer_range": 0.2}


# ---- expected metadata ----

def hf_vocab(model_dir, vocab_size):
    """(tokens, types) as llama.cpp's converter lists them, from the HF files themselves."""
    unk = None
    if (model_dir / "tokenizer.json").exists():
        tj = json.loads((model_dir / "tokenizer.json").read_text())
        vocab = dict(tj["model"]["vocab"])
        unk = tj["model"].get("unk_token")
        added = {a["id"]: a for a in tj["added_tokens"]}
    else:
        vocab = json.loads((model_dir / "vocab.json").read_text())
        added = {i: {"content": c, "special": True} for c, i in
                 json.loads((model_dir / "added_tokens.json").read_text()).items()}
    for i, a in added.items():
        vocab[a["content"]] = i
    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]"), types.append(5)
            continue
        t = by_id[i]
        tokens.append(t)
        if t == unk:
            types.append(2)
        elif i in added and added[i].get("special", True):
            types.append(3)
        elif len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            types.append(6)
        else:
            types.append(1)
    return tokens, types


def spm_scores(model_dir, tokens, types):
    """tokenizer.json has merges, not scores: a token scores minus the rank of the merge that
    makes it, other normal tokens below every merge, special and byte tokens 0."""
    merges = json.loads((model_dir / "tokenizer.json").read_text())["model"]["merges"]
    rank = {}
    for r, m in enumerate(merges):
        rank.setdefault("".join(m.split(" ") if isinstance(m, str) else m), r)
    return [(-rank[t] if t in rank else -(len(merges) + i)) if types[i] in (1, 5) else 0.0
            for i, t in enumerate(tokens)]


def expected_metadata(model_dir, quant):
    c = json.loads((model_dir / "config.json").read_text())
    tc = json.loads((model_dir / "tokenizer_config.json").read_text())
    arch = ARCHS[c["model_type"]]
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    a = arch + "."
    md = {"general.architecture": arch, "general.name": model_dir.name, "general.file_type": FILE_TYPES[quant],
          a + "vocab_size": c["vocab_size"], a + "context_length": c["max_position_embeddings"],
          a + "embedding_length": c["hidden_size"], a + "block_count": c["num_hidden_layers"],
          a + "feed_forward_length": c["intermediate_size"], a + "attention.head_count": c["num_attention_heads"],
          a + "attention.head_count_kv": c["num_key_value_heads"],
          a + "attention.layer_norm_rms_epsilon": f32(c["rms_norm_eps"]),
          a + "rope.freq_base": f32(c["rope_theta"]), a + "rope.dimension_count": head_dim}
    if head_dim * c["num_attention_heads"] != c["hidden_size"]:
        md[a + "attention.key_length"] = md[a + "attention.value_length"] = head_dim
    if c.get("num_experts"):
        md[a + "expert_count"] = c["num_experts"]
        md[a + "expert_used_count"] = c["num_experts_per_tok"]
        md[a + "expert_feed_forward_length"] = c["moe_intermediate_size"]
        if c.get("shared_expert_intermediate_size"):
            md[a + "expert_shared_feed_forward_length"] = c["shared_expert_intermediate_size"]
    if quant in ("q8_0", "q4_0"):
        md["general.quantization_version"] = 2
    tokens, types = hf_vocab(model_dir, c["vocab_size"])
    spm = (model_dir / "tokenizer.json").exists()
    md["tokenizer.ggml.model"] = "llama" if spm else "gpt2"
    md["tokenizer.ggml.tokens"] = tokens
    md["tokenizer.ggml.token_type"] = types
    if spm:
        md["tokenizer.ggml.scores"] = [f32(s) for s in spm_scores(model_dir, tokens, types)]
        md["tokenizer.ggml.add_space_prefix"] = True
        md["tokenizer.ggml.unknown_token_id"] = tokens.index("<unk>")
    else:
        md["tokenizer.ggml.pre"] = "qwen2"
        md["tokenizer.ggml.merges"] = [l for l in (model_dir / "merges.txt").read_text().split("\n")
                                       if l and not l.startswith("#version")]
    ids = {"bos": c.get("bos_token_id"), "eos": c.get("eos_token_id")}
    for kind in ("bos", "eos"):
        name = tc.get(f"{kind}_token")
        ids[kind] = tokens.index(name) if name else ids[kind]
        md[f"tokenizer.ggml.{kind}_token_id"] = ids[kind]
    if tc.get("pad_token"):
        md["tokenizer.ggml.padding_token_id"] = tokens.index(tc["pad_token"])
    md["tokenizer.ggml.add_bos_token"] = bool(tc.get("add_bos_token", spm)) and tc.get("bos_token") is not None
    md["tokenizer.ggml.add_eos_token"] = bool(tc.get("add_eos_token", False))
    if tc.get("chat_template"):
        md["tokenizer.chat_template"] = tc["chat_template"]
    return md, c


def check_metadata(reader, want, where):
    got = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        v = field.contents()
        got[name] = [float(x) for x in v] if name == "tokenizer.ggml.scores" else v
    check(set(got) == set(want), f"{where}: keys differ: extra {sorted(set(got) - set(want))}, "
                                 f"missing {sorted(set(want) - set(got))}")
    for k, w in want.items():
        g = got[k]
        if isinstance(w, float):
            ok = f32(g) == w
        elif isinstance(w, list) and w and isinstance(w[0], float):
            ok = np.array_equal(np.array(g, dtype=np.float32), np.array(w, dtype=np.float32))
        else:
            ok = (list(g) if isinstance(g, (list, np.ndarray)) else g) == w
        if not ok:
            first = next((i for i, (x, y) in enumerate(zip(g, w)) if x != y), None) if isinstance(w, list) else None
            fail(f"{where}: {k} = {str(g)[:200]} (len {len(g) if isinstance(g, list) else '-'}), expected "
                 f"{str(w)[:200]}" + (f"; first difference at {first}: {g[first]!r} vs {w[first]!r}" if first is not None else ""))


# ---- expected tensors ----

def rope_freqs(c):
    """llama.cpp's converter: the llama3 divisors per frequency."""
    s = c["rope_scaling"]
    dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    freqs = 1.0 / (c["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    low = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high = s["original_max_position_embeddings"] / s["high_freq_factor"]
    out = []
    for f in freqs:
        wl = 2 * np.pi / f
        if wl < high:
            out.append(1.0)
        elif wl > low:
            out.append(s["factor"])
        else:
            sm = (s["original_max_position_embeddings"] / wl - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
            out.append(1 / ((1 - sm) / s["factor"] + sm))
    return np.array(out, dtype=np.float32)


def check_tensors(reader, model_dir, c, quant, where):
    weights = load_file(str(model_dir / "model.safetensors"))
    arch_permutes = c["model_type"] in ("llama", "mistral")
    want = expected_hf_tensors(weights)
    # Every name is one gguf-py (llama.cpp's tables) lists for the architecture.
    arch = gguf.MODEL_ARCH[ARCHS[c["model_type"]].upper()]
    known = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[arch]}
    for name in want:
        base = name.rsplit(".", 1)[0]
        check(base in known or ".".join(["blk.{bid}"] + base.split(".")[2:]) in known,
              f"{where}: {name} is not a tensor of gguf-py's {arch.name}")
    if (c.get("rope_scaling") or {}).get("rope_type") == "llama3":
        want["rope_freqs.weight"] = ("rope_freqs", rope_freqs(c))
    got = {t.name: t for t in reader.tensors}
    check(set(got) == set(want), f"{where}: tensors differ: extra {sorted(set(got) - set(want))}, "
                                 f"missing {sorted(set(want) - set(got))}")
    for name, (hf, w) in want.items():
        t = got[name]
        check(list(reversed([int(d) for d in t.shape])) == list(w.shape), f"{where}: {name} shape {t.shape}")
        if arch_permutes and (".attn_q." in name or ".attn_k." in name):
            w = permute(w, c["num_attention_heads"] if ".attn_q." in name else c["num_key_value_heads"])
        # Matrices (and stacked experts) take the file's type; 1-D tensors and the routers stay F32.
        qt = MATRIX_TYPES[quant] if w.ndim >= 2 and ".ffn_gate_inp" not in name else Q.F32
        if qt in (Q.Q8_0, Q.Q4_0) and w.shape[-1] % 32 != 0:
            qt = Q.F16  # rows of partial blocks
        check(t.tensor_type == qt, f"{where}: {name} is {t.tensor_type.name}, expected {qt.name}")
        if name == "rope_freqs.weight":
            check(np.allclose(t.data, w, rtol=1e-6, atol=0), f"{where}: rope_freqs {t.data} vs {w}")
            continue
        ref = gguf.quants.quantize(w.astype(np.float32), qt)
        data = np.asarray(t.data)
        check(data.tobytes() == np.ascontiguousarray(ref).tobytes(),
              f"{where}: {name} ({qt.name}) bytes differ from gguf.quants.quantize")
        back = gguf.quants.dequantize(data, qt).reshape(w.shape)
        tol = {Q.F32: 0, Q.F16: 1e-3, Q.BF16: 1e-2, Q.Q8_0: 1 / 100, Q.Q4_0: 1 / 6}[qt]
        check(np.max(np.abs(back - w)) <= tol * np.max(np.abs(w)), f"{where}: {name} dequantised too far")


def check_export(unillm, work, model_dir, quant):
    path = work / f"{model_dir.name}-{quant}.gguf"
    run([unillm, "export", "--format", "gguf", "--model", model_dir, "--output", path, "--outtype", quant])
    reader = gguf.GGUFReader(str(path))
    where = path.name
    want, c = expected_metadata(model_dir, quant)
    check_metadata(reader, want, where)
    check_tensors(reader, model_dir, c, quant, where)
    print(f"gguf_check: {where}: {len(want)} keys and {len(reader.tensors)} tensors ok")
    return path


# ---- back in ----

def check_convert_back(unillm, work, model_dir):
    """convert gguf of the f32 export: the same weights bit for bit and the same config values."""
    out = work / f"{model_dir.name}-back"
    shutil.rmtree(out, ignore_errors=True)
    run([unillm, "convert", "gguf", "--input", work / f"{model_dir.name}-f32.gguf", "--out", out])
    a, b = load_file(str(model_dir / "model.safetensors")), load_file(str(out / "model.safetensors"))
    check(sorted(a) == sorted(b), f"{out.name}: tensor names differ")
    for k in a:
        check(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), f"{out.name}: {k} differs")
    ca, cb = (json.loads((d / "config.json").read_text()) for d in (model_dir, out))
    for k in ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
              "tie_word_embeddings", "bos_token_id", "eos_token_id", "num_experts", "num_experts_per_tok",
              "moe_intermediate_size", "norm_topk_prob", "shared_expert_intermediate_size"):
        check(ca.get(k) == cb.get(k), f"{out.name}: config {k} = {cb.get(k)}, expected {ca.get(k)}")
    ra, rb = ca.get("rope_scaling"), cb.get("rope_scaling")
    check((ra is None) == (rb is None), f"{out.name}: rope_scaling {rb}, expected {ra}")
    if ra:
        for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            check(abs(ra[k] - rb[k]) <= 1e-5 * abs(ra[k]), f"{out.name}: rope_scaling.{k} {rb[k]}, expected {ra[k]}")
    print(f"gguf_check: {out.name}: weights bit for bit, config and rope_scaling as the original")


# ---- K-quants in ----

def random_kquant(rows, cols, qt, rng):
    """Random blocks with sane f16 scales (random bytes elsewhere)."""
    size, bytes_per = gguf.constants.GGML_QUANT_SIZES[qt]
    b = rng.integers(0, 256, size=(rows, cols // size, bytes_per), dtype=np.uint8)
    d = rng.uniform(1e-4, 1e-3, size=(rows, cols // size)).astype(np.float16).view(np.uint8).reshape(rows, -1, 2)
    if qt == Q.Q6_K:
        b[..., 208:210] = d
    else:
        b[..., 0:2] = d
        b[..., 2:4] = rng.uniform(1e-4, 1e-3, size=(rows, cols // size)).astype(np.float16).view(np.uint8).reshape(rows, -1, 2)
    return b.reshape(rows, -1)


def check_kquants_in(unillm, work, stories_gguf_source):
    """A llama whose rows are whole 256-blocks, its matrices rewritten as random K-quants."""
    src = check_export(unillm, work, stories_gguf_source, "f32")
    reader = gguf.GGUFReader(str(src))
    path = work / "kquants.gguf"
    w = gguf.GGUFWriter(str(path), arch=reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), field.types[0], sub_type=sub)
    rng = np.random.default_rng(5)
    kinds = [Q.Q4_K, Q.Q5_K, Q.Q6_K]
    want = {}
    for i, t in enumerate(reader.tensors):
        shape = list(reversed([int(d) for d in t.shape]))
        if len(shape) == 2:
            qt = kinds[i % 3]
            raw = random_kquant(shape[0], shape[1], qt, rng)
            w.add_tensor(t.name, raw, raw_dtype=qt)  # shape from the byte shape
            want[t.name] = gguf.quants.dequantize(raw, qt).reshape(shape)
        else:
            w.add_tensor(t.name, np.asarray(t.data))
            want[t.name] = np.asarray(t.data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = work / "kquants-hf"
    shutil.rmtree(out, ignore_errors=True)
    run([unillm, "convert", "gguf", "--input", path, "--out", out])
    got = load_file(str(out / "model.safetensors"))
    c = json.loads((out / "config.json").read_text())
    for hf, g in got.items():
        name = gguf_name(hf)
        check(g.dtype == np.float32, f"kquants: {hf} is {g.dtype}, expected float32")
        # GGUF holds the llama q/k rows permuted: permuting unillm's HF tensor must give them back.
        if ".attn_q." in name or ".attn_k." in name:
            g = permute(g, c["num_attention_heads"] if ".attn_q." in name else c["num_key_value_heads"])
        check(np.array_equal(g, want[name]), f"kquants: {hf} differs from gguf.quants.dequantize")
    run([unillm, "generate", "--model", out, "--prompt-ids", "1", "--max-new-tokens", "4", "--temperature", "0"])
    print(f"gguf_check: K-quants (Q4_K, Q5_K, Q6_K) converted equal to gguf.quants.dequantize")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--unillm", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    unillm = Path(args.unillm).resolve()
    stories = work / "stories260K"  # a copy: general.name is the directory name
    shutil.copytree(STORIES, stories)
    qwen2 = tiny_model(unillm, work, "qwen2-tiny", QWEN2, QWEN2_TOKENIZER, 7)
    llama3 = tiny_model(unillm, work, "llama3-tiny", LLAMA3, STORIES, 8)
    qwen3_moe = tiny_model(unillm, work, "qwen3-moe-tiny", QWEN3_MOE, STORIES, 10)
    qwen2_moe = tiny_model(unillm, work, "qwen2-moe-tiny", QWEN2_MOE, STORIES, 11)
    for model in (stories, qwen2, llama3, qwen3_moe, qwen2_moe):
        for quant in ("f32", "f16", "bf16", "q8_0", "q4_0"):
            check_export(unillm, work, model, quant)
        check_convert_back(unillm, work, model)
    kq = dict(LLAMA3, hidden_size=256, intermediate_size=512, num_attention_heads=4, head_dim=64,
              num_hidden_layers=1, rope_scaling=None)
    check_kquants_in(unillm, work, tiny_model(unillm, work, "llama-256", kq, STORIES, 9))
    print("gguf_check: OK")


if __name__ == "__main__":
    main()
