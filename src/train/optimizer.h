// The optimiser interface over the flat parameter arena (train/arena.h), the factory that maps
// HF's `optim` names onto the implemented ones, and LoRA+'s per-segment learning rates. The
// trainer and checkpoints see only this interface: step(lr), steps(), named state tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"
#include "train/arena.h"
#include "train/low_rank.h"

namespace unillm::train {

struct OptimizerConfig {
  std::string kind = "adamw";  // adamw | sgd | adafactor | adamw_8bit (optimizer_kind's names)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam's (unused by sgd and adafactor)
  double weight_decay = 0.0;  // applied to segments with decay (HF's param groups)
  // The model's hidden_size, num_attention_heads, num_key_value_heads (adam_mini's head blocks).
  int64_t hidden_size = 0, num_heads = 0, num_kv_heads = 0;
  // BAdam's layer mode (kind "badam"; train/badam.h): AdamW on one decoder layer at a time.
  struct BAdam {
    std::string switch_mode = "ascending";  // ascending | descending | random | fixed
    int64_t start_block = -1;               // -1: BAdam's default for the mode
    int64_t switch_interval = 50;           // optimizer steps per layer; -1: never switch
    int64_t verbose = 0;
    uint64_t seed = 42;  // random mode's permutations (ratio mode: its per-tensor seeds)
    // Ratio mode (kind "badam_ratio"; train/badam_ratio.h): the share of each tensor updated,
    // adjacent | scatter masks, and the steps between mask moves (LLaMA-Factory leaves the
    // package's default, 100, whatever badam_switch_interval says).
    double update_ratio = 0.05;
    std::string mask_mode = "adjacent";
    int64_t ratio_switch_every = 100;
    // Backward passes per step (gradient_accumulation_steps): the package's gradient hook runs
    // once per pass, and in the step before a move each run moves the offsets.
    int64_t backward_passes = 1;
  } badam;
  // GaLore / APOLLO (kinds "galore", "apollo"; train/galore.h, train/apollo.h).
  LowRankSettings low_rank;
};

// Live state tensors by name: a checkpoint writes them and copies saved values back into them.
using StateTensors = std::vector<std::pair<std::string, Tensor*>>;

class Optimizer {
 public:
  explicit Optimizer(ParamArena& arena) : arena_(arena) {}
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  virtual ~Optimizer() = default;
  // The kind (OptimizerConfig::kind), recorded in checkpoints.
  virtual const char* kind() const = 0;
  // One update from the arena's gradients; segment s uses lr × s.lr_scale. Increments steps().
  virtual void step(double lr) = 0;
  // Every state tensor (empty ones left out); names are stable across runs of the same kind.
  virtual StateTensors state() = 0;
  int64_t steps() const { return step_; }
  void set_steps(int64_t s) { step_ = s; }
  // Checkpoint state: write_state writes every state tensor into one safetensors file (rank 0;
  // the default writes state()); read_state copies a checkpoint's file back (names, dtypes and
  // shapes checked; IoError naming `where`). A sharded optimiser (ZeRO, train/zero.h) writes the
  // whole-arena tensors one at a time from its group's pieces, which the group's other ranks
  // send with send_state() meanwhile (a collective), and reads only its own part.
  virtual void write_state(const std::string& path);
  virtual void send_state() {}
  virtual void read_state(const io::SafetensorsFile& f, const std::string& where);
  // Called after backward (and the data-parallel reduction), before clipping: an optimiser that
  // uses only part of each gradient (BAdam's ratio mode) zeroes the rest so the clip norm covers
  // what it updates, as the package's gradient hooks do.
  virtual void prepare_grads() {}
  int64_t state_bytes();
  const ParamArena& arena() const { return arena_; }
  // Called by the trainer once the run's state is final (after a resume, before the first
  // forward pass) with the modules whose trainable parameters the arena holds, and where to say
  // things. An optimiser that chooses which parameters train (BAdam) sets requires_grad here.
  virtual void attach(const std::vector<nn::Module*>& modules,
                      const std::function<void(const std::string&)>& say) {
    (void)modules;
    (void)say;
  }

 protected:
  ParamArena& arena_;
  int64_t step_ = 0;
};

// One HF-named tensor in the arena: elements [offset, offset + rows·cols), row-major; matrix
// when its segment is 2-D (a 1-D tensor has cols 1). A fused segment gives one part per HF name.
struct ArenaPart {
  int64_t offset = 0, rows = 0, cols = 1;
  bool matrix = false;
  const ArenaSegment* seg = nullptr;
  int64_t numel() const { return rows * cols; }
};
std::vector<ArenaPart> arena_parts(const ParamArena& arena);

// The arena's parameters and gradients as host f32 arrays for optimisers whose loops run on the
// host: the arena itself on the CPU, else copies; commit() writes the parameters back.
class HostArena {
 public:
  explicit HostArena(ParamArena& arena);
  float* params() { return p_.data<float>(); }
  const float* grads() const { return g_.data<float>(); }
  void commit();

 private:
  ParamArena& arena_;
  Tensor p_, g_;
};

// HF's `optim` name → kind: adamw_torch(_fused) → adamw, sgd, adafactor, adamw_8bit /
// adamw_bnb_8bit / paged_adamw_8bit → adamw_8bit; "" when not implemented.
std::string optimizer_kind(const std::string& optim);
// The implemented HF names, for messages.
const char* implemented_optimizers();
std::unique_ptr<Optimizer> make_optimizer(ParamArena& arena, const OptimizerConfig& c);
struct TrainArgs;
// The run's optimiser: optim (or adafactor: true, which wins as in HF), adam_*, weight_decay.
OptimizerConfig optimizer_config(const TrainArgs& a);

// Bytes of optimiser state for `trainable` elements before the arena exists (the memory plan):
// exact for adamw/sgd; adafactor estimated as rows + cols of [n/hidden, hidden] matrices;
// adamw_8bit as 2 bytes per element plus two f32 scales per 256; muon as one momentum per element
// (plan_memory adds AdamW's second moment of embeddings and lm_head); adam_mini as one moment per
// element plus one value per hidden-wide row.
int64_t planned_state_bytes(const std::string& kind, int64_t trainable, int64_t hidden);

// torch.optim.AdamW over model.parameters() as one group (LLaMA-Factory v1's optimizer): weight
// decay on every segment, biases and norms included (HF's groups leave those out).
void decay_every_segment(ParamArena& arena);

// LLaMA-Factory's create_loraplus_optimizer as per-segment settings: lora_B and 1-D parameters
// get lr × ratio (decay as HF's names say), lora_embedding_B gets embedding_lr (relative to
// learning_rate, as HF's schedule scales every group alike), everything else lr with decay.
void apply_loraplus(ParamArena& arena, double ratio, double embedding_lr, double learning_rate);

}  // namespace unillm::train
