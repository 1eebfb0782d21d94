// The memory plan's arithmetic against figures computed by hand for a tiny config (the counts in
// the comments follow memory_plan.cpp's list of what each op saves), the advice that makes a
// refused plan fit, and the size parser.
#include "train/memory_plan.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/rng.h"
#include "models/causal_lm.h"
#include "support/expect.h"
#include "train/stages/stage.h"

namespace unillm::train {
namespace {

// L 2, C 8, F 16, H 2, Hkv 1, D 4 (q 8, kv 4), V 32, untied.
models::ModelConfig tiny() {
  models::ModelConfig c;
  c.model_type = "llama";
  c.num_layers = 2;
  c.hidden_size = 8;
  c.intermediate_size = 16;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.vocab_size = 32;
  return c;
}

MemoryPlanInputs inputs(const TrainArgs& a, bool recompute) {
  MemoryPlanInputs in;
  in.model = tiny();
  in.params = summarize_params(in.model, a);
  in.rows = 2;
  in.seq_len = 3;  // N = 6 tokens
  in.recompute = recompute;
  in.threads = 0;  // no BLAS buffer term: the figures below are the tensors only
  in.largest_tensor_bytes = 7000;
  return in;
}

TEST(MemoryPlan, FullFineTuningByHand) {
  TrainArgs a;
  a.finetuning_type = "full";
  const ParamSummary s = summarize_params(tiny(), a);
  // embed 256; per layer: norms 16, qkv 16·8, o 8·8, gate_up 32·8, down 8·16 = 592; norm 8; lm_head 256.
  EXPECT_EQ(s.base, 1704);
  EXPECT_EQ(s.trainable, 1704);
  EXPECT_EQ(s.frozen, 0);
  EXPECT_TRUE(s.lm_head_trainable && s.embed_trainable);
  EXPECT_EQ(s.layers[1].max_weight_grad, 256);  // gate_up [32, 8]

  const MemoryPlan p = plan_memory(inputs(a, false));
  EXPECT_EQ(p.weights, 1704 * 4);
  EXPECT_EQ(p.gradients, 1704 * 4);
  EXPECT_EQ(p.optimizer, 2 * 1704 * 4);
  // Per layer and token: y1 8, q 8, k 4, v 4, out 8, lse 2, h 8, y2 8, gate_up 32, act 16,
  // output 8 = 106 f32 + 8 bytes of rope positions → 6 · 432 = 2592; two layers, the embedding
  // output (192) and the tail: final norm output 192, lse 24, four i32 [N] 96.
  EXPECT_EQ(p.activations_no_recompute, 2 * 2592 + 192 + 312);
  // Recompute: x and h per layer (2 · 192) and the attention's stashed out and lse (6 · 10 f32),
  // the embedding output, the same tail.
  EXPECT_EQ(p.activations_recompute, 192 + 2 * (384 + 240) + 312);
  // dx 192, lm_head dW 32·8·4 = 1024, one chunk of 6 rows · (V + 2C) f32 = 1152.
  EXPECT_EQ(p.loss_transient, 192 + 1024 + 1152);
  // Attention backward: 24 · (8 + 8 + 16) + workspace 24 · (16 + 8 + 4) = 1440, + gate_up's dW 1024.
  EXPECT_EQ(p.backward_transient, 1440 + 1024);
  EXPECT_EQ(p.allocator_cache, (4 * 1704 * 4 + 5688 + 2464) / 8);
  EXPECT_EQ(p.train_peak, 4 * 1704 * 4 + 5688 + 2464 + p.allocator_cache);
  // Loading: the f32 model (6816) + the arena's packed copy and gradients (13632) > + the largest tensor.
  EXPECT_EQ(p.load_peak, 6816 + 13632);
  EXPECT_EQ(p.peak, p.train_peak);

  const MemoryPlan r = plan_memory(inputs(a, true));
  // Re-run of the MLP segment: y2 8, gate_up 32, act 16, zeros 8, output 8 = 72 f32 + 8 bytes.
  EXPECT_EQ(r.backward_transient, 6 * (72 * 4 + 8) + 2464);
  EXPECT_EQ(r.train_peak, 4 * 1704 * 4 + 1752 + 1776 + 2464 + (4 * 1704 * 4 + 1752 + 1776 + 2464) / 8);
}

// ZeRO-3 over 2 processes: the steps hold half of every weight and gradient plus the root unit
// (the untied lm_head 32 · 8 and the final norm 8, at f32) and the larger of one layer (the rest
// over 2 layers) and the embedding's unit (32 · 8); saving gathers the same units, unless it
// writes the whole model at once (saves_whole_model: every weight beside the sharded gradients
// and state).
TEST(MemoryPlan, ZeroThreeHoldsPiecesAndTheGatheredUnits) {
  TrainArgs a;
  a.finetuning_type = "full";
  MemoryPlanInputs in = inputs(a, true);
  in.zero_shards = in.param_shards = 2;
  const MemoryPlan p = plan_memory(in);
  const int64_t root = (32 * 8 + 8) * 4, embed = 32 * 8 * 4, layer = (1704 * 4 - root - embed) / 2;
  ASSERT_GT(layer, embed);
  EXPECT_EQ(p.weights, 1704 * 4 / 2 + root + layer);
  EXPECT_EQ(p.gradients, 1704 * 4 / 2 + root + layer);
  EXPECT_EQ(p.optimizer, 1704 * 4);
  MemoryPlanInputs whole = in;
  whole.saves_whole_model = true;
  EXPECT_EQ(plan_memory(whole).train_peak,
            std::max(p.train_peak, p.baseline + p.runtime + 1704 * 4 + p.gradients + p.optimizer));
  // Loading straight into the shard: the pieces with the root unit and the layer being read,
  // the shard's gradients and one tensor's file pages; the whole model never exists.
  EXPECT_EQ(p.load_peak, p.weights + 1704 / 2 * 4 + in.largest_tensor_bytes);
  // Loaded whole first (Run::policy_whole_load_reason): the f32 model and the arena's packed copy,
  // without a whole gradient buffer, then the shard's half of the parameters and of their
  // gradients copied out before the arena goes.
  MemoryPlanInputs loaded_whole = in;
  loaded_whole.policy_loaded_whole = true;
  EXPECT_EQ(plan_memory(loaded_whole).load_peak, std::max<int64_t>(6816 + std::max<int64_t>(6816, in.largest_tensor_bytes),
                                                                   6816 + 6816 + 2 * (1704 / 2) * 4));
  EXPECT_LT(p.load_peak, plan_memory(loaded_whole).load_peak);

  // A frozen reference copy (DPO full): sharded the same way, its root unit and one layer
  // gathered; it loads after the policy is sharded, beside the policy's pieces (before the
  // optimizer state is made), straight into its own pieces — or whole, where adapters are merged
  // into it.
  in.reference_weights = 1704;
  const MemoryPlan r = plan_memory(in);
  EXPECT_EQ(r.reference, 1704 * 4 / 2 + root + layer);
  EXPECT_EQ(r.load_peak, std::max(p.load_peak, p.weights + p.gradients + r.reference + in.largest_tensor_bytes));
  in.reference_loaded_whole = true;
  EXPECT_EQ(plan_memory(in).load_peak, std::max(p.load_peak, p.weights + p.gradients + 6816 + in.largest_tensor_bytes));
  in.reference_loaded_whole = false;
  // One process holds the copy whole.
  in.zero_shards = in.param_shards = 1;
  EXPECT_EQ(plan_memory(in).reference, 1704 * 4);
}

// ZeRO-2 through the units over 2 processes (ParamShards' keep_whole): every weight whole;
// gradients as this process's half plus the root unit and one layer whole (what backward fills
// before each unit is reduce-scattered), not the whole arena; the step adds the optimizer's copy
// of the half and one unit's all-gather. (In this toy model the root unit and a layer outweigh
// half the parameters; in a real one the layers are many.)
TEST(MemoryPlan, ZeroTwoShardsTheGradientsByUnit) {
  TrainArgs a;
  a.finetuning_type = "full";
  MemoryPlanInputs in = inputs(a, true);
  in.zero_shards = 2;
  const MemoryPlan arena = plan_memory(in);  // stage 2 over the arena: whole gradients
  EXPECT_EQ(arena.gradients, 1704 * 4);
  in.grad_shards = 2;
  const MemoryPlan p = plan_memory(in);
  const int64_t root = (32 * 8 + 8) * 4, embed = 32 * 8 * 4, layer = (1704 * 4 - root - embed) / 2;
  EXPECT_EQ(p.weights, 1704 * 4);
  EXPECT_EQ(p.gradients, 1704 / 2 * 4 + root + layer);
  EXPECT_EQ(p.optimizer, arena.optimizer);
  const int64_t stepping = 1704 * 4 + 2 * (1704 / 2 * 4) + p.optimizer + root + layer;
  EXPECT_GE(p.train_peak, p.baseline + p.runtime + stepping + stepping / 8);
  // Many layers: the units backward is in are a small part, and the gradients near half.
  in.params.trainable *= 16;
  in.params.layers.resize(32);
  const MemoryPlan big = plan_memory(in);
  EXPECT_LT(big.gradients, 1704 * 16 * 4 * 6 / 10);
  // Loading: the f32 model and the arena's packed copy (no whole gradient buffer), then the
  // shard's half of the parameters and of their gradients.
  EXPECT_EQ(p.load_peak, std::max<int64_t>(6816 + std::max<int64_t>(6816, in.largest_tensor_bytes),
                                           6816 + 6816 + 2 * (1704 / 2) * 4));
}

// Split state beside 2 pipeline stages: a checkpoint gathers the part's state over both stages on
// every process (ZeroOptimizer::part_state), twice the state of the steps, beside the steps' own.
TEST(MemoryPlan, SplitStateGathersThePartsStateToSave) {
  TrainArgs a;
  a.finetuning_type = "full";
  MemoryPlanInputs in = inputs(a, true);
  in.zero_shards = 4;
  in.param_shards = 2;
  in.params.trainable *= 100;  // the state outweighs the toy's activations
  const MemoryPlan steps = plan_memory(in);
  in.state_gathered_at_save = 2;
  const MemoryPlan p = plan_memory(in);
  const int64_t saving = steps.weights + steps.gradients + 3 * steps.optimizer + steps.reference;
  EXPECT_EQ(p.train_peak, std::max(steps.train_peak, steps.baseline + steps.runtime + saving + saving / 8));
  EXPECT_EQ(p.optimizer, steps.optimizer);  // the steps' state is unchanged
  EXPECT_GT(p.train_peak, steps.train_peak);
}

// Pipeline stages (2 layers over 2 stages, 1F1B with 4 micro-batches): the first stage holds two
// micro-batches of layer 0 and no loss, the last one micro-batch of layer 1 and the loss.
TEST(MemoryPlan, PipelineStagesHoldTheirLayersInFlight) {
  TrainArgs a;
  a.finetuning_type = "full";
  MemoryPlanInputs first = inputs(a, false), last = inputs(a, false);
  first.pipeline_live = {2, 0};
  first.pipeline_loss = false;
  last.pipeline_live = {0, 1};
  const MemoryPlan p0 = plan_memory(first), p1 = plan_memory(last);
  // (figures of FullFineTuningByHand: a layer 2592, the embedding output 192, the tail 312 of
  // which the four i32 [N] 96 stay on every stage)
  EXPECT_EQ(p0.activations_no_recompute, 2 * 2592 + 2 * 192 + 96);
  EXPECT_EQ(p1.activations_no_recompute, 2592 + 312);
  EXPECT_EQ(p0.loss_transient, 0);
  EXPECT_EQ(p1.loss_transient, 192 + 1024 + 1152);
  EXPECT_EQ(plan_memory(first).weights, plan_memory(inputs(a, false)).weights);  // the whole model on each
}

// Stages holding only their own layers (ParamShards by owner): their share of the weights plus one
// other unit broadcast at a time, their share of the gradients and state; read straight into
// them, the load holds those and one tensor's pages instead of the whole model.
TEST(MemoryPlan, StagesOwningTheirLayersHoldTheirShare) {
  TrainArgs a;
  a.finetuning_type = "full";
  const MemoryPlanInputs whole = inputs(a, false);
  MemoryPlanInputs in = whole;
  in.owned_weights = 0.5, in.owned_trainable = 0.25, in.largest_unit = 100;
  const MemoryPlan w = plan_memory(whole), p = plan_memory(in);
  EXPECT_EQ(p.weights, (w.weights + 1) / 2 + 400);
  EXPECT_EQ(p.gradients, (w.gradients + 3) / 4);
  EXPECT_EQ(p.optimizer, (w.optimizer + 3) / 4);
  EXPECT_EQ(p.load_peak, p.baseline + p.weights + p.gradients + in.largest_tensor_bytes);
  EXPECT_LT(p.load_peak, w.load_peak);
  in.policy_loaded_whole = true;  // (train_from_scratch, a grown vocabulary, …): the whole model first
  EXPECT_EQ(plan_memory(in).load_peak, w.load_peak);
}

// The reward model's head scores one hidden state per row: no cross-entropy buffers, and the
// stage says so through Stage::plan_memory.
TEST(MemoryPlan, RewardModelRunsNoLmHeadLoss) {
  TrainArgs a;
  a.finetuning_type = "full";
  MemoryPlanInputs in = inputs(a, false);
  EXPECT_GT(plan_memory(in).loss_transient, 0);
  a.stage = "rm";
  EXPECT_EQ(make_stage(a)->plan_memory(in, 0), "");
  EXPECT_FALSE(in.lm_head_loss);
  const MemoryPlan p = plan_memory(in);
  EXPECT_EQ(p.loss_transient, 0);
  EXPECT_EQ(p.weights, plan_memory(inputs(a, false)).weights);
}

// Tensor parallelism over 2 processes (q 4, kv 2, H 1, F 8 each; every process holds the whole
// model): per layer the attention's tokens keep y1 8, q 4, k 2, v 2, out 4, lse 1 (f32) and rope's
// 8 bytes → 6 · 92; the MLP's y2 8, gate_up 16, act 8 → 6 · 32 f32; the residual h and output
// 2 · 8 per residual row; the copies of the layer's weight blocks: q/k/v and o 8 · (16 + 8) / 2,
// gate/up and down 3 · 8 · 16 / 2 → 288 f32.
TEST(MemoryPlan, TensorParallelSplitsHeadsAndMlpAndKeepsWeightBlocks) {
  TrainArgs a;
  a.finetuning_type = "full";
  MemoryPlanInputs in = inputs(a, false);
  in.tensor_split.degree = in.tensor_split.mlp_degree = 2;
  const int64_t blocks = 288 * 4;
  MemoryPlan p = plan_memory(in);
  EXPECT_EQ(p.activations_no_recompute, 2 * (6 * 92 + 6 * 32 * 4 + 6 * 64 + blocks) + 192 + 312);
  EXPECT_EQ(p.weights, plan_memory(inputs(a, false)).weights);
  EXPECT_EQ(p.gradients, 1704 * 4);
  // Attention backward at 2 heads' share: 24 · (8 + 4 + 8) + 24 · (8 + 4 + 2), then gate_up's whole
  // dW 1024 beside its block's 512.
  EXPECT_EQ(p.backward_transient, 480 + 336 + 1024 + 512);
  // Sequence parallelism: the residual stream, the embedding output and the loss on 3 of the 6
  // rows (the attention and the MLP see all 6, gathered).
  in.tensor_split.sequence = true;
  p = plan_memory(in);
  EXPECT_EQ(p.activations_no_recompute, 2 * (6 * 92 + 6 * 32 * 4 + 3 * 64 + blocks) + 96 + (96 + 12 + 96));
  // The lm_head split by vocabulary rows: 16 rows a process, the loss's rows gathered (6): dx 192,
  // the whole dW 1024 beside its block's 512, one chunk of 6 · (16 + 2 · 8) f32.
  in.tensor_split.lm_head = true;
  p = plan_memory(in);
  EXPECT_EQ(p.loss_transient, 192 + 1024 + 512 + 6 * 32 * 4);
  EXPECT_EQ(p.activations_no_recompute, 2 * (6 * 92 + 6 * 32 * 4 + 3 * 64 + blocks) + 96 + 312);
  // Context parallelism splits the attention's heads only: the MLP (whole width) on 3 rows, no
  // MLP blocks.
  in.tensor_split = {2, true, 1, false};
  p = plan_memory(in);
  EXPECT_EQ(p.activations_no_recompute, 2 * (6 * 92 + 3 * 56 * 4 + 3 * 64 + 96 * 4) + 96 + (96 + 12 + 96));
  // Recompute keeps each segment's inputs on the residual rows and, f32, the attention's out and
  // lse at the split width.
  in.recompute = true;
  in.tensor_split = {2, true, 2, false};
  EXPECT_EQ(plan_memory(in).activations_recompute, 96 + 2 * (2 * 96 + 6 * 5 * 4) + (96 + 12 + 96));
}

TEST(MemoryPlan, LoraByHand) {
  TrainArgs a;
  a.finetuning_type = "lora";
  a.lora_rank = 2;
  a.lora_target = {"q_proj", "v_proj"};
  const ParamSummary s = summarize_params(tiny(), a);
  // Per layer on the fused q/k/v: A [2·2, 8] = 32, B [8 + 4, 2] = 24.
  EXPECT_EQ(s.trainable, 2 * 56);
  EXPECT_EQ(s.frozen, 1704);
  EXPECT_FALSE(s.lm_head_trainable);
  EXPECT_EQ(s.layers[0].lora_xa, 4);
  EXPECT_TRUE(s.layers[0].qkv_saves_x);
  EXPECT_FALSE(s.layers[0].gate_up_saves_x || s.layers[0].down_saves_x);

  const MemoryPlan p = plan_memory(inputs(a, false));
  EXPECT_EQ(p.weights, 112 * 4 + 1704 * 4);
  EXPECT_EQ(p.gradients, 112 * 4);
  EXPECT_EQ(p.optimizer, 112 * 8);
  // Per layer and token: the full set minus y2 (8) and act (16), plus x·Aᵀ 4 = 86 → 6 · 352.
  EXPECT_EQ(p.activations_no_recompute, 2 * 2112 + 192 + 312);
  EXPECT_EQ(p.loss_transient, 192 + 6 * 48 * 4);  // no lm_head dW
  EXPECT_EQ(p.backward_transient, 1440);          // no weight gradient
}

// Tensor parallelism holding the frozen split weights as blocks (train/tp_blocks.h): each process
// keeps 1/T of the decoder's frozen projections (q/k/v, o, gate/up, down); saves gather them whole
// beside the state (and no training activations), evaluation a layer at a time.
TEST(MemoryPlan, TensorParallelKeepsBlocksOfFrozenSplitWeights) {
  TrainArgs a;
  a.finetuning_type = "lora";
  a.lora_rank = 2;
  a.lora_target = {"q_proj", "v_proj"};
  MemoryPlanInputs in = inputs(a, false);
  // Per layer: q/k/v 16·8, o 8·8, gate_up 32·8, down 8·16.
  EXPECT_EQ(in.params.frozen_split, 2 * (128 + 64 + 256 + 128));
  in.tensor_split.degree = in.tensor_split.mlp_degree = 2;
  const MemoryPlan whole = plan_memory(in);
  EXPECT_EQ(in.params.frozen_split_mlp, 2 * (256 + 128));
  in.tp_frozen_blocks = {2, 2};
  const MemoryPlan p = plan_memory(in);
  EXPECT_EQ(p.weights, whole.weights - 1152 * 4 / 2);
  EXPECT_EQ(p.frozen_weights, whole.frozen_weights - 1152 * 4 / 2);
  EXPECT_EQ(p.activations_no_recompute, whole.activations_no_recompute);
  const int64_t gathered = p.weights + 1152 * 4 / 2 + p.gradients + p.optimizer;
  EXPECT_GE(p.train_peak, gathered + gathered / 8);
  EXPECT_LT(p.train_peak, whole.train_peak);  // the steps' activations outweigh the gathered weights here
  // Evaluation alone gathers them a layer at a time (TpBlocks::PerLayer): the blocks, one of the
  // 2 layers' other halves and the largest projection's gathered blocks (gate/up's 256).
  EXPECT_EQ(in.params.largest_frozen_split, 256);
  in.frozen_gathered = false;
  const MemoryPlan eval = plan_memory(in);
  const int64_t one_layer = p.weights + 1152 * 4 / 2 / 2 + 256 * 4 + p.gradients + p.optimizer;
  EXPECT_GE(eval.train_peak, one_layer + one_layer / 8);
  EXPECT_LE(eval.train_peak, p.train_peak);
  // A run with no phase that gathers them (LoRA without evaluation, saving its adapter only).
  in.frozen_evaluated = false;
  EXPECT_LE(plan_memory(in).train_peak, eval.train_peak);
  // Context parallelism alone: only the attention's blocks (cp 2), the MLPs whole; beside tp 2
  // (4 processes) the attention's over all 4, the MLPs' over the 2 of a context shard.
  in.tp_frozen_blocks = {2, 1};
  EXPECT_EQ(plan_memory(in).frozen_weights, whole.frozen_weights - 2 * (128 + 64) * 4 / 2);
  in.tp_frozen_blocks = {4, 2};
  EXPECT_EQ(plan_memory(in).frozen_weights, whole.frozen_weights - 2 * (128 + 64) * 4 * 3 / 4 - 2 * (256 + 128) * 4 / 2);
  // Freeze tuning: only the frozen layers' projections (the last layer trains).
  a.finetuning_type = "freeze";
  a.freeze_trainable_layers = 1;
  EXPECT_EQ(summarize_params(tiny(), a).frozen_split, 128 + 64 + 256 + 128);
  EXPECT_EQ(summarize_params(tiny(), a).frozen_split_mlp, 256 + 128);
}

// A mixture of experts (qwen2_moe: 4 experts, a shared expert, a dense middle layer): the plan's
// parameter counts are the built model's — every expert, both routers — in full fine-tuning and
// for LoRA on "all" (experts, shared expert, routers and attention).
TEST(MemoryPlan, MixtureOfExpertsCountsTheModelsParameters) {
  testing::init_cpu();
  models::ModelConfig c = tiny();
  c.model_type = "qwen2_moe";
  c.num_layers = 3;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 6;
  c.shared_expert_intermediate_size = 10;
  c.mlp_only_layers = {1};
  c.rope.rot_dim = c.head_dim;  // (what parse_model_config sets; the model builds its RoPE table)
  auto model = models::build_causal_lm(c, DType::f32);
  int64_t params = 0;
  for (const auto& [_, t] : model->named_parameters()) params += t.numel();
  TrainArgs a;
  a.finetuning_type = "full";
  const ParamSummary full = summarize_params(c, a);
  EXPECT_EQ(full.base, params);
  EXPECT_EQ(full.trainable, params);
  a.finetuning_type = "lora";
  a.lora_rank = 2;
  a.lora_target = {"all"};
  nn::LoraConfig lc;
  lc.rank = 2;
  lc.alpha = 4;
  lc.target_modules = {"all"};
  Rng rng(1);
  model->add_lora("x", lc, rng);
  int64_t adapter = 0;
  for (const auto& [_, t] : model->module().named_adapter_parameters("x")) adapter += t.numel();
  EXPECT_EQ(summarize_params(c, a).trainable, adapter);
  // The activation width of a sparse layer: k experts, their gathered inputs and outputs, the shared
  // expert and the router's logits, above the dense layers' F.
  const MemoryPlan moe = plan_memory([&] {
    MemoryPlanInputs in = inputs(a, false);
    in.model = c;
    in.params = summarize_params(c, a);
    return in;
  }());
  EXPECT_GT(moe.activations_no_recompute, plan_memory(inputs(a, false)).activations_no_recompute);
  // LoRA's frozen base: the routed experts' projections (2 sparse layers × 4 experts × (gate/up
  // 12 · 8 + down 8 · 6)) are expert parallelism's, the dense projections (attention in every
  // layer, the middle layer's MLP) tensor parallelism's; the shared expert neither's.
  const ParamSummary lora = summarize_params(c, a);
  EXPECT_EQ(lora.frozen_experts, 2 * 4 * (96 + 48));
  EXPECT_EQ(lora.frozen_split, 3 * (128 + 64) + (256 + 128));
  // Expert parallelism over 2 processes keeps half of the experts' between evaluations.
  MemoryPlanInputs in = inputs(a, false);
  in.model = c;
  in.params = lora;
  const MemoryPlan all = plan_memory(in);
  in.expert_shares = 2;
  const MemoryPlan shared = plan_memory(in);
  EXPECT_EQ(shared.weights, all.weights - 2 * 4 * (96 + 48) * 4 / 2);
  // Only token accuracy's evaluation has every expert broadcast (ExpertShares::Whole): the others'
  // half beside the state. Its loss runs expert-parallel forwards, which hold none of them. (Wide
  // experts and one token, so that the experts outweigh the steps' working memory.)
  models::ModelConfig wide = c;
  wide.moe_intermediate_size = 4096;
  in.model = wide;
  in.params = summarize_params(wide, a);
  in.rows = in.seq_len = 1;
  in.frozen_gathered = in.frozen_streamed = false;
  const MemoryPlan accuracy = plan_memory(in);
  const int64_t others = in.params.frozen_experts * 4 / 2;
  const int64_t held = accuracy.weights + others + accuracy.gradients + accuracy.optimizer;
  EXPECT_GE(accuracy.train_peak, accuracy.baseline + accuracy.runtime + held + held / 8);
  in.experts_evaluated = false;
  EXPECT_LT(plan_memory(in).train_peak, accuracy.train_peak);
}

TEST(MemoryPlan, FreezeLastLayerKeepsNothingBelowIt) {
  TrainArgs a;
  a.finetuning_type = "freeze";
  a.freeze_trainable_layers = 1;
  const ParamSummary s = summarize_params(tiny(), a);
  EXPECT_EQ(s.trainable, 592);
  EXPECT_FALSE(s.layers[0].trainable);
  EXPECT_TRUE(s.layers[1].trainable);
  const MemoryPlan p = plan_memory(inputs(a, false));
  EXPECT_EQ(p.activations_no_recompute, 2592 + 192 + 312);  // layer 1 and its input only
}

TEST(MemoryPlan, AdviceNamesAKnobThatFits) {
  TrainArgs a;
  a.finetuning_type = "full";
  a.gradient_accumulation_steps = 1;
  MemoryPlanInputs in = inputs(a, false);
  in.rows = 64;
  in.seq_len = 64;
  const MemoryPlan p = plan_memory(in);
  // Just below the plan: recompute alone fits.
  EXPECT_NE(memory_fit_advice(in, a, p.peak - 1).find("disable_gradient_checkpointing: false"), std::string::npos);
  // Below what recompute saves: a smaller micro-batch with more accumulation.
  in.recompute = true;
  const std::string adv = memory_fit_advice(in, a, plan_memory(in).peak - 1);
  EXPECT_NE(adv.find("per_device_train_batch_size: 32 with gradient_accumulation_steps: 2"), std::string::npos) << adv;
  EXPECT_EQ(memory_fit_advice(in, a, 1000), "");  // nothing fits 1000 bytes
  EXPECT_NE(format_plan(p).find("<- this run"), std::string::npos);
}

// Evaluation is a phase of its own: one no-grad forward of an evaluation batch beside the state,
// counted by hand for 4 rows × 3 tokens (N 12, e 4): the layer's residual stream 6·N·C·e 2304,
// beside the wider of the attention's N·e·(C + q+2kv + q+kv + q) + N·H·4 = 2208 and the MLP's
// N·e·(C + 3F) = 2688; the loss's tail (2·N·C + N·C)·e + chunk·(V + C)·4 = 3072 is narrower.
TEST(MemoryPlan, EvaluationForwardIsAPhaseOfItsOwn) {
  TrainArgs a;
  a.finetuning_type = "full";
  MemoryPlanInputs in = inputs(a, true);
  const MemoryPlan none = plan_memory(in);
  EXPECT_EQ(none.eval_transient, 0);
  in.eval_rows = 4;
  in.eval_seq_len = 3;
  const MemoryPlan small = plan_memory(in);
  EXPECT_EQ(small.eval_transient, 2304 + 2688);
  const int64_t held = small.weights + small.gradients + small.optimizer + small.eval_transient;
  EXPECT_EQ(small.train_peak, std::max(none.train_peak, small.baseline + small.runtime + held + held / 8));
  // A batch far wider than the training micro-batch is the run's peak, and the advice is a smaller
  // evaluation batch (which changes no training figure) before anything else.
  in.eval_rows = 512;
  in.eval_seq_len = 64;
  const MemoryPlan big = plan_memory(in);
  EXPECT_GT(big.peak, 4 * none.peak);
  const int64_t big_held = big.weights + big.gradients + big.optimizer + big.eval_transient;
  EXPECT_EQ(big.train_peak, big.baseline + big.runtime + big_held + big_held / 8);
  const std::string adv = memory_fit_advice(in, a, big.peak - 1);
  EXPECT_NE(adv.find("set per_device_eval_batch_size: 256"), std::string::npos) << adv;
  EXPECT_NE(format_plan(big).find("evaluation forward"), std::string::npos);
  // Split as training's (tensor parallelism with sequence parallelism): each process's share.
  in.tensor_split = {2, true, 2, false};
  const int64_t whole = plan_memory(in).eval_transient;
  in.eval_split = true;
  EXPECT_LT(plan_memory(in).eval_transient, whole);
  // Through pipeline stages: the pass's final activations in flight, [N, C] each.
  in.eval_split = false;
  in.tensor_split = {};
  in.eval_in_flight = 4;
  EXPECT_EQ(plan_memory(in).eval_transient, big.eval_transient + 4 * 512 * 64 * 8 * 4);
}

TEST(MemoryPlan, ParsesSizes) {
  EXPECT_EQ(parse_memory_size("2G", "x"), int64_t{2} << 30);
  EXPECT_EQ(parse_memory_size("1536M", "x"), int64_t{1536} << 20);
  EXPECT_EQ(parse_memory_size("800MiB", "x"), int64_t{800} << 20);
  EXPECT_EQ(parse_memory_size("1000", "x"), 1000);
  EXPECT_THROW(parse_memory_size("lots", "x"), ConfigError);
  EXPECT_THROW(parse_memory_size("2X", "x"), ConfigError);
  EXPECT_EQ(format_bytes(int64_t{412} << 20), "412 MiB");
  EXPECT_EQ(format_bytes(int64_t{3} << 29), "1.50 GiB");
}

}  // namespace
}  // namespace unillm::train
