#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/, docs/fuzzing.md).

Seeds are real files of the repository (assets/, tests/data/, examples/, tests/cli/) and of
../shared/data, copied as they are or cut down to a few KB in their own format (the first pieces
of the Llama 2 tokenizer.model, the first records of its tokenizer.bin, a 1-layer slice of
stories260K.bin), plus a few hand-made malformed variants. Targets that read several formats take
a one-byte selector before the file (see each target's header). Only files named here are written:
committed reproducers (repro_*) and other files in the corpus directories are left alone.
Usage: tests/fuzz/make_seeds.py   (from anywhere; plain Python 3, no packages)
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))
CORPUS = os.path.join(HERE, "corpus")
MAX_SEED = 200 * 1024


def src(path):
    """A repository path, or ../shared/data/... when it starts with 'shared/'."""
    if path.startswith("shared/"):
        return os.path.join(SHARED, path[len("shared/"):])
    return os.path.join(ROOT, path)


def read(path):
    with open(src(path), "rb") as f:
        return f.read()


def write(target, name, data):
    assert len(data) <= MAX_SEED, (target, name, len(data))
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- protobuf wire format (SentencePiece ModelProto) --------------------------------------------
def varint(b, i):
    v, shift = 0, 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, i
        shift += 7


def enc_varint(v):
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        out.append(c | (0x80 if v else 0))
        if not v:
            return bytes(out)


def proto_fields(b):
    """[(field, wire, raw value bytes)] of one message (wire types 0, 1, 2, 5)."""
    out, i = [], 0
    while i < len(b):
        key, i = varint(b, i)
        field, wire = key >> 3, key & 7
        start = i
        if wire == 0:
            _, i = varint(b, i)
            out.append((field, wire, b[start:i]))
        elif wire == 2:
            n, i = varint(b, i)
            out.append((field, wire, b[i:i + n]))
            i += n
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
            out.append((field, wire, b[start:i]))
        else:
            raise ValueError("wire type %d" % wire)
    return out


def proto_encode(fields):
    out = bytearray()
    for field, wire, raw in fields:
        out += enc_varint(field << 3 | wire)
        out += enc_varint(len(raw)) + raw if wire == 2 else raw
    return bytes(out)


def sentencepiece_seeds():
    model = proto_fields(read("assets/llama2-tokenizer/tokenizer.model"))
    pieces = [f for f in model if f[0] == 1]
    rest = [f for f in model if f[0] != 1]
    # <unk> <s> </s>, the 256 byte pieces <0x00>..<0xFF>, then the 301 best-scored pieces.
    small = proto_encode(pieces[:560] + rest)
    write("sentencepiece_model", "llama2_first560.model", small)
    write("sentencepiece_model", "bad_truncated.model", small[:3001])
    def with_trainer(fn):
        out = []
        for f in rest:
            out.append((2, 2, proto_encode(fn(proto_fields(f[2])))) if f[0] == 2 else f)
        return proto_encode(pieces[:300] + out)
    unigram = lambda t: [(3, 0, enc_varint(1)) if f[0] == 3 else f for f in t]
    write("sentencepiece_model", "bad_unigram.model", with_trainer(unigram))
    ids = lambda t: t + [(40, 0, enc_varint(9999)), (41, 0, enc_varint(2**32 - 1))]
    write("sentencepiece_model", "odd_special_ids.model", with_trainer(ids))
    bad_type = proto_encode([(1, 2, proto_encode([(1, 2, b"x"), (3, 0, enc_varint(9))]))])
    write("sentencepiece_model", "bad_piece_type.model", bad_type + proto_encode(rest))
    write("sentencepiece_model", "bad_wire_type.model", b"\x0f\x01\x02")
    # A tokenizer.model may also be a tiktoken ranks file (Llama 3), sniffed by content.
    lines = read("tests/data/llama3-tokenizer/tokenizer.model").split(b"\n")
    write("sentencepiece_model", "llama3_tiktoken_first400.model", b"\n".join(lines[:400]) + b"\n")
    write("sentencepiece_model", "bad_tiktoken_rank.model", b"IQ== 0\nIg== x\n")


# --- llama2.c tokenizer.bin and checkpoints ------------------------------------------------------
def llama2c_tokenizer_records(b):
    (max_len,), i, recs = struct.unpack_from("<i", b, 0), 4, []
    while i < len(b):
        score, n = struct.unpack_from("<fi", b, i)
        recs.append((score, b[i + 8:i + 8 + n]))
        i += 8 + n
    return max_len, recs


def llama2c_tokenizer_bytes(max_len, recs):
    out = bytearray(struct.pack("<i", max_len))
    for score, piece in recs:
        out += struct.pack("<fi", score, len(piece)) + piece
    return bytes(out)


def llama2c_tokenizer_seeds():
    t = "llama2c_tokenizer"
    tok512 = read("tests/data/stories260K/tok512.bin")
    write(t, "stories260K_tok512.bin", tok512)
    max_len, recs = llama2c_tokenizer_records(read("tests/data/llama2-tokenizer/tokenizer.bin"))
    write(t, "llama2_first400.bin", llama2c_tokenizer_bytes(max_len, recs[:400]))
    max_len, recs = llama2c_tokenizer_records(tok512)
    write(t, "bad_max_token_length.bin", struct.pack("<i", 0) + tok512[4:])
    write(t, "bad_truncated.bin", tok512[:1001])
    write(t, "bad_two_tokens.bin", llama2c_tokenizer_bytes(max_len, recs[:2]))
    write(t, "bad_duplicate.bin", llama2c_tokenizer_bytes(max_len, recs[:40] + [recs[39]]))
    write(t, "bad_utf8.bin", llama2c_tokenizer_bytes(max_len, recs[:40] + [(0.0, b"\xff\xfe")]))
    zero = llama2c_tokenizer_bytes(max_len, recs[:10])[:-1] + struct.pack("<fi", 0.0, 0)
    write(t, "bad_zero_length.bin", zero)


def llama2c_checkpoint_seeds():
    """stories260K.bin cut to dim 16, hidden 24, 1 layer, 2 heads, 1 kv head, vocab 32, seq 8."""
    b = read("shared/stories260K/stories260K.bin")
    C, F, L, H, Hkv, V, S = struct.unpack_from("<7i", b, 0)
    D = C // H
    f = struct.unpack_from("<%df" % ((len(b) - 28) // 4), b, 28)
    pos = [0]
    def take(*shape):
        n = 1
        for s in shape:
            n *= s
        a = f[pos[0]:pos[0] + n]
        pos[0] += n
        return a, shape
    def cut(arr, new):  # the leading corner of a row-major array
        a, shape = arr
        out = []
        def rec(off, dim):
            stride = 1
            for s in shape[dim + 1:]:
                stride *= s
            for k in range(new[dim]):
                if dim + 1 == len(shape):
                    out.append(a[off + k])
                else:
                    rec(off + k * stride, dim + 1)
        rec(0, 0)
        return out
    c, fh, l, h, kv, v, s = 16, 24, 1, 2, 1, 32, 8
    d = c // h
    parts = [cut(take(V, C), (v, c)), cut(take(L, C), (l, c)), cut(take(L, C, C), (l, c, c)),
             cut(take(L, Hkv * D, C), (l, kv * d, c)), cut(take(L, Hkv * D, C), (l, kv * d, c)),
             cut(take(L, C, C), (l, c, c)), cut(take(L, C), (l, c)),
             cut(take(L, F, C), (l, fh, c)), cut(take(L, C, F), (l, c, fh)),
             cut(take(L, F, C), (l, fh, c)), cut(take(C), (c,)),
             cut(take(S, D // 2), (s, d // 2)), cut(take(S, D // 2), (s, d // 2))]
    floats = [x for p in parts for x in p]
    body = struct.pack("<%df" % len(floats), *floats)
    t = "llama2c_checkpoint"
    write(t, "stories260K_slice.bin", struct.pack("<7i", c, fh, l, h, kv, v, s) + body)
    wcls = struct.pack("<%df" % (v * c), *parts[0])
    write(t, "stories260K_slice_wcls.bin", struct.pack("<7i", c, fh, l, h, kv, -v, s) + body + wcls)
    write(t, "bad_header_only.bin", struct.pack("<7i", c, fh, l, h, kv, v, s))
    write(t, "bad_extra_bytes.bin", struct.pack("<7i", c, fh, l, h, kv, v, s) + body + b"\0" * 4)
    write(t, "bad_heads.bin", struct.pack("<7i", c, fh, l, 3, 1, v, s) + body[:64])
    write(t, "bad_odd_head_size.bin", struct.pack("<7i", 6, fh, l, 2, 1, v, s) + body[:64])
    write(t, "bad_negative_dim.bin", struct.pack("<7i", -c, fh, l, h, kv, v, s) + body[:64])


# --- JSON and YAML configuration files -----------------------------------------------------------
def copy(target, name, path, prefix=b""):
    write(target, name, prefix + read(path))


def model_config_seeds():
    t = "model_config"
    copy(t, "stories260K_config.json", "assets/stories260K/config.json")
    copy(t, "llama_tiny_config.json", "examples/init/llama_tiny_config.json")
    copy(t, "qwen2_tiny_config.json", "examples/init/qwen2_tiny_config.json")
    copy(t, "qwen2_config.json", "shared/qwen2-tokenizer/config.json")
    base = json.loads(read("assets/stories260K/config.json"))
    variants = {
        "llama3_rope.json": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 8192},
                             "eos_token_id": [128001, 128008, 128009]},
        "qwen3_head_dim.json": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
                                "head_dim": 16, "partial_rotary_factor": 0.5},
        "mistral_window.json": {"model_type": "mistral", "sliding_window": 4096},
        "bad_kv_heads.json": {"num_key_value_heads": 3},
        "bad_type.json": {"hidden_size": "64"},
        "bad_rope_type.json": {"rope_scaling": {"type": "yarn", "factor": 4}},
    }
    for name, change in variants.items():
        write(t, name, json.dumps(dict(base, **change), indent=2).encode())
    write(t, "bad_not_object.json", b"[1, 2, 3]")
    write(t, "bad_truncated.json", read("assets/stories260K/config.json")[:200])


def tokenizer_configs_seeds():
    t = "tokenizer_configs"
    copy(t, "c_stories260K_tokenizer_config.json", "assets/stories260K/tokenizer_config.json", b"c")
    copy(t, "c_llama2_tokenizer_config.json", "assets/llama2-tokenizer/tokenizer_config.json", b"c")
    copy(t, "c_qwen2_tokenizer_config.json", "tests/data/qwen2-tokenizer/tokenizer_config.json",
         b"c")
    copy(t, "g_stories260K_generation_config.json", "assets/stories260K/generation_config.json",
         b"g")
    copy(t, "s_stories260K_special_tokens_map.json", "assets/stories260K/special_tokens_map.json",
         b"s")
    copy(t, "s_qwen2_special_tokens_map.json", "tests/data/qwen2-tokenizer/special_tokens_map.json",
         b"s")
    copy(t, "a_qwen2_added_tokens.json", "tests/data/qwen2-tokenizer/added_tokens.json", b"a")
    write(t, "g_eos_list.json", b'g{"bos_token_id": 1, "eos_token_id": [2, 4, 99999, -1]}')
    write(t, "c_bad_decoder_key.json", b'c{"added_tokens_decoder": {"x": {"content": "<s>"}}}')
    write(t, "c_bad_bos.json", b'c{"bos_token": "<nope>"}')
    write(t, "c_no_bos.json", b'c{"add_bos_token": true, "bos_token": null, "eos_token": "</s>"}')


def train_args_seeds():
    t = "train_args_yaml"
    for sub in ("train_full", "train_lora", "train_freeze", "merge_lora"):
        d = os.path.join(ROOT, "examples", sub)
        for name in sorted(os.listdir(d)):
            if name.endswith(".yaml"):
                copy(t, name, os.path.join("examples", sub, name))
    lora = read("examples/train_lora/stories260K_lora_sft.yaml")
    write(t, "overrides.yaml", lora + b"\n#--overrides\nlearning_rate=1e-3\n"
          b"lr_scheduler_kwargs.min_lr=1e-6\nlr_scheduler_type=cosine_with_min_lr\n")
    write(t, "bad_syntax.yaml", b"model_name_or_path: [unclosed\nstage: sft\n")
    write(t, "bad_unknown_key.yaml", b"model_name_or_path: m\nlearnig_rate: 1e-4\n")
    write(t, "bad_root_list.yaml", b"- a\n- b\n")
    t = "train_args_paddle"
    for path in ("examples/paddlenlp/qwen2_tiny_sft_argument.json",
                 "examples/paddlenlp/stories260K_pretrain_argument.json",
                 "tests/cli/paddlenlp_llama/lora_argument.json",
                 "tests/cli/paddlenlp_llama/pretrain_argument.json",
                 "tests/cli/paddlenlp_llama/sft_argument.json"):
        copy(t, os.path.basename(path), path)
    sft = read("tests/cli/paddlenlp_llama/sft_argument.json")
    write(t, "overrides.json", sft + b"\n#--overrides\nlora=true\nmax_steps=3\n")
    write(t, "bad_not_object.json", b'["model_name_or_path"]')
    write(t, "bad_truncated.json", sft[:300])


# --- datasets ------------------------------------------------------------------------------------
def dataset_info_seeds():
    t = "dataset_info"
    copy(t, "pt_dataset_info.json", "tests/data/pt/dataset_info.json")
    copy(t, "sft_dataset_info.json", "tests/data/sft/dataset_info.json")
    copy(t, "llama_factory_dataset_info.json", "shared/llama-factory/dataset_info.json")
    write(t, "dirs_and_types.json", json.dumps({
        "texts": {"file_name": "texts"}, "mixed": {"file_name": "mixed"},
        "empty": {"file_name": "empty_dir"}, "csv": {"file_name": "table.csv"},
        "ranked": {"file_name": "docs.json", "ranking": True},
        "sampled": {"file_name": "docs.json", "num_samples": 10},
        "openai": {"file_name": "docs.json", "formatting": "openai"},
        "hub_local": {"hf_hub_url": "org/x", "file_name": "docs.json"},
        "no_file": {"columns": {"prompt": "text"}}}, indent=2).encode())
    write(t, "bad_not_object.json", b'["docs.json"]')


def json_head(path, n):
    """The first n records of a JSON array file, written as LLaMA-Factory writes them."""
    return json.dumps(json.loads(read(path))[:n], indent=2, ensure_ascii=False).encode()


def dataset_records_seeds():
    t = "dataset_records"
    copy(t, "t_docs.txt", "tests/data/pt/docs.txt", b"t")
    copy(t, "t_stories260K_sample.txt", "shared/stories260K/sample.txt", b"t")
    write(t, "t_wiki_demo_head.txt", b"t" + read("shared/llama-factory/wiki_demo.txt")[:6000])
    copy(t, "j_docs.json", "tests/data/pt/docs.json", b"j")
    copy(t, "j_docs.jsonl", "tests/data/pt/docs.jsonl", b"j")
    c4 = read("shared/llama-factory/c4_demo.jsonl").split(b"\n")
    write(t, "j_c4_demo_head.jsonl", b"j" + b"\n".join(c4[:6]) + b"\n")
    copy(t, "a_alpaca_history.jsonl", "tests/data/sft/alpaca_history.jsonl", b"a")
    copy(t, "a_identity.json", "shared/llama-factory/identity.json", b"a")
    write(t, "a_alpaca_en_demo_head.json",
          b"a" + json_head("shared/llama-factory/alpaca_en_demo.json", 8))
    write(t, "s_glaive_toolcall_head.json",
          b"s" + json_head("shared/llama-factory/glaive_toolcall_en_demo.json", 3))
    copy(t, "s_sharegpt_lf.json", "tests/data/sft/sharegpt_lf.json", b"s")
    copy(t, "o_openai_messages.jsonl", "tests/data/sft/openai_messages.jsonl", b"o")
    copy(t, "p_paddle_train.json", "tests/data/sft/paddle/train.json", b"p")
    copy(t, "p_paddle_dev.json", "tests/data/sft/paddle/dev.json", b"p")
    copy(t, "T_docs.txt", "tests/data/pt/docs.txt", b"T")
    copy(t, "J_docs.jsonl", "tests/data/pt/docs.jsonl", b"J")
    write(t, "j_bad_unclosed.json", b'j[\n  {"text": "a"},\n  {"text": "b"\n')
    write(t, "j_bad_mismatched.json", b'j[{"text": "a"]}, {"text": "b"}]')
    write(t, "j_bad_trailing.json", b'j[{"text": "a"}] x')
    write(t, "t_line_breaks.txt", b"tone\r\ntwo\rthree\x0bfour\xc2\x85five\xe2\x80\xa8six\n")
    write(t, "t_bad_utf8.txt", b"tgood line\nbad \xc3\x28 line\n")
    write(t, "a_bad_history.jsonl",
          b'a{"instruction": "q", "output": "r", "history": [["only"]]}\n')
    write(t, "s_bad_order.json", b's[{"conversations": [{"from": "gpt", "value": "x"}]}]')
    write(t, "p_bad_rounds.json", b'p{"src": ["a", "b"], "tgt": ["c"]}\n{"src": "a", "tgt": ""}\n')


def tokenizer_json_seeds():
    copy("tokenizer_json", "stories260K_tokenizer.json", "assets/stories260K/tokenizer.json")


def gguf_bytes(kvs, tensors, version=3, align=32):
    """A GGUF file: kvs [(key, type, value)], tensors [(name, dims (ne order), ggml type, bytes)]."""
    def gstr(v):
        b = v.encode()
        return struct.pack("<Q", len(b)) + b

    def value(t, v):
        if t == 4:
            return struct.pack("<I", v)
        if t == 6:
            return struct.pack("<f", v)
        if t == 8:
            return gstr(v)
        if t == 9:  # (element type, values)
            et, vals = v
            return struct.pack("<IQ", et, len(vals)) + b"".join(value(et, x) for x in vals)
        raise ValueError(t)

    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + value(t, v)
    offset, data = 0, b""
    for name, dims, gt, payload in tensors:
        out += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", gt, offset)
        pad = (-len(payload)) % align
        data += payload + b"\0" * pad
        offset += len(payload) + pad
    out += b"\0" * ((-len(out)) % align)
    return out + data


def gguf_header_seeds():
    t = "gguf_header"
    kvs = [("general.architecture", 8, "llama"), ("general.alignment", 4, 32),
           ("llama.block_count", 4, 1), ("llama.attention.layer_norm_rms_epsilon", 6, 1e-5),
           ("tokenizer.ggml.tokens", 9, (8, ["<unk>", "<s>", "</s>", "a"])),
           ("tokenizer.ggml.scores", 9, (6, [0.0, 0.0, 0.0, -1.0]))]
    f32 = struct.pack("<6f", *range(6))
    q8_0 = struct.pack("<e", 0.5) + bytes(range(32))  # one block of 32
    q4_0 = struct.pack("<e", 0.25) + bytes(range(16))
    tensors = [("token_embd.weight", [3, 2], 0, f32), ("blk.0.attn_q.weight", [32, 1], 8, q8_0),
               ("blk.0.ffn_down.weight", [32, 1], 2, q4_0)]
    write(t, "tiny_llama.gguf", gguf_bytes(kvs, tensors))
    write(t, "v2_no_tensors.gguf", gguf_bytes(kvs[:2], [], version=2))
    write(t, "bad_magic.gguf", b"GGUX" + gguf_bytes(kvs, tensors)[4:])
    write(t, "bad_row_not_whole_blocks.gguf", gguf_bytes(kvs, [("x", [31, 1], 8, q8_0)]))
    write(t, "bad_truncated.gguf", gguf_bytes(kvs, tensors)[:-20])


def main():
    for make in (sentencepiece_seeds, llama2c_tokenizer_seeds, llama2c_checkpoint_seeds,
                 model_config_seeds, tokenizer_configs_seeds, train_args_seeds,
                 dataset_info_seeds, dataset_records_seeds, tokenizer_json_seeds, gguf_header_seeds):
        make()
    for d in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, d))
        size = sum(os.path.getsize(os.path.join(CORPUS, d, f)) for f in files)
        print("%-22s %3d files %7d bytes" % (d, len(files), size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
