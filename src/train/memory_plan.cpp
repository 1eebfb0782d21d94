// Memory plan arithmetic (see memory_plan.h). Every term names the tensors it counts; a change to
// what an op saves (ops/*.cpp) or allocates must be mirrored here, and tests/train/
// memory_plan_test.cpp pins the figures of a tiny config.
#include "train/memory_plan.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/freeze.h"
#include "nn/lora.h"
#include "train/finetune.h"
#include "train/optimizer.h"

namespace unillm::train {

namespace {

// The shapes the activation terms count. One process: every row count is the micro-batch's N
// tokens and every width the model's. Under tensor / context parallelism (TensorSplit) q, kv, H
// (and F when the MLP is split) are this process's share; the attention sees all N tokens (its
// input gathered under sequence parallelism), the residual stream its R rows, the MLP Nm rows
// (N when split, R under context parallelism) and the loss Nl (N when the vocabulary-parallel
// loss gathers the rows).
struct Dims {
  int64_t N, C, F, V, H, q, kv, e;
  int64_t R, Nm, Nl;
  int64_t T = 1;
  // Elements of the weight blocks a split layer copies per forward (ops::take_rows/take_cols)
  // and its GEMMs keep for backward: q/k/v and o_proj's, gate/up and down_proj's.
  int64_t attn_blocks = 0, mlp_blocks = 0;
};

Dims make_dims(const MemoryPlanInputs& in, int64_t ffn) {
  const models::ModelConfig& c = in.model;
  const MemoryPlanInputs::TensorSplit& ts = in.tensor_split;
  const int64_t T = std::max<int64_t>(1, ts.degree), N = in.rows * in.seq_len;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t R = ts.sequence ? (N + T - 1) / T : N;  // padded to equal blocks
  const int64_t M = std::clamp<int64_t>(ts.mlp_degree, 1, T), shards = T / M;
  Dims d{N, c.hidden_size, ffn / M, c.vocab_size, c.num_heads / T, q / T, kv / T, in.act_bytes,
         R, ts.sequence ? (N + shards - 1) / shards : N, ts.lm_head ? N : R};
  d.T = T;
  if (T > 1) d.attn_blocks = c.hidden_size * (2 * q + 2 * kv) / T;
  if (M > 1) d.mlp_blocks = 3 * c.hidden_size * ffn / M;
  return d;
}

// What one layer's ops keep for backward without recompute (elements of e bytes): per token of
// the attention, input_layernorm's output y1 only when the q/k/v projection keeps it (the
// gathered rows under sequence parallelism), roped q and k, v (split_last copies),
// causal_attention's out and lse (q_norm/k_norm keep pre-norm q and k), LoRA's x·Aᵀ; per row of
// the residual stream the residual h (post_attention_layernorm's x) and the layer output
// (input_layernorm's x is the previous layer's output, counted there); per MLP row y2 when
// gate_up keeps it, gate_up's output (swiglu's input) and swiglu's output when down_proj keeps
// it; a split layer's weight blocks (block_bytes each).
int64_t layer_saved(const Dims& d, const LayerParams& lp, bool qk_norm, int64_t block_bytes) {
  int64_t attn = d.q + 2 * d.kv + d.q + d.H + lp.lora_xa;
  if (lp.qkv_saves_x) attn += d.C;
  if (qk_norm) attn += d.q + d.kv;
  int64_t mlp = 2 * d.F;
  if (lp.gate_up_saves_x) mlp += d.C;
  if (lp.down_saves_x) mlp += d.F;
  // + rope's two −positions [N] i32, + LoRA dropout masks (bytes).
  return d.N * (attn * d.e + 2 * 4 + lp.lora_keep) + d.Nm * mlp * d.e + d.R * 2 * d.C * d.e +
         (d.attn_blocks + d.mlp_blocks) * block_bytes;
}

// One layer's backward at its widest, beyond the saved activations: the residual gradient [N, C]
// flows through; attention: dO, the kernel's f32 workspace (scale·q, dO, kᵀ, vᵀ, lse, rowsum) and
// dq/dk/dv; q/k/v projection: dqkv and dx plus its dW; MLP: swiglu's dout and dgate_up, then
// gate_up's dx plus its dW (a fresh f32 [out, in] before it is added into the arena).
// A split weight's dW is its block's, then written into zeros of the whole shape (ops/take.cpp).
int64_t layer_backward(const Dims& d, const LayerParams& lp) {
  const int64_t qkv = d.q + 2 * d.kv;
  const int64_t attn = d.N * d.e * (d.C + d.q + qkv) + d.N * 4 * (2 * d.q + 2 * d.kv + 2 * d.H);
  const int64_t proj = d.N * d.e * (2 * d.C + qkv);
  const int64_t mlp = std::max(d.Nm * d.e * (d.C + 3 * d.F), d.Nm * d.e * (2 * d.C + 2 * d.F));
  return std::max({attn, proj, mlp}) + lp.max_weight_grad * 4 + (d.T > 1 ? lp.max_weight_grad / d.T * 4 : 0);
}

// Recompute: the re-run of the widest segment inside backward keeps what layer_saved counts for
// it, plus the kGradOnly projection's zeros and the segment output ([N, C] each).
// With f32 saves (e = 4) the re-run replays the attention's out and lse from the forward's stash
// (nn::AttentionStash, counted in the saved activations) instead of allocating them again.
// Under tensor parallelism the projection's output is its partial sum over all rows, the
// segment output the residual rows, and the re-run copies the segment's weight blocks again.
int64_t rerun_saved(const Dims& d, const LayerParams& lp, bool qk_norm, int64_t block_bytes) {
  const int64_t attn = d.N * ((d.q + 2 * d.kv + (d.e == 4 ? 0 : d.q + d.H) + d.C + lp.lora_xa +
                               (lp.qkv_saves_x ? d.C : 0) + (qk_norm ? d.q + d.kv : 0)) * d.e +
                              2 * 4 + lp.lora_keep) +
                       d.attn_blocks * block_bytes;
  const int64_t mlp = d.Nm * (2 * d.F + d.C + lp.lora_xa + (lp.gate_up_saves_x ? d.C : 0) + (lp.down_saves_x ? d.F : 0)) * d.e +
                      d.N * (2 * 4 + lp.lora_keep) + d.mlp_blocks * block_bytes;
  return std::max(attn, mlp) + d.R * d.C * d.e;
}

// One evaluation forward without gradients at its widest (nothing is kept for backward): the
// residual stream's tensors a decoder layer has alive (its input's sum and delta, the attention's
// sum and normed rows, the MLP's), beside the attention's q/k/v, roped q and k, its output and
// f32 lse, or the MLP's gathered input, gate/up and SwiGLU's output; or, at the end, the final
// norm's rows and one chunk of the loss's logits (no gradient buffers). A split layer adds its
// collectives' buffers, about three [N, C] (measured: the entered or gathered input, the
// row-parallel partial sum and its reduced rows).
int64_t eval_forward(const Dims& d, bool loss, int64_t chunk) {
  const int64_t stream = 6 * d.R * d.C * d.e + (d.T > 1 ? 3 * d.N * d.C * d.e : 0);
  const int64_t attn = d.N * d.e * (d.C + (d.q + 2 * d.kv) + (d.q + d.kv) + d.q) + d.N * d.H * 4;
  const int64_t mlp = d.Nm * d.e * (d.C + 3 * d.F);
  const int64_t tail = loss ? 2 * d.R * d.C * d.e + d.Nl * d.C * d.e + chunk * (d.V + d.C) * 4 : 0;
  return std::max(stream + std::max(attn, mlp), tail);
}

// The MLP width the activation terms count per token. A sparse layer (nn/moe.cpp) runs k experts
// of moe_intermediate_size per token and keeps, besides, the token's k gathered inputs and k
// outputs (split and concatenated copies, [N·k, C] each) and the router's [N, E]: counted as
// extra width, an upper bound of what its layer keeps.
int64_t activation_ffn(const models::ModelConfig& c) {
  int64_t f = 0;
  for (int64_t l = 0; l < c.num_layers; ++l)
    f = std::max(f, c.sparse_layer(l) ? c.num_experts_per_tok * (c.moe_intermediate_size + 2 * c.hidden_size) +
                                            c.shared_expert_intermediate_size + c.num_experts
                                      : c.intermediate_size);
  return f;
}

}  // namespace

MemoryPlan plan_memory(const MemoryPlanInputs& in) {
  const models::ModelConfig& c = in.model;
  const ParamSummary& ps = in.params;
  const Dims d = make_dims(in, activation_ffn(c));
  MemoryPlan p;
  p.recompute = in.recompute;
  p.frozen_weights = (ps.frozen - ps.quantized) * in.frozen_weight_bytes + ps.quantized_bytes;
  p.weights = ps.trainable * 4 + p.frozen_weights;
  if (ps.quantized > 0) p.frozen_weights_f32 = ps.frozen * 4;
  p.gradients = ps.trainable * 4;
  p.optimizer = planned_state_bytes(in.optimizer, ps.trainable, c.hidden_size);
  if (in.optimizer == "badam" && !ps.layers.empty())  // AdamW state for one (equal-sized) layer
    p.optimizer = planned_state_bytes("adamw", ps.trainable / static_cast<int64_t>(ps.layers.size()), c.hidden_size);
  if (in.optimizer == "muon")  // Muon leaves embeddings and lm_head to AdamW: a second moment more
    p.optimizer += 4 * d.V * d.C *
                   ((ps.embed_trainable ? 1 : 0) + (ps.lm_head_trainable && !c.tie_word_embeddings ? 1 : 0));
  p.optimizer = (p.optimizer + in.zero_shards - 1) / in.zero_shards;  // ZeRO: this process's range
  // Tensor parallelism's blocks of the frozen split weights: the rest is gathered only while
  // evaluating or saving (below).
  auto all_but_block = [&](int64_t elements, int64_t blocks) {
    return elements * in.frozen_weight_bytes / blocks * (blocks - 1);
  };
  const int64_t tp_gathered = all_but_block(ps.frozen_split - ps.frozen_split_mlp, in.tp_frozen_blocks.attention) +
                              all_but_block(ps.frozen_split_mlp, in.tp_frozen_blocks.mlp);
  // Expert parallelism's frozen experts: each process keeps its own experts' (the others'
  // broadcast by their runners while evaluating or saving, below).
  const int64_t experts_gathered =
      in.expert_shares > 1 ? ps.frozen_experts * in.frozen_weight_bytes / in.expert_shares * (in.expert_shares - 1) : 0;
  p.frozen_weights -= tp_gathered + experts_gathered;
  p.weights -= tp_gathered + experts_gathered;
  if (in.owned_weights < 1) {  // a pipeline stage's own layers, and one other unit at a time
    auto share = [](int64_t bytes, double f) { return static_cast<int64_t>(std::ceil(static_cast<double>(bytes) * f)); };
    p.weights = share(p.weights, in.owned_weights) + in.largest_unit * 4;
    p.gradients = share(p.gradients, in.owned_trainable);
    p.optimizer = share(p.optimizer, in.owned_trainable);
  }
  // A layer keeps activations once a gradient flows through it (a trainable tensor at or below it).
  bool flows = ps.embed_trainable, any = false;
  int64_t full = 0, rec = 0, widest = 0, rerun = 0;
  for (size_t i = 0; i < ps.layers.size(); ++i) {
    const LayerParams& lp = ps.layers[i];
    flows = flows || lp.trainable;
    if (!flows) continue;
    // Pipeline stages: this process holds `live` micro-batches of its own layers, none of others'.
    const int64_t live = in.pipeline_live.empty() ? 1 : in.pipeline_live.at(i);
    if (!any) full += live * d.R * d.C * d.e, rec += live * d.R * d.C * d.e;  // the first flowing layer's input
    any = true;
    // A split layer's weight blocks are copies in the weight's dtype (f32 where it trains).
    const int64_t block_bytes = lp.max_weight_grad > 0 ? 4 : in.frozen_weight_bytes;
    // A mixture-of-depths layer (models/mixture_of_depths.h) is never recomputed; at the first
    // training forward (capacity 1) it runs all but one token of each row, plus its gathered
    // input, its output rows and their combine ([N, C] each).
    const bool routed = c.mod_layer(static_cast<int64_t>(i));
    const int64_t route = routed ? 3 * d.R * d.C * d.e : 0;
    full += live * (layer_saved(d, lp, c.qk_norm, block_bytes) + route);
    if (routed) {
      rec += live * (layer_saved(d, lp, c.qk_norm, block_bytes) + route);
    } else {
      rec += live * 2 * d.R * d.C * d.e;  // recompute keeps each segment's input: x and h
      if (d.e == 4) rec += live * d.N * (d.q + d.H) * 4;  // and, f32 only, the attention's out and lse
    }
    if (live == 0) continue;
    widest = std::max(widest, layer_backward(d, lp));
    rerun = std::max(rerun, rerun_saved(d, lp, c.qk_norm, block_bytes) + layer_backward(d, lp));
  }
  // The loss: the final norm's output (the CE's x), lse, and the batch's i32 tensors (ids,
  // labels, positions, shifted labels) — on the last pipeline stage; the others keep the ids.
  const int64_t tail = in.pipeline_loss ? d.Nl * d.C * d.e + d.Nl * d.e + 4 * d.N * 4 : 4 * d.N * 4;
  p.activations_no_recompute = full + tail;
  p.activations_recompute = rec + tail;
  // linear_cross_entropy's eager gradients: dx [N, C] and (lm_head trains) dW [V, C] f32, and the
  // CPU kernel's chunk buffers (~32 MiB of logits, the gathered rows and their dx), f32.
  const bool dx = any || ps.final_norm_trainable;
  // The vocabulary-parallel loss (ops::vocab_parallel_cross_entropy) computes this process's
  // rows of the lm_head, its dW block then written into zeros of the whole shape.
  const int64_t V = in.tensor_split.lm_head ? d.V / d.T : d.V;
  const int64_t lm_dw = ps.lm_head_trainable ? d.V * d.C * 4 + (V < d.V ? V * d.C * 4 : 0) : 0;
  const int64_t chunk = std::min(d.Nl, std::max<int64_t>(1, (int64_t{32} << 20) / (V * 4)));
  // Per chunk: logits, the gathered x, dx rows, and with more than one thread one partial dx
  // product per thread (the vocabulary-split GEMMs, backends/cpu/gemm/cross_entropy_gemm.h).
  p.loss_transient = (dx ? d.Nl * d.C * d.e : 0) + lm_dw + chunk * (V + d.C + (dx ? d.C : 0)) * 4 +
                     (in.threads > 1 ? in.threads * chunk * d.C * 4 : 0);
  if (in.asft_reference_logits) p.loss_transient += d.N * d.C * d.e + chunk * (d.V + d.C) * 4;
  if (!in.pipeline_loss) p.loss_transient = 0;  // an earlier pipeline stage: no lm_head, no loss
  if (!in.lm_head_loss) p.loss_transient = 0;   // the reward model: no lm_head runs
  p.backward_transient = in.recompute ? rerun : widest;
  // Embedding backward: scatter_add_rows builds a [V, C] f32 dW from the [N, C] gradient.
  const int64_t embed_bwd = ps.embed_trainable ? d.V * d.C * 4 + 2 * d.R * d.C * d.e : 0;
  // OpenBLAS packs GEMM panels into per-thread buffers (measured: bench/memory_plan_check.py):
  // ~4 MiB a thread once the reduction depth K reaches ~1000. Panels are K deep, so a tiny model
  // touches less: stories260K (C 64, F 172) about half, which is the floor taken here.
  const int64_t depth = std::clamp<int64_t>(std::max(d.C, d.F), 512, 1024);
  p.runtime = in.threads * (int64_t{4} << 20) * depth / 1024;
  // The fused attention backward's dQ sum: one [T·G, D] f32 per thread when it is at most 16 MiB
  // (backends/cpu/attention/attention_train_backward.h; longer rows run two passes without it).
  const int64_t fused_dq = in.seq_len * (c.num_heads / std::max<int64_t>(1, c.num_kv_heads)) * c.head_dim * 4;
  if (fused_dq <= (int64_t{16} << 20)) p.runtime += in.threads * fused_dq;
  // bf16/f16 frozen layer weights reach GEMM through an f32 panel of up to 8 MiB
  // (backends/cpu/simd/convert.h half_panel_rows); a frozen lm_head through a ~1 MiB sub-panel per
  // thread (backends/cpu/gemm/cross_entropy_gemm.h).
  if (in.frozen_weight_bytes < 4 && ps.frozen > 0) {
    p.runtime += std::min<int64_t>(int64_t{8} << 20, 2 * d.F * std::max(d.C, d.F) * 4);
    if (!ps.lm_head_trainable) p.runtime += std::max<int64_t>(1, in.threads) * (int64_t{1} << 20);
  }
  // QLoRA: linear_4bit / linear_q dequantise a panel of W rows into f32 (half_panel_rows: at
  // most 8 MiB) for the GEMM, in forward and in dx.
  if (ps.quantized > 0) p.runtime += std::min<int64_t>(int64_t{8} << 20, ps.largest_quantized * 4);
  // bf16 compute (backends/cpu/gemm/bf16_compute.h): a linear's GEMM holds bf16 copies of its
  // two operands (at most an [N, max(F, q+2kv)] activation or gradient and the fused gate/up
  // weight), and the cross-entropy a bf16 lm_head (when it is f32) plus the chunk's x and dlogits.
  if (in.bf16_compute) {
    p.runtime += 2 * d.N * std::max({d.C, d.F, d.q + 2 * d.kv}) * 2 + 2 * d.F * d.C * 2;
    p.loss_transient += (ps.lm_head_trainable || in.frozen_weight_bytes == 4 ? d.V * d.C * 2 : 0) +
                        chunk * (d.V + d.C) * 2;
  }
  p.baseline = in.baseline_bytes;
  p.reference = in.reference_weights * in.reference_weight_bytes + in.reference_logps_rows * 8;
  const int64_t reference_whole = p.reference;
  if (in.reference_owned && in.owned_weights < 1 && in.reference_weights > 0)
    p.reference = static_cast<int64_t>(std::ceil(static_cast<double>(in.reference_weights * in.reference_weight_bytes) *
                                                 in.owned_weights)) +
                  in.largest_unit * in.reference_weight_bytes + in.reference_logps_rows * 8;
  const int64_t state = p.weights + p.gradients + p.optimizer + p.reference;
  const int64_t working = std::max(p.activations() + std::max(p.loss_transient, p.backward_transient), embed_bwd);
  // The CPU allocator caches freed blocks >= 1 MiB up to 1/8 of their live peak beyond it
  // (core/cpu_allocator.h); counted whole, as an upper bound.
  p.allocator_cache = (state + working) / 8;
  p.train_peak = p.baseline + p.runtime + state + working + p.allocator_cache;
  // What loading the reference adds at its peak.
  int64_t reference_load = in.reference_owned && in.reference_loaded_whole ? reference_whole : p.reference;
  int64_t sharded_before_reference = 0;   // ZeRO-3: the policy's pieces when the reference loads
  const int64_t n_layers = std::max<int64_t>(1, static_cast<int64_t>(ps.layers.size()));
  // ZeRO's units gathered at a time out of `whole` bytes: the root, and a layer or the embedding.
  auto gathered_of = [&](int64_t whole, int64_t bytes) {
    const int64_t root = std::min(whole, (d.V * d.C + d.C) * bytes);
    const int64_t embed = c.tie_word_embeddings ? 0 : std::min(whole - root, d.V * d.C * bytes);
    return root + std::max((whole - root - embed) / n_layers, embed);
  };
  if (in.grad_shards > 1) {
    // ZeRO-2 through the units: whole weights; gradients as this process's share plus the units
    // backward is in; the step adds the optimizer's copy of the share and one unit's all-gather.
    const int64_t W = in.grad_shards, share = (ps.trainable + W - 1) / W * 4;
    const int64_t units = std::min(p.gradients, gathered_of(p.gradients, 4));
    p.gradients = share + units;
    const int64_t unit_state = p.weights + p.gradients + p.optimizer + p.reference;
    p.allocator_cache = (unit_state + working) / 8;
    p.train_peak = p.baseline + p.runtime + unit_state + working + p.allocator_cache;
    const int64_t stepping = p.weights + share + p.optimizer + p.reference + share + units;
    p.train_peak = std::max(p.train_peak, p.baseline + p.runtime + stepping + stepping / 8);
  }
  // Saving frozen weights into an adapter dir and reloading the best checkpoint hold the whole
  // frozen weights; writing a model dir one of them whole, beside its gathered blocks;
  // evaluation and predict of whole forwards the blocks, one layer's whole (TpBlocks::PerLayer)
  // and, while a projection is gathered, its blocks from every process (the largest's);
  // evaluation of token accuracy every expert's (ExpertShares::Whole). Neither holds training
  // activations.
  auto gathered_phase = [&](int64_t gathered) {
    const int64_t held = p.weights + gathered + p.gradients + p.optimizer + p.reference;
    p.train_peak = std::max(p.train_peak, p.baseline + p.runtime + held + held / 8);
  };
  if (tp_gathered + experts_gathered > 0 && in.frozen_gathered) gathered_phase(tp_gathered + experts_gathered);
  const int64_t largest_gathered = tp_gathered > 0 ? ps.largest_frozen_split * in.frozen_weight_bytes : 0;
  const int64_t evaluated =
      (in.frozen_evaluated && tp_gathered > 0 ? (tp_gathered + n_layers - 1) / n_layers + largest_gathered : 0) +
      (in.experts_evaluated ? experts_gathered : 0);
  if (evaluated > 0 && in.eval_rows == 0) gathered_phase(evaluated);
  if (tp_gathered + experts_gathered > 0 && in.frozen_streamed) gathered_phase(2 * largest_gathered + experts_gathered);
  if (in.param_shards > 1) {
    // ZeRO-3: pieces of every unit plus the root unit (lm_head, final norm; the embedding too when
    // tied) and one layer or the untied embedding's unit gathered, with their gradient buffers;
    // evaluation and saving gather the same units (saves_whole_model: saving holds every weight
    // beside the sharded gradients and state). Units are taken at f32 (an upper bound for bf16
    // frozen parts).
    const int64_t W = in.param_shards;
    const int64_t whole_weights = p.weights, whole_grads = p.gradients;
    const int64_t gathered = gathered_of(whole_weights, 4);
    p.weights = (whole_weights + W - 1) / W + gathered;
    p.gradients = (whole_grads + W - 1) / W + std::min(whole_grads, gathered);
    // A reference copy is sharded too (its root unit kept gathered, a layer at a time around its
    // forward), loaded whole after the policy is sharded.
    const int64_t ref_whole = in.reference_weights * in.reference_weight_bytes;
    if (ref_whole > 0) {
      p.reference = (ref_whole + W - 1) / W + gathered_of(ref_whole, in.reference_weight_bytes) +
                    in.reference_logps_rows * 8;
      sharded_before_reference = p.weights + p.gradients;  // before the optimizer state is made
      if (!in.reference_loaded_whole) reference_load = p.reference;
    }
    const int64_t sharded_state = p.weights + p.gradients + p.optimizer + p.reference;
    p.allocator_cache = (sharded_state + working) / 8;
    p.train_peak = p.baseline + p.runtime + sharded_state + working + p.allocator_cache;
    if (in.saves_whole_model)
      p.train_peak = std::max(p.train_peak, p.baseline + p.runtime + whole_weights + p.gradients + p.optimizer + p.reference);
  }
  // Evaluation: the state (gradients stay allocated), what its forwards gather, and one batch's
  // forward at its widest.
  if (in.eval_rows > 0) {
    MemoryPlanInputs ev = in;
    ev.rows = in.eval_rows;
    ev.seq_len = in.eval_seq_len;
    if (!in.eval_split) ev.tensor_split = {};
    const Dims de = make_dims(ev, activation_ffn(c));
    const int64_t ev_chunk = std::min(de.Nl, std::max<int64_t>(1, (int64_t{32} << 20) / (de.V * 4)));
    p.eval_transient = eval_forward(de, in.pipeline_loss && in.lm_head_loss, ev_chunk) +
                       in.eval_in_flight * de.R * de.C * de.e;
    const int64_t held = p.weights + p.gradients + p.optimizer + p.reference + evaluated + p.eval_transient;
    p.train_peak = std::max(p.train_peak, p.baseline + p.runtime + held + held / 8);
  }
  if (in.state_gathered_at_save > 1) {  // saving, between steps: no activations; the part's state
    // gathered beside the process's own range of it
    const int64_t saving = p.weights + p.gradients + p.optimizer * (1 + in.state_gathered_at_save) + p.reference;
    p.train_peak = std::max(p.train_peak, p.baseline + p.runtime + saving + saving / 8);
  }
  // Loading builds the base model (f32, or frozen_weight_bytes; freeze under mixed precision
  // builds f32 first, but casts a frozen split weight it cuts as it reads it) while one tensor's
  // file pages are resident; the arena then holds the old and the packed copy of the trainable
  // tensors plus the gradients.
  const int64_t frozen_bytes = in.frozen_loaded_f32 ? 4 : in.frozen_weight_bytes;
  const int64_t cast_as_read = in.frozen_cut_on_load && in.frozen_loaded_f32 ? ps.frozen_split * (4 - in.frozen_weight_bytes) : 0;
  const int64_t built = (ps.base - ps.frozen) * 4 + ps.frozen * frozen_bytes - cast_as_read -
                        (in.frozen_cut_on_load ? tp_gathered + experts_gathered - in.largest_tensor_bytes : 0);  // (a linear whole as it is cut)
  // (ZeRO-3's arena has no whole gradient buffer: its gradients live in its units; ZeRO-2's units
  // add the shard's pieces and their gradients.)
  const int64_t packing = in.grad_shards > 1 ? ps.trainable * 4 + 2 * ((ps.trainable + in.grad_shards - 1) / in.grad_shards * 4)
                                             : (in.param_shards > 1 ? 1 : 2) * ps.trainable * 4;  // (the shard's
  // copy of its parameters is let go once made, ParamShards::shard)
  p.load_peak = p.baseline + std::max(built + in.largest_tensor_bytes, built + packing);
  // ZeRO-3: the shard's pieces and their gradients are copied out before the arena goes (and
  // before the optimizer state is made). Loaded straight into the pieces, the whole model never
  // exists: the pieces, the root unit and the layer being read (p.weights by now), the shard's
  // gradients, one tensor's file pages.
  const int64_t shard_bytes = (ps.trainable + in.param_shards - 1) / in.param_shards * 4;
  if (in.param_shards > 1 && !in.policy_loaded_whole)
    p.load_peak = p.baseline + p.weights + shard_bytes + in.largest_tensor_bytes;
  else if (in.param_shards > 1)
    p.load_peak = std::max(p.load_peak, p.baseline + built + packing + 2 * shard_bytes);
  // Pipeline stages owning their layers, read straight into them: the stage's own units, one
  // other whole (p.weights), the shard's gradients, one tensor's pages; a reference copy after.
  const bool owned_read = in.owned_weights < 1 && !in.policy_loaded_whole;
  if (owned_read) {
    p.load_peak = p.baseline + p.weights + p.gradients + in.largest_tensor_bytes;
    sharded_before_reference = p.weights + p.gradients;
  }
  // A reference copy loads after the policy (with one tensor's pages of its own); under ZeRO-3
  // after the policy is sharded and before the optimizer state is made, beside its pieces, and
  // (unless reference_loaded_whole) straight into its own pieces.
  if (in.reference_weights > 0)
    p.load_peak = std::max(p.load_peak, p.baseline + reference_load + in.largest_tensor_bytes +
                                            (in.param_shards > 1 || owned_read ? sharded_before_reference : built + packing));
  p.peak = std::max(p.train_peak, p.load_peak);
  return p;
}

}  // namespace unillm::train
