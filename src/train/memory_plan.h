// The memory plan of a training run: weights, gradients, optimizer state and the activations one
// micro-batch saves for backward (with and without recompute), plus the transient buffers of the
// loss and of one layer's backward, and the expected process peak. Pure arithmetic from the model
// config, the fine-tuning choice and the micro-batch shape, counted from what the ops save and
// allocate (ops/*.cpp SavedTensor members, backends/cpu cross-entropy and attention workspaces),
// so a run that cannot fit is refused before its weights are allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "train/args.h"

namespace unillm::train {

// Which parameters train, and what that implies per decoder layer (from the HF names of the
// config, without building the model).
struct LayerParams {
  bool trainable = false;      // some base weight or adapter of the layer trains
  bool qkv_saves_x = false;    // the q/k/v projection keeps its input (W trains or LoRA on it)
  bool gate_up_saves_x = false;
  bool down_saves_x = false;
  int64_t max_weight_grad = 0;  // elements of the largest trainable fused matrix (its dW transient)
  int64_t lora_xa = 0;          // per token: Σ over LoRA-targeted modules of P·r (saved x·Aᵀ)
  int64_t lora_keep = 0;        // per token: Σ P·K dropout-mask bytes (lora_dropout > 0)
};

struct ParamSummary {
  int64_t trainable = 0;  // elements: f32 in the arena, each with an f32 gradient and 2 moments
  int64_t frozen = 0;     // elements left in the model's storage
  int64_t frozen_split = 0;  // of them, the decoder's dense projections (what tensor parallelism splits)
  int64_t frozen_split_mlp = 0;  // of those, the dense MLPs' (what context parallelism splits only beside tp)
  int64_t largest_frozen_split = 0;  // elements of the largest of those (fused: q/k/v, gate/up)
  int64_t frozen_experts = 0;  // of them, the sparse layers' routed experts (what expert parallelism splits)
  int64_t base = 0;       // elements of the base model (what loading allocates)
  // QLoRA (quantization_bit): frozen decoder projection elements held quantised (part of
  // frozen) and the bytes they take then (codes + block scales, ops::QuantizedWeight::bytes).
  int64_t quantized = 0;
  int64_t quantized_bytes = 0;
  int64_t largest_quantized = 0;  // elements of the largest quantised matrix (its f32 panel)
  bool embed_trainable = false;    // embedding backward builds a [V, C] f32 dW
  bool lm_head_trainable = false;  // the loss computes a [V, C] f32 dW in its forward
  bool final_norm_trainable = false;
  std::vector<LayerParams> layers;
};

// Counts for finetuning_type full / freeze / lora as finetune.cpp sets them up (a LoRA run's
// adapter as a new one of lora_rank / lora_target). Throws ConfigError as freeze/LoRA would.
ParamSummary summarize_params(const models::ModelConfig& c, const TrainArgs& a);

struct MemoryPlanInputs {
  models::ModelConfig model;
  ParamSummary params;
  int64_t rows = 1, seq_len = 1;  // the largest micro-batch the loader produces: B × T
  bool recompute = true;
  int64_t act_bytes = 4;           // per saved activation element (2 with bf16 activations)
  int64_t frozen_weight_bytes = 4;  // per frozen weight element (2 with bf16 frozen weights)
  bool bf16_compute = false;        // GEMMs on bf16 copies of their operands (bf16 + bf16_compute)
  // The largest checkpoint tensor: loading drops each tensor's file pages once copied
  // (io::SafetensorsFile::drop_pages), so one tensor's pages are resident at a time.
  int64_t largest_tensor_bytes = 0;
  bool frozen_loaded_f32 = false;  // freeze under bf16/fp16 loads f32, then casts the frozen ones
  int64_t baseline_bytes = 0;      // process RSS before the model: binary, tokenizer, data
  int64_t threads = 1;
  // What a preference stage's reference adds (train/stages/reference.h): a frozen copy of the base
  // (its elements at reference_weight_bytes each, loaded after the policy) or precomputed
  // log-probs (8 bytes per row); 0 for LoRA's adapters-off reference, which holds nothing.
  int64_t reference_weights = 0;  // elements of a frozen copy
  int64_t reference_weight_bytes = 4;
  int64_t reference_logps_rows = 0;
  // ZeRO-3 loads a reference copy straight into its shards (one layer whole at a time) unless
  // something changes it once loaded (merged adapters, quantisation): then it is whole first.
  bool reference_loaded_whole = false;
  // Pipeline stages holding their own layers (owned_weights < 1): a frozen copy keeps the stage's
  // share too (evaluation has each other unit broadcast), loaded straight into it unless
  // reference_loaded_whole.
  bool reference_owned = false;
  // SFT's use_asft_loss: the loss also holds the reference's hidden states [N, C] and one chunk
  // of its logits beside the policy's (ops/asft_cross_entropy.h).
  bool asft_reference_logits = false;
  // The stage's loss goes through the lm_head (token losses, preference log-probs): its CE chunk
  // buffers and eager gradients. False for the reward model, whose head scores one hidden state
  // per row (a few bytes).
  bool lm_head_loss = true;
  std::string optimizer = "adamw";  // OptimizerConfig::kind: sizes the optimizer state
  int64_t zero_shards = 1;  // ZeRO (train/zero.h): each process holds 1/zero_shards of the state
  // ZeRO-3 (train/param_shards.h): between uses each process keeps 1/param_shards of the weights
  // and gradients (and of a reference copy's weights); a step, an evaluation or saving gathers the
  // root unit and one layer at a time. The policy loads straight into its pieces (a layer whole at
  // a time) unless policy_loaded_whole (Run::policy_whole_load_reason): then whole, then sharded.
  int64_t param_shards = 1;
  bool policy_loaded_whole = false;
  // ZeRO-2 through the same units (ParamShards' keep_whole): whole weights; gradients as this
  // process's 1/grad_shards plus the units backward is in (the root unit and one layer) whole; the
  // step copies this process's share of the weights for the optimizer and all-gathers a unit at a
  // time.
  int64_t grad_shards = 1;
  // Split state (ZeRO-2's units or ZeRO-3 beside P pipeline stages, ZeroOptimizer's split_state):
  // a checkpoint all-gathers the part's optimizer state over the stages on every process
  // (ZeroOptimizer::part_state), so saving holds the part's state (the steps' state ×
  // state_gathered_at_save) beside the steps' own for a while.
  int64_t state_gathered_at_save = 1;
  // ZeRO-3: saving gathers every unit (an adapter run that writes base weights too: PiSSA's
  // conversion, a grown vocabulary).
  bool saves_whole_model = false;
  // Pipeline stages holding only their own layers (ParamShards by owner): the shares of the base
  // model's elements and of the trainable ones this stage holds (its layers; the embedding on the
  // first stage, the final norm and head on the last, a tied embedding on both), and the largest
  // unit (elements) evaluation and saving have broadcast by its owner at a time. 1: every weight.
  // Read straight into the stage's units unless policy_loaded_whole.
  double owned_weights = 1, owned_trainable = 1;
  int64_t largest_unit = 0;
  // Pipeline parallelism (train/pipeline_schedule.h pipeline_live_per_layer): per decoder layer,
  // how many micro-batches' activations this process holds at its peak (0: another stage's
  // layer), and whether it runs the loss (the last stage). Empty: one process, every layer once.
  std::vector<int64_t> pipeline_live;
  bool pipeline_loss = true;
  // Tensor and context parallelism (nn/linear_tp.cpp, train/trainer_tensor_parallel.cpp): this
  // process computes 1/degree of each attention's heads and 1/mlp_degree of each MLP's width,
  // holding copies of its blocks of the split weights for backward; with sequence (or context)
  // parallelism the residual stream and norms run on its 1/degree of the token rows, the MLP on
  // its group's (degree / mlp_degree shards); `lm_head` when the lm_head is split by vocabulary
  // rows (tensor_parallel_output). Weights, gradients and optimizer state stay whole (every
  // process holds the model; but see tp_frozen_blocks). Tensor parallelism: mlp_degree = degree; context: 1; both: T.
  struct TensorSplit {
    int64_t degree = 1;
    bool sequence = false;
    int64_t mlp_degree = 1;
    bool lm_head = false;
  };
  TensorSplit tensor_split;
  // Tensor or context parallelism holding the frozen split weights as blocks (train/tp_blocks.h):
  // each process keeps 1/attention of the attention's part of ParamSummary::frozen_split and 1/mlp
  // of the MLPs' (frozen_split_mlp) between evaluations and saves, which gather them whole (the
  // model is loaded whole first). 1: held whole. Tensor parallelism: both T; context: cp·T and T
  // (1 without tensor parallelism: the MLPs run whole).
  struct FrozenBlocks {
    int64_t attention = 1;
    int64_t mlp = 1;
  };
  FrozenBlocks tp_frozen_blocks;
  // Whether a phase holds those weights whole (reloading the best checkpoint, saving frozen
  // weights); a LoRA run that only trains and saves its adapter never does. frozen_evaluated:
  // evaluation or predict runs whole forwards, which hold the blocks and one layer's weights
  // whole; evaluation of split forwards (Run::evaluates_split) holds the blocks alone.
  bool frozen_gathered = true;
  bool frozen_evaluated = true;
  // Expert parallelism's evaluation has every expert broadcast (token accuracy's inference
  // forwards run them all); its loss runs expert-parallel forwards.
  bool experts_evaluated = true;
  // Saving writes them a weight at a time (TpBlocks::Streamed: a model dir): the largest whole,
  // beside every process's blocks of it (and every expert's whole).
  bool frozen_streamed = false;
  // The blocks (and expert_shares) are cut as the model is read (LoRA's base: Run::cut_on_load),
  // so loading never holds the whole of those weights, only one linear whole at a time.
  bool frozen_cut_on_load = false;
  // Expert parallelism holding only this process's experts' frozen weights (train/expert_shares.h):
  // each keeps 1/expert_shares of ParamSummary::frozen_experts between evaluations and saves, which
  // have the others broadcast to it. 1: every expert held.
  int64_t expert_shares = 1;
  // Evaluation and do_predict's loss (Run::evaluate): forwards without gradients over a batch of
  // eval_rows rows (per_device_eval_batch_size examples of eval_group rows each) padded to
  // eval_seq_len, beside the run's state; split as training's where eval_split
  // (Run::evaluates_split), whole otherwise. Through pipeline stages each stage also holds up to
  // eval_in_flight batches' final activations (a pass's). 0 rows: neither runs.
  int64_t eval_rows = 0, eval_seq_len = 1, eval_group = 1;
  bool eval_split = false;
  int64_t eval_in_flight = 0;
};

struct MemoryPlan {
  int64_t weights = 0;    // trainable (f32 arena) + frozen storage (quantised under QLoRA)
  int64_t frozen_weights = 0;  // the frozen storage alone
  int64_t frozen_weights_f32 = 0;  // QLoRA only: what the frozen storage would take in f32
  int64_t gradients = 0;  // the arena's f32 gradients
  int64_t optimizer = 0;  // optimizer state (train/optimizer.h planned_state_bytes)
  int64_t activations_recompute = 0, activations_no_recompute = 0;  // saved by one micro-batch
  int64_t loss_transient = 0;  // end of forward: CE chunk buffers, eager dx and dW of the lm_head
  int64_t backward_transient = 0;  // one layer's backward (its re-run too, with recompute)
  int64_t eval_transient = 0;  // an evaluation batch's forward at its widest (no gradients)
  int64_t runtime = 0;   // BLAS / OpenMP per-thread buffers
  int64_t allocator_cache = 0;  // freed large blocks the CPU allocator may keep (<= 1/8 of the peak)
  int64_t baseline = 0;
  int64_t reference = 0;  // a preference stage's reference: a frozen copy or precomputed log-probs
  int64_t load_peak = 0;  // loading: the model's weights + one tensor's file pages + baseline
  int64_t train_peak = 0;
  int64_t peak = 0;       // max(load_peak, train_peak)
  bool recompute = true;
  int64_t activations() const { return recompute ? activations_recompute : activations_no_recompute; }
};

MemoryPlan plan_memory(const MemoryPlanInputs& in);

// The plan as a few lines for the run's log (MiB / GiB), marking which activation row applies.
std::string format_plan(const MemoryPlan& p);
// "412 MiB", "1.50 GiB".
std::string format_bytes(int64_t bytes);

// The first knob (in the order a user would try them) whose change brings the plan's peak under
// limit, as a sentence naming the new values and the resulting peak; "" when none does.
std::string memory_fit_advice(const MemoryPlanInputs& in, const TrainArgs& a, int64_t limit);

// Process memory from /proc/self/status (bytes; 0 where unreadable).
struct ProcessMemory {
  int64_t rss = 0, peak_rss = 0;  // VmRSS, VmHWM
};
ProcessMemory read_process_memory();

// The memory this process may use: MemAvailable (/proc/meminfo) or the cgroup v2 limit
// (/sys/fs/cgroup/memory.max minus memory.current) when set, whichever is smaller; 0 = unknown.
int64_t available_memory_bytes();

// "2G", "1536M", "512MiB", "1000000" (bytes) → bytes; ConfigError naming `what` otherwise.
int64_t parse_memory_size(const std::string& s, const std::string& what);

}  // namespace unillm::train
