"""unillm's S²-Attn (LLaMA-Factory's shift_attn, src/nn/shift_attention.h) against LongLoRA's
shifted sparse attention written here in torch over transformers' LlamaForCausalLM: its
LlamaAttention.forward replaced by the published algorithm (LongLoRA's llama_attn_replace.py and
LLaMA-Factory's longlora.py: q/k/v after RoPE and repeat_kv; the second half of the heads rolled
by -ceil(G/2) tokens; [B, T] cut into [B*T/G, G] groups attended causally; the output's second
half rolled back) with two differences from LLaMA-Factory's copy, which unillm shares:

- the shift back runs over the whole row (LLaMA-Factory's `attn_output.reshape(...)` is not
  assigned, so its roll runs inside each group: the first ceil(G/2) slots of every group get the
  output computed for the token G positions later, a leak of future tokens, shown below);
- padding is masked in every group (a real token never attends a pad) instead of repeating the
  first group's mask block, which is also tiled in batch order rather than row order.

The loss (HF's mean over scored tokens) and every parameter gradient of the training forward
must agree within 1e-5 / 1e-4 relative in f32, with and without unillm's per-layer recompute,
and full attention (ratio 0) must still equal the unpatched model.

    shift_attn_check.py --dump build/tests/reference/shift_attn_dump [--work DIR]
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers.models.llama import modeling_llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

FAILURES = []
IGNORE = -100
S2_RATIO = 0.25  # LLaMA-Factory's group_size_ratio
RATIO = S2_RATIO  # the ratio the patched attention uses now
VALID = {}  # the batch's [B, T] bool of real tokens, read by the patched attention


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def s2_attention_forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None,
                         output_attentions=False, use_cache=False, cache_position=None, position_embeddings=None,
                         **kwargs):
    bsz, q_len, _ = hidden_states.size()
    heads, dim = self.num_heads, self.head_dim
    q = self.q_proj(hidden_states).view(bsz, q_len, heads, dim).transpose(1, 2)
    k = self.k_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, dim).transpose(1, 2)
    v = self.v_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, dim).transpose(1, 2)
    cos, sin = position_embeddings
    q, k = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
    k = modeling_llama.repeat_kv(k, self.num_key_value_groups)
    v = modeling_llama.repeat_kv(v, self.num_key_value_groups)
    valid = VALID["mask"]  # [B, T]
    if self.training and RATIO > 0:
        group = int(q_len * RATIO)
        assert q_len % group == 0
        groups = q_len // group
        shift = -(-group // 2)  # LLaMA-Factory's roll(-group // 2)

        def to_groups(x):  # [B, H, T, D] -> [B * groups, H, G, D], the second half of the heads rolled
            x = x.transpose(1, 2)
            x = torch.cat((x[:, :, : heads // 2], x[:, :, heads // 2:].roll(-shift, dims=1)), dim=2)
            return x.reshape(bsz * groups, group, heads, dim).transpose(1, 2)

        q, k, v = to_groups(q), to_groups(k), to_groups(v)
        # The same moves for the validity of each token: [B, T, H] -> [B * groups, H, G]
        vh = valid[:, :, None].expand(bsz, q_len, heads)
        vh = torch.cat((vh[:, :, : heads // 2], vh[:, :, heads // 2:].roll(-shift, dims=1)), dim=2)
        vh = vh.reshape(bsz * groups, group, heads).transpose(1, 2)
        length = group
    else:
        vh = valid[:, None, :].expand(bsz, heads, q_len)
        length = q_len
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    allowed = causal & (vh[..., :, None] == vh[..., None, :])  # pads attend pads, real tokens real ones
    scores = (q @ k.transpose(2, 3)) / math.sqrt(dim)
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # [B', H, L, D]
    out = out.transpose(1, 2).contiguous()
    if self.training and RATIO > 0:
        out = out.reshape(bsz, q_len, heads, dim)
        out = torch.cat((out[:, :, : heads // 2], out[:, :, heads // 2:].roll(shift, dims=1)), dim=2)
    out = self.o_proj(out.reshape(bsz, q_len, heads * dim))
    return out, None, past_key_value


def make_model(work, name, heads, kv_heads, seed, hidden=64):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=hidden, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=heads, num_key_value_heads=kv_heads,
                                   max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                   attn_implementation="eager")
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():  # weights large enough that which tokens a head sees matters
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.25)
    path = os.path.join(work, name)
    model.save_pretrained(path, safe_serialization=True)
    return model, path


def reference(model, ids, labels, lengths, ratio):
    global RATIO
    RATIO = ratio
    bsz, t = ids.shape
    VALID["mask"] = torch.arange(t)[None, :] < lengths[:, None]
    model.train()
    model.zero_grad()
    out = model(input_ids=ids.long(), labels=labels.long())
    out.loss.backward()
    return out.loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


def rel_err(got, want):
    return (got.double() - want.double()).abs().max().item() / max(want.double().abs().max().item(), 1e-30)


def check_case(tool, work, model, model_dir, name, lengths, t, ratio, seed, recompute=False):
    g = torch.Generator().manual_seed(seed)
    b = len(lengths)
    lengths = torch.tensor(lengths, dtype=torch.int32)
    ids = torch.randint(0, 96, (b, t), generator=g, dtype=torch.int32)
    labels = ids.clone()
    labels[:, :2] = IGNORE  # a prompt
    for r in range(b):
        ids[r, lengths[r]:] = 0
        labels[r, lengths[r]:] = IGNORE
    src, dst = os.path.join(work, f"{name}.in.safetensors"), os.path.join(work, f"{name}.out.safetensors")
    safetensors_py.save_file({"input_ids": ids, "labels": labels, "lengths": lengths,
                              "ratio": torch.tensor([ratio], dtype=torch.float64)}, src)
    subprocess.run([tool, model_dir, src, dst] + (["recompute"] if recompute else []), check=True)
    got, _ = safetensors_py.load_file(dst)
    loss, grads = reference(model, ids, labels, lengths, ratio)
    loss_err = abs(got["loss"].item() - loss) / abs(loss)
    expect(loss_err <= 1e-5, f"{name}: loss {got['loss'].item():.6f} vs {loss:.6f} (rel {loss_err:.1e})")
    worst, worst_name = 0.0, ""
    for n, want in grads.items():
        e = rel_err(got["grad." + n], want)
        if e > worst:
            worst, worst_name = e, n
    expect(worst <= 1e-4, f"{name}: worst gradient rel diff {worst:.1e} ({worst_name})")
    return loss


def future_leak_of_llamafactory_shift_back():
    """LLaMA-Factory's shift back (a roll inside each group) on a [1, T] row of token indices:
    which token's output lands at each position of the second half of the heads."""
    t, group = 16, 4
    shift = group // 2
    slots = torch.arange(t).roll(-shift)  # token at each shifted slot
    grouped = slots.reshape(t // group, group)
    within = grouped.roll(shift, dims=1).reshape(t)  # its roll over dim 1 of [B*G, G, H, D]
    whole = slots.roll(shift)  # the roll over the whole row
    expect(torch.equal(whole, torch.arange(t)), "the whole-row shift back returns each output to its token")
    ahead = (within - torch.arange(t)).max().item()
    expect(ahead == group, f"LLaMA-Factory's in-group shift back puts a token {ahead} positions ahead at a "
                           f"position (future leak; documented in docs/training.md)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dump", required=True)
    p.add_argument("--work")
    args = p.parse_args()
    work = args.work or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(2)
    gqa, gqa_dir = make_model(work, "gqa", heads=4, kv_heads=2, seed=1)
    full_ref = {}
    # The unpatched model (HF's own eager attention) against the patched one at ratio 0.
    for case in [("full_gqa", [16, 16], 16, 1)]:
        name, lengths, t, seed = case
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, 96, (len(lengths), t), generator=g, dtype=torch.int32)
        labels = ids.clone()
        labels[:, :2] = IGNORE  # as check_case
        gqa.train()
        full_ref[name] = gqa(input_ids=ids.long(), labels=labels.long()).loss.item()
    modeling_llama.LlamaAttention.forward = s2_attention_forward
    full = check_case(args.dump, work, gqa, gqa_dir, "full_gqa", [16, 16], 16, 0.0, 1)
    expect(abs(full - full_ref["full_gqa"]) / full_ref["full_gqa"] < 1e-6,
           "the patched forward at ratio 0 is transformers' own attention")
    s2 = check_case(args.dump, work, gqa, gqa_dir, "s2_gqa", [16, 16], 16, S2_RATIO, 1)
    expect(abs(s2 - full) / full > 1e-3, f"S²-Attn changes the loss ({s2:.5f} vs full {full:.5f})")
    check_case(args.dump, work, gqa, gqa_dir, "s2_gqa_padded", [24, 17, 9], 24, S2_RATIO, 2)
    check_case(args.dump, work, gqa, gqa_dir, "s2_gqa_recompute", [24, 17, 9], 24, S2_RATIO, 2, recompute=True)
    mqa, mqa_dir = make_model(work, "mqa", heads=4, kv_heads=1, seed=3)
    check_case(args.dump, work, mqa, mqa_dir, "s2_mqa_odd_group", [20], 20, S2_RATIO, 4)
    mha, mha_dir = make_model(work, "gqa6", heads=6, kv_heads=3, seed=5, hidden=48)
    check_case(args.dump, work, mha, mha_dir, "s2_gqa_repeat", [32, 30], 32, S2_RATIO, 6)
    future_leak_of_llamafactory_shift_back()
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("all S²-Attn checks passed")


if __name__ == "__main__":
    main()
