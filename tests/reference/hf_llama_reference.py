"""Independent PyTorch forward of Hugging Face Llama-family causal LMs (llama, mistral, qwen2,
qwen3, and the mixture-of-experts qwen2_moe and qwen3_moe), written from the HF semantics rather than imported from transformers, so the C++ model
can be checked against something that shares no code with it.

Shapes use STYLE.md's letters: T tokens, C hidden, H heads, Hkv kv heads, D head dim, F ffn,
V vocab. One sequence at a time (no batch dim).
"""
import math

import torch

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe")


def is_sparse_layer(cfg, li):
    """HF Qwen2Moe/Qwen3MoeDecoderLayer: experts when num_experts > 0, the layer is not in
    mlp_only_layers and (li + 1) is a multiple of decoder_sparse_step."""
    if not cfg.get("model_type", "").endswith("_moe"):
        return False
    e = cfg.get("num_experts", 60)
    return e > 0 and li not in (cfg.get("mlp_only_layers") or []) and \
        (li + 1) % cfg.get("decoder_sparse_step", 1) == 0


def head_dim_of(cfg):
    # HF: explicit head_dim when present and not null (qwen3, newer llama/mistral), else C / H.
    d = cfg.get("head_dim")
    return int(d) if d else cfg["hidden_size"] // cfg["num_attention_heads"]


def rope_scaling_of(cfg):
    """Returns (rope_type, scaling dict); HF accepts both "rope_type" and the older "type"."""
    rs = cfg.get("rope_scaling")
    if not rs:
        return "default", {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    return kind, rs


def inv_freq(cfg, dtype=torch.float32, seq_len=None):
    """[D/2] inverse frequencies, following HF's modeling_rope_utils (default, linear, llama3,
    yarn, dynamic). seq_len (max position + 1 of the forward) matters only for dynamic.

    HF computes these in float32: base ** (arange(0, D, 2) / D) with the exponent in f32.
    """
    d = head_dim_of(cfg)
    base = float(cfg.get("rope_theta", 10000.0))
    exponent = torch.arange(0, d, 2, dtype=torch.int64).to(dtype) / d
    freq = 1.0 / (base ** exponent)  # [D/2]
    kind, rs = rope_scaling_of(cfg)
    if kind == "default":
        return freq
    if kind == "linear":
        return freq / float(rs["factor"])
    if kind == "llama3":
        return _llama3_scale(freq, rs)
    if kind == "yarn":
        return _yarn_scale(base, exponent, d, cfg, rs)
    if kind == "dynamic":
        limit = int(cfg["max_position_embeddings"])
        if seq_len is None or seq_len <= limit:
            return freq
        factor = float(rs["factor"])
        # The base grows with the sequence: theta * (s * n / L - (s - 1)) ** (D / (D - 2)).
        grown = base * ((factor * torch.tensor(seq_len, dtype=dtype) / limit) - (factor - 1)) ** (d / (d - 2))
        return 1.0 / (grown ** exponent)
    raise NotImplementedError(f"[reference] rope_scaling type {kind!r} not implemented")


def _yarn_scale(base, exponent, d, cfg, rs):
    # YaRN "NTK-by-parts": dimensions turning more than beta_fast times over the original length
    # keep their frequency, fewer than beta_slow are divided by factor, a linear ramp between.
    # The range is taken at original_max_position_embeddings (else max_position_embeddings) and
    # factor as written (vLLM, llama.cpp; transformers 4.46 agrees when the two lengths match).
    factor = float(rs["factor"])
    length = float(rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"])
    fast, slow = float(rs.get("beta_fast") or 32), float(rs.get("beta_slow") or 1)

    def dim_at(rotations):
        return d * math.log(length / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_at(fast), dim_at(slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    pos = base ** exponent
    ramp = ((torch.arange(d // 2, dtype=exponent.dtype) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp
    return (1.0 / (factor * pos)) * (1 - keep) + (1.0 / pos) * keep


def attention_factor(cfg):
    """What HF multiplies cos and sin by: yarn's attention factor, else 1."""
    kind, rs = rope_scaling_of(cfg)
    if kind != "yarn":
        return 1.0
    if rs.get("attention_factor") is not None:
        return float(rs["attention_factor"])

    def mscale(m):
        return 1.0 if rs["factor"] <= 1 else 0.1 * m * math.log(rs["factor"]) + 1.0

    if rs.get("mscale") and rs.get("mscale_all_dim"):
        return mscale(rs["mscale"]) / mscale(rs["mscale_all_dim"])
    return mscale(1.0)


def _llama3_scale(freq, rs):
    # Llama 3.1: wavelengths longer than original_ctx/low_freq_factor are divided by factor,
    # shorter than original_ctx/high_freq_factor are kept, and the band between is a linear blend
    # in (original_ctx / wavelength).
    factor = float(rs["factor"])
    low = float(rs["low_freq_factor"])
    high = float(rs["high_freq_factor"])
    ctx = float(rs["original_max_position_embeddings"])
    wavelen = 2 * math.pi / freq
    long_wave = wavelen > ctx / low
    short_wave = wavelen < ctx / high
    scaled = torch.where(long_wave, freq / factor, freq)
    smooth = (ctx / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~long_wave & ~short_wave
    return torch.where(medium, blended, scaled)


def rope_cos_sin(cfg, positions, dtype=torch.float32):
    """cos, sin: [T, D] laid out as HF's cat(freqs, freqs) for rotate_half, times the attention
    factor (yarn)."""
    f = inv_freq(cfg, dtype, int(positions.max()) + 1)
    angles = positions.to(dtype)[:, None] * f[None, :]  # [T, D/2]
    emb = torch.cat((angles, angles), dim=-1)  # [T, D]
    scale = attention_factor(cfg)
    return emb.cos() * scale, emb.sin() * scale


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rms_norm(x, weight, eps):
    # HF LlamaRMSNorm: variance in (at least) f32, x * rsqrt(var + eps), then weight * x.
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc)
    var = xf.pow(2).mean(-1, keepdim=True)
    xf = xf * torch.rsqrt(var + eps)
    return weight * xf.to(x.dtype)


class ReferenceLM:
    """A Llama-family causal LM from an HF config dict and an HF-named state dict."""

    def __init__(self, cfg, state, dtype=torch.float32):
        mt = cfg.get("model_type")
        if mt not in SUPPORTED_MODEL_TYPES:
            raise NotImplementedError(f"[reference] model_type {mt!r} not supported")
        if cfg.get("hidden_act", "silu") != "silu":
            raise NotImplementedError(f"[reference] hidden_act {cfg['hidden_act']!r}")
        if mt == "qwen2" and cfg.get("use_sliding_window"):
            raise NotImplementedError("[reference] qwen2 use_sliding_window")
        self.cfg = cfg
        self.dtype = dtype
        self.w = {k: v.to(dtype) for k, v in state.items()}
        if "lm_head.weight" not in self.w:
            if not cfg.get("tie_word_embeddings", False):
                raise KeyError("[reference] lm_head.weight missing and tie_word_embeddings false")
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        self.d = head_dim_of(cfg)
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.window = cfg.get("sliding_window") if mt == "mistral" else None

    def _linear(self, x, name):
        y = x @ self.w[name + ".weight"].t()
        b = self.w.get(name + ".bias")
        return y + b if b is not None else y

    def _mask(self, t, segments=None):
        """[T, T] additive mask: -inf where key j is in the future (or outside the window), or,
        given segments [T], in another segment (packed samples kept apart)."""
        i = torch.arange(t)[:, None]
        j = torch.arange(t)[None, :]
        allowed = j <= i
        if self.window:
            allowed &= (i - j) < int(self.window)
        if segments is not None:
            seg = torch.as_tensor(segments, dtype=torch.int64)
            allowed &= seg[:, None] == seg[None, :]
        m = torch.zeros(t, t, dtype=self.dtype)
        return m.masked_fill(~allowed, float("-inf"))

    def _attention(self, x, li, cos, sin, mask):
        p = f"model.layers.{li}.self_attn."
        t = x.shape[0]
        q = self._linear(x, p + "q_proj").view(t, self.n_heads, self.d)  # [T, H, D]
        k = self._linear(x, p + "k_proj").view(t, self.n_kv, self.d)  # [T, Hkv, D]
        v = self._linear(x, p + "v_proj").view(t, self.n_kv, self.d)  # [T, Hkv, D]
        if p + "q_norm.weight" in self.w:  # qwen3: RMSNorm over D per head, before RoPE
            q = rms_norm(q, self.w[p + "q_norm.weight"], self.eps)
            k = rms_norm(k, self.w[p + "k_norm.weight"], self.eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [H*, T, D]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.n_heads // self.n_kv
        k = k.repeat_interleave(group, dim=0)  # [H, T, D]
        v = v.repeat_interleave(group, dim=0)
        scores = (q @ k.transpose(1, 2)) / math.sqrt(self.d) + mask  # [H, T, T]
        acc = torch.float64 if self.dtype == torch.float64 else torch.float32
        probs = torch.softmax(scores.to(acc), dim=-1).to(self.dtype)
        out = (probs @ v).transpose(0, 1).reshape(t, self.n_heads * self.d)  # [T, H*D]
        return self._linear(out, p + "o_proj")

    def _swiglu(self, x, p):
        gate = torch.nn.functional.silu(x @ self.w[p + "gate_proj.weight"].t())
        return (gate * (x @ self.w[p + "up_proj.weight"].t())) @ self.w[p + "down_proj.weight"].t()

    def _mlp(self, x, li):
        if is_sparse_layer(self.cfg, li):
            return self._moe(x, li)
        return self._swiglu(x, f"model.layers.{li}.mlp.")

    def _moe(self, x, li):
        """HF's SparseMoeBlock: softmax over the router's logits (in f32 at least), the top k,
        renormalised when norm_topk_prob, each expert on its tokens, added by index_add; the
        qwen2_moe shared expert scaled by sigmoid(shared_expert_gate(x))."""
        p = f"model.layers.{li}.mlp."
        k = self.cfg.get("num_experts_per_tok", 4)
        acc = torch.float64 if self.dtype == torch.float64 else torch.float32
        probs = torch.softmax((x @ self.w[p + "gate.weight"].t()).to(acc), dim=-1)
        top, chosen = torch.topk(probs, k, dim=-1)  # [T, k]
        if k < probs.shape[1]:  # how far the k-th choice is from the next: f32 noise must not flip it
            nxt = torch.topk(probs, k + 1, dim=-1).values[:, k]
            margin = float((top[:, k - 1] - nxt).min())
            self.min_router_margin = min(getattr(self, "min_router_margin", 1.0), margin)
        if getattr(self, "routes", None) is not None:  # for the load-balancing loss (training)
            self.routes.append((probs, chosen))
        if self.cfg.get("norm_topk_prob", False):
            top = top / top.sum(dim=-1, keepdim=True)
        top = top.to(self.dtype)
        out = torch.zeros_like(x)
        for e in range(probs.shape[1]):
            rows, slot = torch.where(chosen == e)
            if rows.numel() == 0:
                continue
            y = self._swiglu(x[rows], p + f"experts.{e}.")
            out = out.index_add(0, rows, y * top[rows, slot, None])
        if p + "shared_expert_gate.weight" in self.w:
            gate = torch.sigmoid(x @ self.w[p + "shared_expert_gate.weight"].t())
            out = out + gate * self._swiglu(x, p + "shared_expert.")
        return out

    def hidden_states(self, ids, positions=None, segments=None):
        """Final-norm hidden states [T, C] for one sequence of token ids. positions [T] default
        to 0..T-1; segments [T] (optional) restrict attention to the token's own segment.
        Differentiable when the weights require grad (the training reference uses that)."""
        ids = torch.as_tensor(ids, dtype=torch.int64)
        t = ids.shape[0]
        h = self.w["model.embed_tokens.weight"][ids]  # [T, C]
        pos = torch.arange(t) if positions is None else torch.as_tensor(positions)
        cos, sin = rope_cos_sin(self.cfg, pos, self.dtype)
        mask = self._mask(t, segments)
        for li in range(self.n_layers):
            p = f"model.layers.{li}."
            h = h + self._attention(rms_norm(h, self.w[p + "input_layernorm.weight"], self.eps),
                                    li, cos, sin, mask)
            h = h + self._mlp(rms_norm(h, self.w[p + "post_attention_layernorm.weight"], self.eps),
                              li)
        return rms_norm(h, self.w["model.norm.weight"], self.eps)

    @torch.no_grad()
    def logits(self, ids):
        """[T, V] logits in the model's dtype."""
        return self.hidden_states(ids) @ self.w["lm_head.weight"].t()


# ---------------------------------------------------------------------------------------------
# A deliberately naive second implementation (explicit per-position / per-head loops, RoPE as
# pair rotations, f64), used only by make_fixtures.py --selftest to check ReferenceLM.


def _naive_swiglu(w, p, x):
    g = w[p + "gate_proj.weight"] @ x
    u = w[p + "up_proj.weight"] @ x
    act = torch.tensor([float(a) / (1.0 + math.exp(-float(a))) for a in g], dtype=torch.float64)
    return w[p + "down_proj.weight"] @ (act * u)


def _naive_moe(cfg, w, p, x):
    # One token: probabilities by explicit exp/sum, the k largest by sorting (index breaks ties),
    # the experts' outputs added one by one.
    logits = [float(v) for v in w[p + "gate.weight"] @ x]
    m = max(logits)
    ex = [math.exp(v - m) for v in logits]
    probs = [v / sum(ex) for v in ex]
    k = cfg.get("num_experts_per_tok", 4)
    chosen = sorted(range(len(probs)), key=lambda e: (-probs[e], e))[:k]
    total = sum(probs[e] for e in chosen)
    out = torch.zeros_like(x)
    for e in chosen:
        weight = probs[e] / total if cfg.get("norm_topk_prob", False) else probs[e]
        out = out + weight * _naive_swiglu(w, p + f"experts.{e}.", x)
    if p + "shared_expert_gate.weight" in w:
        g = float(w[p + "shared_expert_gate.weight"][0] @ x)
        out = out + (1.0 / (1.0 + math.exp(-g))) * _naive_swiglu(w, p + "shared_expert.", x)
    return out


def _naive_rms(vec, weight, eps):
    ms = sum(float(a) * float(a) for a in vec) / len(vec)
    s = 1.0 / math.sqrt(ms + eps)
    return torch.tensor([float(weight[i]) * float(vec[i]) * s for i in range(len(vec))],
                        dtype=torch.float64)


def _naive_rope(vec, pos, freqs, scale=1.0):
    # Pairs (i, i + D/2) rotate by pos * freq_i (HF's rotate_half layout), scaled (yarn).
    half = len(vec) // 2
    out = vec.clone()
    for i in range(half):
        a = pos * float(freqs[i])
        c, s = scale * math.cos(a), scale * math.sin(a)
        x1, x2 = float(vec[i]), float(vec[i + half])
        out[i] = x1 * c - x2 * s
        out[i + half] = x2 * c + x1 * s
    return out


def naive_logits(cfg, state, ids):
    """[T, V] logits by explicit loops in f64. Slow; tiny models only."""
    w = {k: v.to(torch.float64) for k, v in state.items()}
    if "lm_head.weight" not in w:
        w["lm_head.weight"] = w["model.embed_tokens.weight"]
    n_h = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_h
    d = head_dim_of(cfg)
    eps = float(cfg.get("rms_norm_eps", 1e-6))
    window = cfg.get("sliding_window") if cfg["model_type"] == "mistral" else None
    t_len = len(ids)
    freqs = inv_freq(cfg, torch.float64, t_len)
    rope_scale = attention_factor(cfg)
    hs = [w["model.embed_tokens.weight"][int(i)].clone() for i in ids]

    def lin(x, name):
        y = w[name + ".weight"] @ x
        return y + w[name + ".bias"] if name + ".bias" in w else y

    for li in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{li}."
        xs = [_naive_rms(h, w[p + "input_layernorm.weight"], eps) for h in hs]
        qs, ks, vs = [], [], []
        for pos, x in enumerate(xs):
            q = lin(x, p + "self_attn.q_proj")
            k = lin(x, p + "self_attn.k_proj")
            v = lin(x, p + "self_attn.v_proj")
            qh, kh, vh = [], [], []
            for h in range(n_h):
                qv = q[h * d:(h + 1) * d]
                if p + "self_attn.q_norm.weight" in w:
                    qv = _naive_rms(qv, w[p + "self_attn.q_norm.weight"], eps)
                qh.append(_naive_rope(qv, pos, freqs, rope_scale))
            for h in range(n_kv):
                kv = k[h * d:(h + 1) * d]
                if p + "self_attn.k_norm.weight" in w:
                    kv = _naive_rms(kv, w[p + "self_attn.k_norm.weight"], eps)
                kh.append(_naive_rope(kv, pos, freqs, rope_scale))
                vh.append(v[h * d:(h + 1) * d])
            qs.append(qh), ks.append(kh), vs.append(vh)
        new_hs = []
        for i in range(t_len):
            heads = []
            for h in range(n_h):
                g = h // (n_h // n_kv)
                keys = [j for j in range(i + 1) if not window or i - j < int(window)]
                sc = [float(qs[i][h] @ ks[j][g]) / math.sqrt(d) for j in keys]
                m = max(sc)
                e = [math.exp(s - m) for s in sc]
                z = sum(e)
                o = sum((e[n] / z) * vs[j][g] for n, j in enumerate(keys))
                heads.append(o)
            h1 = hs[i] + lin(torch.cat(heads), p + "self_attn.o_proj")
            x2 = _naive_rms(h1, w[p + "post_attention_layernorm.weight"], eps)
            if is_sparse_layer(cfg, li):
                new_hs.append(h1 + _naive_moe(cfg, w, p + "mlp.", x2))
            else:
                new_hs.append(h1 + _naive_swiglu(w, p + "mlp.", x2))
        hs = new_hs
    out = [w["lm_head.weight"] @ _naive_rms(h, w["model.norm.weight"], eps) for h in hs]
    return torch.stack(out)
