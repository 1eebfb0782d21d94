#!/usr/bin/env python3
"""Random-weight Llama checkpoints for the peer benchmarks: one HF model dir (config.json,
model.safetensors, Llama 2 tokenizer) and the same weights as a GGUF for llama.cpp.

  bench/.venv/bin/python bench/make_models.py --shape stories110M --dtype f32 --out bench/models
  bench/.venv/bin/python bench/make_models.py --shape stories15M --check

writes OUT/<shape>-<dtype>/ (HF dir) and OUT/<shape>-<dtype>.gguf. --check then runs a greedy
decode with unillm and with llama.cpp on the same prompt ids and prints both token lists.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CHECK_QK_STD = 0.2
REPO = HERE.parent

# llama2.c's stories checkpoints; the classifier is shared with the embedding (tied).
SHAPES = {
    "stories15M": dict(dim=288, layers=6, heads=6, kv_heads=6, hidden=768, vocab=32000, seq=256),
    "stories110M": dict(dim=768, layers=12, heads=12, kv_heads=12, hidden=2048, vocab=32000, seq=1024),
}


def bf16_bits(a):
    """f32 array -> uint16 bf16 bit patterns (round to nearest even)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def hf_tensors(s, seed, tied, qk_std=0.02):
    """HF-named f32 weights: matrices N(0, 0.02) (q/k: N(0, qk_std)), norm gains 1 + N(0, 0.02)."""
    rng = np.random.default_rng(seed)
    hd = s["dim"] // s["heads"]
    C, F, V = s["dim"], s["hidden"], s["vocab"]

    def mat(rows, cols, std=0.02):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * std).astype(np.float32)

    def gain(n):
        return (1.0 + rng.standard_normal(n, dtype=np.float32) * 0.02).astype(np.float32)

    t = {"model.embed_tokens.weight": mat(V, C)}
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = gain(C)
        t[p + "self_attn.q_proj.weight"] = mat(s["heads"] * hd, C, qk_std)
        t[p + "self_attn.k_proj.weight"] = mat(s["kv_heads"] * hd, C, qk_std)
        t[p + "self_attn.v_proj.weight"] = mat(s["kv_heads"] * hd, C)
        t[p + "self_attn.o_proj.weight"] = mat(C, s["heads"] * hd)
        t[p + "post_attention_layernorm.weight"] = gain(C)
        t[p + "mlp.gate_proj.weight"] = mat(F, C)
        t[p + "mlp.up_proj.weight"] = mat(F, C)
        t[p + "mlp.down_proj.weight"] = mat(C, F)
    t["model.norm.weight"] = gain(C)
    if not tied:
        t["lm_head.weight"] = mat(V, C)
    return t


def write_safetensors(path, tensors, dtype):
    """8-byte LE header length, JSON header (padded to 8 bytes), then the raw data."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        if dtype == "bf16":
            raw, st = bf16_bits(a).tobytes(), "BF16"
        else:
            raw, st = np.ascontiguousarray(a, dtype="<f4").tobytes(), "F32"
        header[name] = {"dtype": st, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def tokenizer_model_path():
    for p in (REPO / "tests/data/llama2-tokenizer/tokenizer.model",
              Path("/work/shared/data/llama2-tokenizer/tokenizer.model")):
        if p.exists():
            return p
    sys.exit("make_models: no Llama 2 tokenizer.model found")


def write_hf_dir(d, s, tensors, dtype, tied):
    d.mkdir(parents=True, exist_ok=True)
    write_safetensors(d / "model.safetensors", tensors, dtype)
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": s["dim"], "intermediate_size": s["hidden"],
        "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
        "num_key_value_heads": s["kv_heads"], "vocab_size": s["vocab"],
        "max_position_embeddings": s["seq"], "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": tied, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "bfloat16" if dtype == "bf16" else "float32",
    }
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    shutil.copyfile(tokenizer_model_path(), d / "tokenizer.model")
    tc = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
          "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
          "model_max_length": s["seq"]}
    (d / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")


def to_gguf_rope_layout(w, n_head):
    """HF q/k rows hold each head as [first halves | second halves] (rotate_half RoPE); llama.cpp's
    llama arch rotates adjacent pairs, so interleave the two halves of every head's rows."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def sp_vocab():
    import gguf
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(tokenizer_model_path()))
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i).encode("utf-8"))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            ty = gguf.TokenType.UNKNOWN
        elif sp.is_control(i):
            ty = gguf.TokenType.CONTROL
        elif sp.is_unused(i):
            ty = gguf.TokenType.UNUSED
        elif sp.is_byte(i):
            ty = gguf.TokenType.BYTE
        else:
            ty = gguf.TokenType.NORMAL
        types.append(int(ty))
    return tokens, scores, types


def write_gguf(path, s, tensors, dtype, tied):
    import gguf
    arch = "llama"
    hd = s["dim"] // s["heads"]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(path.stem)
    w.add_context_length(s["seq"])
    w.add_embedding_length(s["dim"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["hidden"])
    w.add_rope_dimension_count(hd)
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(s["vocab"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if dtype == "bf16" else gguf.LlamaFileType.ALL_F32)
    tokens, scores, types = sp_vocab()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}

    def put(name, a):
        if a.ndim == 2 and dtype == "bf16":
            w.add_tensor(name, bf16_bits(a), raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:  # norm gains stay f32, as llama.cpp's converter keeps them
            w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))

    put("token_embd.weight", tensors["model.embed_tokens.weight"])
    for i in range(s["layers"]):
        for hf, gg in names.items():
            a = tensors[f"model.layers.{i}.{hf}.weight"]
            if hf == "self_attn.q_proj":
                a = to_gguf_rope_layout(a, s["heads"])
            elif hf == "self_attn.k_proj":
                a = to_gguf_rope_layout(a, s["kv_heads"])
            put(f"blk.{i}.{gg}.weight", a)
    put("output_norm.weight", tensors["model.norm.weight"])
    if not tied:
        put("output.weight", tensors["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make(shape, dtype, out, tied=True, seed=0, force=False, qk_std=0.02):
    """Writes OUT/<shape>-<dtype>[-untied][-qkS]/ and the matching .gguf; returns (hf_dir, gguf_path)."""
    s = SHAPES[shape]
    tag = f"{shape}-{dtype}" + ("" if tied else "-untied") + ("" if qk_std == 0.02 else f"-qk{qk_std:g}")
    d, g = Path(out) / tag, Path(out) / f"{tag}.gguf"
    if not force and (d / "model.safetensors").exists() and g.exists():
        return d, g
    t = hf_tensors(s, seed, tied, qk_std)
    if dtype == "bf16":  # both files then hold exactly the same rounded values
        t = {k: bf16_to_f32(bf16_bits(v)) if v.ndim == 2 else v for k, v in t.items()}
    write_hf_dir(d, s, t, dtype, tied)
    write_gguf(g, s, t, dtype, tied)
    print(f"wrote {d} and {g}")
    return d, g


def unillm_greedy(binary, hf_dir, prompt, n, threads):
    cmd = [str(binary), "generate", "--model", str(hf_dir), "--prompt-ids", ",".join(map(str, prompt)),
           "--max-new-tokens", str(n), "--temperature", "0", "--threads", str(threads),
           "--ignore-eos", "--output-ids", "--quiet"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def llama_cpp_open(gguf_path, threads, n_ctx=512, kv="f32"):
    """kv: the KV cache type, f32 (the default here, as unillm's) or f16 (llama.cpp's own default)."""
    import llama_cpp
    t = {"f32": llama_cpp.GGML_TYPE_F32, "f16": llama_cpp.GGML_TYPE_F16}[kv]
    return llama_cpp.Llama(model_path=str(gguf_path), n_ctx=n_ctx, n_threads=threads,
                           n_threads_batch=threads, n_batch=512, verbose=False, logits_all=False,
                           type_k=t, type_v=t)


def last_logits(llm):
    import llama_cpp
    p = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(p, shape=(llm.n_vocab(),))


def llama_cpp_greedy(llm, prompt, n):
    llm.reset()
    llm.eval(prompt)
    toks, margins = [], []
    for step in range(n):
        lg = last_logits(llm)
        top2 = np.partition(lg, -2)[-2:]
        margins.append(float(top2[1] - top2[0]))
        toks.append(int(np.argmax(lg)))
        if step + 1 < n:
            llm.eval([toks[-1]])
    return toks, margins


def check(hf_dir, gguf_path, binary, n=8, threads=2):
    prompt = [1] + [int(x) for x in np.random.default_rng(1).integers(3, 32000, 15)]
    a = unillm_greedy(binary, hf_dir, prompt, n, threads)
    b, m = llama_cpp_greedy(llama_cpp_open(gguf_path, threads), prompt, n)
    ok = a == b
    print(f"prompt ids  {prompt}")
    print(f"unillm      {a}")
    print(f"llama.cpp   {b}")
    print(f"top-2 logit margins (llama.cpp): {', '.join(f'{x:.3f}' for x in m)}")
    print("greedy tokens agree" if ok else "MISMATCH between unillm and llama.cpp")
    return ok


def check_shape(shape, dtype, out, tied, binary, threads, made=None):
    """Greedy agreement on the given model and on its sharp-attention variant: with q/k weights
    N(0, 0.02) attention is near uniform and a wrong q/k row order still gives the same tokens;
    with std 0.2 a missing permutation changes them (checked), so agreement there proves the layout."""
    ok = True
    for qk in (0.02, CHECK_QK_STD):
        d, g = made if (made and qk == 0.02) else make(shape, dtype, out, tied=tied, qk_std=qk)
        print(f"-- {d.name}")
        ok = check(d, g, binary, threads=threads) and ok
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="stories110M")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--untied", action="store_true", help="separate lm_head (stories are tied)")
    ap.add_argument("--out", default=str(HERE / "models"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="rewrite even if the files exist")
    ap.add_argument("--qk-std", type=float, default=0.02,
                    help="std of q/k weights (0.02 leaves attention almost uniform, so a q/k layout "
                         "error would not change the greedy tokens; the check uses %g)" % CHECK_QK_STD)
    ap.add_argument("--check", action="store_true",
                    help="also write a sharp-attention variant (q/k std %g) and compare greedy tokens "
                         "with llama.cpp on both" % CHECK_QK_STD)
    ap.add_argument("--unillm", default=str(REPO / "build-bench/unillm"))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    d, g = make(a.shape, a.dtype, a.out, tied=not a.untied, seed=a.seed, force=a.force, qk_std=a.qk_std)
    if a.check and not check_shape(a.shape, a.dtype, a.out, not a.untied, a.unillm, a.threads, (d, g)):
        sys.exit(1)


if __name__ == "__main__":
    main()
