"""Tiny pure-Python safetensors reader/writer for the reference scripts (no PyPI package needed).

Format: u64 little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}} padded with
spaces to a multiple of 8, then the raw little-endian tensor bytes (offsets relative to the data).
"""
import json
import struct
import sys

import torch

_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}
if sys.byteorder != "little":
    raise RuntimeError("[safetensors_py] needs a little-endian host")
# Same-size integer types used to move bytes of dtypes numpy lacks (bf16).
_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16}


def _to_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype in _BITS:
        t = t.view(_BITS[t.dtype])
    return t.numpy().tobytes()


def save_file(tensors, path, metadata=None):
    """Writes {name: torch.Tensor} to path; tensors are stored in name order. metadata defaults
    to {"format": "pt"}, which transformers' from_pretrained insists on."""
    if metadata is None:
        metadata = {"format": "pt"}
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in _NAMES:
            raise ValueError(f"[safetensors_py] {name}: dtype {t.dtype} not supported")
        data = _to_bytes(t)
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load_file(path):
    """Returns ({name: torch.Tensor}, metadata dict). Validates offsets against the file size."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"[safetensors_py] {path}: file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"[safetensors_py] {path}: header length {n} past end of file")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = memoryview(raw)[8 + n:]
    metadata = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"[safetensors_py] {path}: {name}: dtype {info['dtype']} unknown")
        b, e = info["data_offsets"]
        shape = info["shape"]
        count = 1
        for s in shape:
            count *= s
        itemsize = torch.empty((), dtype=dtype).element_size()
        if not (0 <= b <= e <= len(data)) or e - b != count * itemsize:
            raise ValueError(f"[safetensors_py] {path}: {name}: bad data_offsets {b}..{e}")
        buf = bytearray(data[b:e])
        if count == 0:
            t = torch.empty(shape, dtype=dtype)
        else:
            store = _BITS.get(dtype, dtype)
            t = torch.frombuffer(buf, dtype=store).view(dtype).reshape(shape).clone()
        out[name] = t
    return out, metadata


def load_dir(model_dir):
    """All tensors of an HF model dir: model.safetensors, or the shards named by its index."""
    import os
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    state = {}
    for fn in files:
        tensors, _ = load_file(os.path.join(model_dir, fn))
        state.update(tensors)
    return state
