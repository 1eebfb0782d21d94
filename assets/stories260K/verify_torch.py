#!/usr/bin/env python3
"""Independent check of this directory: a plain PyTorch Llama forward (HF conventions: rotate_half
RoPE, GQA, RMSNorm eps 1e-5, tied embeddings) over model.safetensors, read here with json+struct
(no safetensors package), decodes greedily from BOS and must reproduce llama2c_sample.txt, the
greedy sample karpathy/llama2.c prints for the original stories260K.bin. Pieces come from tokenizer.json.
Usage: /usr/bin/python3 verify_torch.py [DIR]"""
import json, struct, sys, os
import torch

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
cfg = json.load(open(f"{d}/config.json"))
raw = open(f"{d}/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
W = {}
for k, v in hdr.items():
    if k == "__metadata__":
        continue
    assert v["dtype"] == "F32"
    b, e = v["data_offsets"]
    W[k] = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=torch.float32).reshape(v["shape"])

C, L, H, Hkv = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
D, eps, theta = C // H, cfg["rms_norm_eps"], cfg["rope_theta"]

def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

def rotate_half(x):
    return torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)

def forward(ids):  # ids: [T] -> logits [T, V]
    T = len(ids)
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang.cos()] * 2, -1).float(), torch.cat([ang.sin()] * 2, -1).float()
    x = W["model.embed_tokens.weight"][ids]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(T, H, D).transpose(0, 1)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(T, Hkv, D).transpose(0, 1)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(T, Hkv, D).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // Hkv, 0), v.repeat_interleave(H // Hkv, 0)
        a = torch.softmax(q @ k.transpose(1, 2) / D ** 0.5 + mask, -1) @ v
        x = x + a.transpose(0, 1).reshape(T, C) @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        g = torch.nn.functional.silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)
        x = x + g @ W[p + "mlp.down_proj.weight"].T
    x = rms(x, W["model.norm.weight"])
    return x @ W.get("lm_head.weight", W["model.embed_tokens.weight"]).T

tok = json.load(open(f"{d}/tokenizer.json"))
pieces = {i: p for p, i in tok["model"]["vocab"].items()}
ids = [cfg["bos_token_id"]]
with torch.no_grad():
    for _ in range(256):
        ids.append(int(forward(ids)[-1].argmax()))
text = ""
for prev, t in zip(ids, ids[1:]):
    s = pieces[t].replace("\u2581", " ")
    if prev == 1 and s.startswith(" "):
        s = s[1:]  # run.c strips the space after BOS
    if s.startswith("<0x") and s.endswith(">"):
        s = chr(int(s[3:5], 16))
    text += s
want = open(f"{d}/llama2c_sample.txt").read()
print(text)
assert text.strip() == want.strip(), "greedy sample differs from llama2c_sample.txt"
print("OK: greedy sample matches llama2c_sample.txt")
