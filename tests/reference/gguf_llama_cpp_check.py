#!/usr/bin/env python3
"""llama.cpp itself (llama-cpp-python, built by bench/setup.sh into bench/.venv) on the GGUFs
`unillm export --format gguf` writes: its logits on an f32 export equal unillm's within 1e-4
(max |difference| / max |logit|) for stories260K, a random stories15M-shaped Llama whose q/k
weights are N(0, 0.2) (sharp attention: a GGUF without the q/k permutation fails here, while
with N(0, 0.02) it would still give the same greedy tokens) and a random tiny Qwen2 (NEOX RoPE,
no permutation; biases); the stories15M-shaped one without the permutation must differ (a
negative control: the check sees the permutation), and random tiny Qwen3-MoE and Qwen2-MoE
(experts stacked per layer, a shared expert). Its tokenizer agrees with unillm's on a few texts. `unillm convert gguf`
of each file gives back the original weights bit for bit and the same logits. A Q4_K_M file made
by llama.cpp's own quantiser from an export converts back and generates.

  gguf_llama_cpp_check.py --unillm build/unillm --dump-logits build/tests/reference/dump_logits --work DIR
"""
import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

try:
    import llama_cpp
except ImportError:
    print("gguf_llama_cpp_check: FAIL: this Python has no llama_cpp (llama-cpp-python); run "
          "bench/setup.sh to build it into bench/.venv, then re-run cmake", file=sys.stderr)
    sys.exit(1)
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import safetensors_py  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RTOL = 1e-4
TEXTS = ["Once upon a time, there was a little girl named Lily.",
         "She said: \"Don't go!\" 12345 times\n\nThe end.", "  leading spaces and ünïcödé ☃"]


def fail(msg):
    print(f"gguf_llama_cpp_check: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        fail(f"{' '.join(map(str, cmd))} exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


def init_model(args, name, config, tokenizer, qk_std=None, seed=1):
    """unillm init; optionally q/k weights redrawn N(0, qk_std); biases N(0, 0.5)."""
    out = args.work / name
    cfg = args.work / f"{name}.json"
    cfg.write_text(json.dumps(config))
    run([args.unillm, "init", "--config", cfg, "--out", out, "--tokenizer", tokenizer, "--seed", seed])
    state, _ = safetensors_py.load_file(out / "model.safetensors")
    g = torch.Generator().manual_seed(seed)
    for k, v in state.items():
        if qk_std is not None and (k.endswith("q_proj.weight") or k.endswith("k_proj.weight")):
            state[k] = torch.randn(v.shape, generator=g) * qk_std
        elif k.endswith(".bias"):
            state[k] = torch.randn(v.shape, generator=g) * 0.5
    safetensors_py.save_file(state, out / "model.safetensors")
    return out


def unillm_logits(args, model_dir, ids):
    out = args.work / "logits.f32"
    run([args.dump_logits, model_dir, ",".join(map(str, ids)), out])
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1)


def llama_cpp_model(path, n_ctx):
    return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_threads=2, n_threads_batch=2,
                           logits_all=True, verbose=False, type_k=llama_cpp.GGML_TYPE_F32,
                           type_v=llama_cpp.GGML_TYPE_F32)


def unpermuted_copy(src, dst):
    """The GGUF with its q/k rows put back in HF order: what an export without the permutation
    would have written (the negative control)."""
    import gguf
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), arch=r.fields["general.architecture"].contents())
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), field.types[0], sub_type=sub)
    heads = {".attn_q.": r.fields["llama.attention.head_count"].contents(),
             ".attn_k.": r.fields["llama.attention.head_count_kv"].contents()}
    for t in r.tensors:
        data = np.array(t.data)
        for part, n in heads.items():
            if part in t.name:  # GGUF row (h, i, c) back to HF row (h, c, i)
                data = data.reshape(n, data.shape[0] // n // 2, 2, -1).swapaxes(1, 2).reshape(data.shape)
        w.add_tensor(t.name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_cpp_logits(path, ids):
    llm = llama_cpp_model(path, max(64, len(ids)))
    llm.reset()
    llm.eval(ids)
    return llm, np.array(llm.scores[: len(ids)], dtype=np.float32)


def check_model(args, model_dir, ids, negative_control=False):
    gguf = args.work / f"{model_dir.name}.gguf"
    run([args.unillm, "export", "--format", "gguf", "--model", model_dir, "--output", gguf])
    llm, theirs = llama_cpp_logits(gguf, ids)
    ours = unillm_logits(args, model_dir, ids)
    err = float(np.max(np.abs(theirs - ours)) / np.max(np.abs(ours)))
    same_argmax = bool(np.all(theirs.argmax(-1) == ours.argmax(-1)))
    print(f"gguf_llama_cpp_check: {model_dir.name}: {len(ids)} positions, max |diff| / max |logit| = {err:.2e}, "
          f"argmax {'equal' if same_argmax else 'DIFFERS'}")
    if err > RTOL:
        fail(f"{model_dir.name}: llama.cpp's logits differ from unillm's by {err:.2e} (> {RTOL})")
    if negative_control:
        plain = args.work / f"{model_dir.name}-unpermuted.gguf"
        unpermuted_copy(gguf, plain)
        bad = llama_cpp_logits(plain, ids)[1]
        bad_err = float(np.max(np.abs(bad - ours)) / np.max(np.abs(ours)))
        print(f"gguf_llama_cpp_check: {model_dir.name} without the q/k permutation: {bad_err:.2e}")
        if bad_err < 100 * RTOL:
            fail(f"{model_dir.name}: the unpermuted GGUF matches too ({bad_err:.2e}); the check cannot see the permutation")
    for text in TEXTS:
        theirs_ids = llm.tokenize(text.encode(), add_bos=True, special=False)
        ours_ids = json.loads(run([args.unillm, "tokenize", "--model", model_dir, "--text", text]))
        if theirs_ids != ours_ids:
            fail(f"{model_dir.name}: llama.cpp tokenizes {text!r} as {theirs_ids}, unillm as {ours_ids}")
    back = args.work / f"{model_dir.name}-back"
    shutil.rmtree(back, ignore_errors=True)
    run([args.unillm, "convert", "gguf", "--input", gguf, "--out", back])
    a, _ = safetensors_py.load_file(model_dir / "model.safetensors")
    b, _ = safetensors_py.load_file(back / "model.safetensors")
    if sorted(a) != sorted(b) or any(not torch.equal(a[k], b[k]) for k in a):
        fail(f"{model_dir.name}: convert gguf did not give back the weights bit for bit")
    if not np.array_equal(unillm_logits(args, back, ids), ours):
        fail(f"{model_dir.name}: the converted dir's logits differ")
    print(f"gguf_llama_cpp_check: {model_dir.name}: tokenizer agrees; convert gguf gives the same weights and logits")


def to_hf_name(name):
    glob = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
            "output.weight": "lm_head.weight"}
    if name in glob:
        return glob[name]
    layer = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
    _, n, part, kind = name.split(".")
    return f"model.layers.{n}.{layer[part]}.{kind}"


def check_q4_k_m(args, model_dir, ids):
    """A Q4_K_M file made by llama.cpp's quantiser (llama_model_quantize, what llama-quantize
    runs) from the f32 export: convert gguf reads its Q4_K/Q6_K tensors, and unillm on the
    converted dir gives llama.cpp's logits on the Q4_K_M file (up to llama.cpp's int8 activations
    in K-quant dot products) and generates."""
    import ctypes
    import gguf
    src = args.work / f"{model_dir.name}.gguf"
    run([args.unillm, "export", "--format", "gguf", "--model", model_dir, "--output", src])
    q = args.work / f"{model_dir.name}-Q4_K_M.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.nthread = 2
    if llama_cpp.llama_model_quantize(str(src).encode(), str(q).encode(), ctypes.byref(params)) != 0:
        fail("llama_model_quantize failed")
    types = sorted({t.tensor_type.name for t in gguf.GGUFReader(str(q)).tensors})
    if "Q4_K" not in types or "Q6_K" not in types:
        fail(f"the Q4_K_M file holds {types}, expected Q4_K and Q6_K among them")
    back = args.work / f"{model_dir.name}-Q4_K_M-hf"
    shutil.rmtree(back, ignore_errors=True)
    run([args.unillm, "convert", "gguf", "--input", q, "--out", back])
    got, _ = safetensors_py.load_file(back / "model.safetensors")
    heads = json.loads((back / "config.json").read_text())
    for t in gguf.GGUFReader(str(q)).tensors:  # the converted weights are gguf-py's dequantisation
        want = gguf.quants.dequantize(np.array(t.data), t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
        g = got[to_hf_name(t.name)].float().numpy()
        n = heads["num_attention_heads"] if ".attn_q." in t.name else heads["num_key_value_heads"]
        if ".attn_q." in t.name or ".attn_k." in t.name:  # HF rows (h, c, i) -> GGUF rows (h, i, c)
            g = g.reshape(n, 2, g.shape[0] // n // 2, -1).swapaxes(1, 2).reshape(g.shape)
        if not np.array_equal(g, want):
            fail(f"{q.name}: {t.name} ({t.tensor_type.name}) converted differs from gguf.quants.dequantize")
    theirs = llama_cpp_logits(q, ids)[1]
    ours = unillm_logits(args, back, ids)
    err = float(np.max(np.abs(theirs - ours)) / np.max(np.abs(ours)))
    agree = float(np.mean(theirs.argmax(-1) == ours.argmax(-1)))
    print(f"gguf_llama_cpp_check: {q.name} ({', '.join(types)}): converted equal to gguf.quants.dequantize; max |diff| / max |logit| = "
          f"{err:.2e}, argmax agreement {agree:.0%}")
    if err > 0.05 or agree < 0.9:
        fail(f"{q.name}: unillm on the converted dir is too far from llama.cpp on the file")
    out = run([args.unillm, "generate", "--model", back, "--prompt-ids", "1", "--temperature", "0",
               "--max-new-tokens", "16", "--output-ids", "--quiet"])
    if len(json.loads(out.strip().splitlines()[-1])) != 16:
        fail(f"{q.name}: generate on the converted dir gave {out!r}")


def check_yarn(args, rng, qwen2, llama):
    """YaRN as llama.cpp reads it (type, factor, original context length; attn_factor when not
    the default): Qwen's documented form and LLaMA-Factory's (original kept, max enlarged), run
    40 positions past the original 16."""
    small = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "rope_theta": 10000.0}
    q = init_model(args, "qwen2-yarn", dict(qwen2, **small, max_position_embeddings=16,
                                            rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                          "original_max_position_embeddings": 16}),
                   ROOT / "tests" / "data" / "qwen2-tokenizer", qk_std=0.3, seed=5)
    check_model(args, q, [int(x) for x in rng.integers(0, 151643, 40)])
    m = init_model(args, "llama-yarn-lf", dict(llama, **small, max_position_embeddings=64,
                                               rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                             "original_max_position_embeddings": 16,
                                                             "attention_factor": 1.3}),
                   ROOT / "assets" / "llama2-tokenizer", qk_std=0.3, seed=6)
    check_model(args, m, [1] + [int(x) for x in rng.integers(3, 32000, 40)])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--unillm", required=True, type=Path)
    ap.add_argument("--dump-logits", required=True, type=Path)
    ap.add_argument("--work", required=True, type=Path)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    rng = np.random.default_rng(3)

    stories = args.work / "stories260K"
    shutil.copytree(ROOT / "assets" / "stories260K", stories)
    check_model(args, stories, [1] + [int(x) for x in rng.integers(3, 512, 40)])

    stories15m = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 288,
                  "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 6,
                  "num_key_value_heads": 6, "vocab_size": 32000, "max_position_embeddings": 256,
                  "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
                  "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02}
    m15 = init_model(args, "stories15M-random", stories15m, ROOT / "assets" / "llama2-tokenizer", qk_std=0.2, seed=2)
    check_model(args, m15, [1] + [int(x) for x in rng.integers(3, 32000, 40)], negative_control=True)

    qwen2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
             "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "vocab_size": 151680, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
             "tie_word_embeddings": True, "bos_token_id": 151643, "eos_token_id": 151645,
             "initializer_range": 0.2, "use_sliding_window": False}
    q2 = init_model(args, "qwen2-random", qwen2, ROOT / "tests" / "data" / "qwen2-tokenizer", seed=3)
    check_model(args, q2, [int(x) for x in rng.integers(0, 151643, 40)])

    check_yarn(args, rng, qwen2, stories15m)

    # Mixture of experts: llama.cpp's qwen3moe (top-k renormalised, q/k norms) and qwen2moe (raw
    # top-k weights, a shared expert behind a sigmoid gate, q/k/v biases), every layer sparse.
    moe = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
           "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
           "norm_topk_prob": True, "vocab_size": 151680, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
           "rope_theta": 1000000.0, "tie_word_embeddings": False, "bos_token_id": 151643,
           "eos_token_id": 151645, "initializer_range": 0.2}
    q3m = init_model(args, "qwen3-moe-random", moe, ROOT / "tests" / "data" / "qwen2-tokenizer", seed=7)
    check_model(args, q3m, [int(x) for x in rng.integers(0, 151643, 40)])
    q2m = init_model(args, "qwen2-moe-random", dict(moe, architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe",
                                                   num_experts=6, num_experts_per_tok=3, norm_topk_prob=False,
                                                   shared_expert_intermediate_size=96),
                     ROOT / "tests" / "data" / "qwen2-tokenizer", seed=8)
    check_model(args, q2m, [int(x) for x in rng.integers(0, 151643, 40)])

    # K-quants need rows of whole 256-blocks (llama.cpp falls back to Q5_0/Q8_0 otherwise).
    k256 = dict(stories15m, hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=4, initializer_range=0.05)
    m256 = init_model(args, "llama-256-random", k256, ROOT / "assets" / "llama2-tokenizer", seed=4)
    check_q4_k_m(args, m256, [1] + [int(x) for x in rng.integers(3, 32000, 24)])
    print("gguf_llama_cpp_check: OK")


if __name__ == "__main__":
    main()
