"""QLoRA's weight formats (unillm ops/quant_4bit.h) against bitsandbytes' semantics.

bitsandbytes has no CPU build for the reference venv's torch 1.13, so its quantisation is written
again here in torch from its source (functional.py: get_4bit_type, create_dynamic_map,
quantize_4bit with compress_statistics; backends/default/ops.py: quantize_blockwise,
quantize_4bit, dequantize_4bit, int8_vectorwise_quant), and compared with what bnb_quant_dump
(the C++ side) writes: packed 4-bit code bytes, block absmaxes, double-quantised absmax codes,
scales and offset, the dequantised weight, and the three tables. Weights: random ones whose
blocks span rows (odd K, odd element count), a block of zeros, and stories260K's projections.

    bnb_quant_check.py --dump build/tests/reference/bnb_quant_dump [--work DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

# bitsandbytes' published NF4 table (functional.get_4bit_type("nf4")).
NF4 = torch.tensor([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=torch.float32)


def fp4_table():
    # functional.get_4bit_type("fp4"): sign bit, 2 exponent bits, 1 mantissa bit, normalised.
    t = torch.tensor([0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0,
                      -0.0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0], dtype=torch.float32)
    return t.div_(t.abs().max())


def create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    data = []
    non_sign_bits = total_bits - 1
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    for i in range(max_exponent_bits):
        items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                    else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        b = torch.linspace(0.1, 1, items, dtype=torch.float32)
        means = (b[:-1] + b[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    assert additional_items == 0
    data.append(0)
    data.append(1.0)
    assert len(data) == 2 ** total_bits
    data.sort()
    return torch.tensor(data, dtype=torch.float32)


def scale_blocks(a, blocksize):
    """Flat absmax per block and a · (1 / absmax) clamped to [-1, 1] (bnb's default kernels).
    A block of zeros scales to 0 (bnb would divide by zero: its code then stands for 0 too)."""
    n = a.numel()
    flat = a.reshape(n)
    pad = (-n) % blocksize
    blocks = torch.cat([flat, flat.new_zeros(pad)]).view(-1, blocksize)
    absmax = blocks.abs().max(dim=1).values
    inv = torch.where(absmax > 0, 1 / absmax, torch.zeros_like(absmax))
    scaled = torch.clamp(blocks * inv.view(-1, 1), -1, 1).reshape(-1)[:n]
    return absmax, scaled


def nearest(scaled, code):
    return torch.argmin(torch.abs(scaled.view(-1, 1) - code.view(1, -1)), dim=-1)


def quantize_4bit(w, quant_type, compress_statistics, blocksize=64):
    code = NF4 if quant_type == "nf4" else fp4_table()
    absmax, scaled = scale_blocks(w, blocksize)
    if scaled.numel() % 2:
        scaled = torch.cat([scaled, scaled.new_zeros(1)])
    q = nearest(scaled, code).to(torch.uint8)
    packed = q[::2] << 4 | q[1::2]
    out = {"packed": packed, "absmax": absmax}
    decoded = absmax
    if compress_statistics:
        offset = absmax.mean()
        absmax2, scaled2 = scale_blocks(absmax - offset, 256)
        qabs = nearest(scaled2, create_dynamic_map()).to(torch.uint8)
        out.update(offset=offset, absmax2=absmax2, qabs=qabs)
        dmap = create_dynamic_map()
        idx = torch.arange(qabs.numel()) // 256
        decoded = dmap[qabs.long()] * absmax2[idx] + offset
    n = w.numel()
    unpacked = torch.stack([packed >> 4, packed & 0xF], dim=1).reshape(-1)[:n].long()
    out["decoded"] = decoded
    out["dequant"] = (code[unpacked] * decoded[torch.arange(n) // blocksize]).view(w.shape)
    return out


def run_dump(tool, w, qtype, dq, work):
    src, dst = os.path.join(work, "w.f32"), os.path.join(work, "out.bin")
    w.contiguous().numpy().tofile(src)
    n, k = w.shape
    subprocess.run([tool, src, str(n), str(k), qtype, "1" if dq else "0", dst], check=True)
    return open(dst, "rb").read()


class Reader:
    def __init__(self, raw):
        self.raw, self.at = raw, 0

    def take(self, count, dtype):
        size = count * torch.tensor([], dtype=dtype).element_size()
        t = torch.frombuffer(bytearray(self.raw[self.at:self.at + size]), dtype=dtype)
        self.at += size
        return t


FAILURES = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def check_4bit(tool, name, w, qtype, dq, work):
    ref = quantize_4bit(w, qtype, dq)
    r = Reader(run_dump(tool, w, qtype, dq, work))
    n = w.numel()
    blocks = (n + 63) // 64
    packed = r.take((n + 1) // 2, torch.uint8)
    tag = f"{name} {qtype}{' double' if dq else ''}"
    expect(torch.equal(packed, ref["packed"]), f"{tag}: {packed.numel()} packed code bytes equal")
    if dq:
        absmax2 = r.take((blocks + 255) // 256, torch.float32)
        qabs = r.take(blocks, torch.uint8)
        offset = r.take(1, torch.float32)
        expect(abs(offset.item() - ref["offset"].item()) <= 1e-6 * abs(ref["offset"].item()),
               f"{tag}: offset {offset.item():.9g} vs {ref['offset'].item():.9g}")
        # The mean is summed in double here and in torch's f32 cascade there: the offset, and so
        # the scales of the centred absmaxes, may differ in the last bit.
        expect(torch.allclose(absmax2, ref["absmax2"], rtol=1e-6, atol=0),
               f"{tag}: {absmax2.numel()} absmax scales within 1e-6")
        same = (qabs == ref["qabs"]).sum().item()
        expect(same == blocks, f"{tag}: {same}/{blocks} double-quantised absmax codes equal")
    else:
        absmax = r.take(blocks, torch.float32)
        expect(torch.equal(absmax, ref["absmax"]), f"{tag}: {blocks} block absmaxes equal")
    decoded = r.take(blocks, torch.float32)
    err = (decoded - ref["decoded"]).abs().max().item()
    expect(err <= 1e-6 * ref["decoded"].abs().max().item(), f"{tag}: decoded absmaxes within {err:.2e}")
    deq = r.take(n, torch.float32).view(w.shape)
    err = (deq - ref["dequant"]).abs().max().item()
    expect(err <= 1e-6 * w.abs().max().item(), f"{tag}: dequantised weight within {err:.2e}")
    rel = ((deq - w).norm() / w.norm()).item()
    print(f"     {tag}: relative Frobenius error of the weight {rel:.4f}")
    return r


def check_int8(tool, name, w, work):
    # bitsandbytes' int8_vectorwise_quant: round(w · (127 / absmax_row)); unillm's int8 computes
    # round(w / (absmax_row / 127)) (PaddleNLP's formula). Same arithmetic but for f32 rounding.
    r = Reader(run_dump(tool, w, "int8", False, work))
    n, k = w.shape
    codes = r.take(n * k, torch.int8).view(n, k)
    scales = r.take(n, torch.float32)
    row = w.abs().max(dim=1).values
    ref = torch.round(w * (127.0 / row.unsqueeze(-1))).to(torch.int8)
    diff = (codes.int() - ref.int()).abs()
    expect(diff.max().item() <= 1, f"{name} int8: codes within 1 of bnb's ({(diff > 0).sum().item()} of {n * k} differ)")
    expect(torch.allclose(scales * 127, row, rtol=1e-6), f"{name} int8: row scales = absmax / 127")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--work", default=None)
    ap.add_argument("--stories", default="assets/stories260K/model.safetensors")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="bnb_quant_")
    os.makedirs(work, exist_ok=True)

    # The tables first: the dump appends them after the weight.
    r = check_4bit(args.dump, "random 37x173", torch.randn(37, 173, generator=torch.Generator().manual_seed(1)) * 0.05,
                   "nf4", True, work)
    expect(torch.equal(r.take(16, torch.float32), NF4), "nf4 table equal")
    expect(torch.equal(r.take(16, torch.float32), fp4_table()), "fp4 table equal")
    # bitsandbytes builds the map with torch.linspace at run time, whose vectorised path rounds some
    # values an ulp away from its scalar path (unillm's), depending on the torch build; the midpoints
    # of two such values then differ by up to 2 ulp.
    dmap = r.take(256, torch.float32)
    ulps = (dmap.view(torch.int32).long() - create_dynamic_map().view(torch.int32).long()).abs().max().item()
    expect(ulps <= 2, f"dynamic map within {ulps} ulp ({(dmap != create_dynamic_map()).sum().item()} of 256 differ)")

    g = torch.Generator().manual_seed(2)
    check_4bit(args.dump, "random 37x173", torch.randn(37, 173, generator=g) * 0.05, "fp4", False, work)
    w = torch.randn(300, 256, generator=g) * 0.02
    w[3, :128] = 0  # whole zero blocks
    for qtype in ("nf4", "fp4"):
        check_4bit(args.dump, "random 300x256 (zero blocks)", w, qtype, True, work)
    check_4bit(args.dump, "random 300x256 (zero blocks)", w, "nf4", False, work)
    check_int8(args.dump, "random 300x256", w[4:], work)

    tensors, _ = safetensors_py.load_file(args.stories)
    for key in ("model.layers.0.self_attn.q_proj.weight", "model.layers.2.mlp.down_proj.weight",
                "model.layers.4.mlp.gate_proj.weight"):
        t = tensors[key].float()
        for qtype in ("nf4", "fp4"):
            check_4bit(args.dump, key, t, qtype, True, work)
        check_int8(args.dump, key, t, work)

    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        sys.exit(1)
    print("all bitsandbytes checks passed")


if __name__ == "__main__":
    main()
