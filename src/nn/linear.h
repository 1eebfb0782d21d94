// Linear layers. FusedLinear stores several HF projections (q/k/v, gate/up) as one [sum N, K]
// matrix so one GEMM computes them; each HF name (q_proj.weight, …) is a row range of it.
// LoRA adapters attach to parts of it by name; the adapters a call applies come with the call.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "nn/lora.h"
#include "nn/module.h"
#include "nn/tensor_parallel.h"
#include "ops/linear.h"
#include "ops/lora_linear.h"
#include "ops/oft_linear.h"
#include "ops/quant.h"

namespace unillm::nn {

struct LinearPart {
  std::string name;  // e.g. "q_proj"
  int64_t out_features;
};

class FusedLinear : public Module {
 public:
  // weight [sum(out), in] in weights.dtype on weights.device; biases (f32) only when bias is
  // true.
  FusedLinear(int64_t in_features, const std::vector<LinearPart>& parts, bool bias,
              ParamPlacement weights);
  // x [N, in] -> [N, sum(out)], plus the deltas of the adapters in lora->active that this
  // module holds (names it does not hold are skipped; the caller validates names).
  // use = kGradOnly: only the backward node is wanted, y is zeros (ops::linear's contract).
  // tp (training under tensor parallelism, nn/tensor_parallel.h): this rank's share by the
  // layer's split — a column-parallel layer returns its rows of each part ([N, Σ out/size]), a
  // row-parallel one takes x's share of the input columns ([N, in/size]) and returns the sum
  // over the group (with sequence parallelism a column-parallel layer takes the rank's token rows
  // and a row-parallel one returns them). nullptr, or a layer without a split: the whole layer.
  Tensor forward(const Tensor& x, const LoraRun* lora = nullptr,
                 ops::OutputUse use = ops::OutputUse::kValue, const TensorParallel* tp = nullptr) const;
  // How tensor parallelism splits this layer (set by its parent: Attention, MLP).
  void set_split(TpSplit s) { split_ = s; }
  TpSplit split() const { return split_; }
  // Throws ConfigError (naming the layer) when the layer cannot be split over `size` ranks: a
  // part or the input not divisible, a quantised weight, DoRA or OFT adapters.
  void check_split(int size) const;
  // The tensors whose gradient on a rank is that rank's own share (its block of the weight and
  // bias, its adapters' A and B): appended to out. Nothing for a layer without a split.
  void split_tensors(std::vector<const Tensor*>& out) const;
  // Tensor parallelism keeping only this rank's block of a frozen split weight (nn/linear_blocks.cpp,
  // train/tp_blocks.h): the block forward_split multiplies (column-parallel: each part's rows of
  // the rank; row-parallel: its input columns) is copied out and the weight re-pointed to a
  // storage of its own that holds no memory, so forward_split multiplies the block and a whole
  // forward is refused (naming the layer). gather_whole() — a collective over `group` — gives the
  // weight memory again and fills it from every rank's block, letting the block go (a whole-model
  // phase holds the whole weight alone); release_whole() cuts the block from it again (whatever a
  // phase wrote into it) and lets the memory go. Both do nothing when the
  // weight already is / is not whole. ConfigError for a trainable, quantised or unsplit weight.
  void hold_block(Collective& group);
  bool holds_block() const { return block_group_ != nullptr; }
  // Expert parallelism: a frozen weight of an expert another process runs, held as nothing (the
  // weight re-pointed to a storage of its own that holds no memory, as hold_block's) until
  // refill_whole() gives it memory again for the caller to fill (train broadcasts it from its
  // runner); release_whole() lets it go again. ConfigError for a trainable or quantised weight.
  void hold_nothing();
  void refill_whole();
  bool whole_in_memory() const;  // the whole weight holds memory (always, without a block)
  void gather_whole();
  void release_whole();
  const Tensor& block() const { return block_; }  // undefined while gathered whole
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  const Tensor& weight() const { return weight_; }
  const std::vector<LinearPart>& parts() const { return parts_; }
  int64_t part_begin(size_t i) const;  // first output row of part i

  // Adds adapter `name` (f32 A [P·r, in] ~ U(±1/sqrt(in)) from rng, PEFT's kaiming_uniform(a=√5);
  // B zeros; both require grad) on the parts listed by index. Registers its parameters under
  // the HF names "<part>.lora_A.<name>.weight" / "<part>.lora_B.<name>.weight". With c.use_dora
  // also the magnitude m = ‖W‖ per output row, "<part>.lora_magnitude_vector.<name>.weight"
  // (refused over a quantised weight).
  void add_lora(const std::string& name, const LoraConfig& c, const std::vector<size_t>& parts,
                Rng& rng, uint64_t stream);
  // OFT (nn/oft.cpp): adapter `name` as PEFT's OFT on the listed parts, its oft_R weight zeros
  // (the identity), registered as "<part>.oft_R.<name>.weight" [blocks, b(b−1)/2] per part.
  // Blocks as nn::oft_blocks (PEFT's adjustment); over a quantised weight too (QOFT,
  // ops::oft_linear_q).
  // lora(name) then returns it (LoraWeights::oft_r defined); merge_lora merges it as PEFT does
  // (W_p ← W_p·blockdiag(R)ᵀ).
  void add_oft(const std::string& name, const OftConfig& c, const std::vector<size_t>& parts);
  const LoraWeights* lora(const std::string& name) const;
  LoraWeights* lora(const std::string& name);
  // Removes the adapter; a PiSSA adapter first gives W back its initial part (W += s·B0·A0).
  void remove_lora(const std::string& name);
  // PiSSA (PEFT's pissa_init): for each part of adapter `name`, the top-r SVD of W_p (full when
  // niter < 0, else niter subspace iterations seeded from seed and the part) sets
  // A_p = sqrt(S/s)·Vtᵣ, B_p = Uᵣ·sqrt(S/s), W_p -= s·B_p·A_p (f64, rounded once to W's dtype);
  // A and B are kept as init_a/init_b. Refused over a quantised weight.
  void pissa_init(const std::string& name, int64_t niter, uint64_t seed);
  // W[rows of part p] += scaling · B_p · A_p (computed in f32, f64 for f64 W, rounded once to
  // W's dtype), then removes the adapter. DoRA: those rows are then scaled by m / ‖W + s·B·A‖.
  void merge_lora(const std::string& name);

  // Replaces the dense weight by q (its codes, ops/quant.h), which forward then multiplies by
  // through ops::linear_q; the dense weight is dropped (no longer a parameter). Adapters added
  // afterwards train over it (QLoRA: forward adds ops::lora_delta); quantising a layer that
  // already has adapters, or merging into a quantised weight, is refused.
  void set_quantized(ops::QuantizedWeight q);
  const ops::QuantizedWeight& quantized() const { return qweight_; }
  bool is_quantized() const { return qweight_.defined(); }
  const Tensor& bias() const { return bias_; }

  // Calibration (GPTQ's input statistics): forward hands each input x [N, in] to the observer
  // before multiplying. Empty: none (the default).
  void set_input_observer(std::function<void(const Tensor& x)> observer) { observer_ = std::move(observer); }

 private:
  ops::LoraAdapterInput adapter_input(const LoraWeights& w) const;
  // forward under tensor parallelism (nn/linear_tp.cpp).
  Tensor forward_split(const Tensor& x, const LoraRun* lora, ops::OutputUse use, const TensorParallel& tp) const;
  TpSplit split_ = TpSplit::kNone;
  // hold_block: the rank's block and the group it was cut for; cut_block: the block of weight_.
  Tensor block_;
  Collective* block_group_ = nullptr;
  bool holds_nothing_ = false;
  void release_storage();  // weight_ re-pointed to a storage of its own that holds no memory
  Tensor cut_block(int size, int rank) const;
  void check_whole(const char* what) const;  // throws when weight_ holds no memory
  // OFT (nn/oft.cpp): whether the call applies an OFT adapter this layer holds, the forward then,
  // its op input, and the merge.
  bool oft_active(const LoraRun* run) const;
  Tensor forward_with_oft(const Tensor& x, const LoraRun& run, ops::OutputUse use) const;
  ops::OftLinearInput oft_input(const LoraWeights& w) const;
  void merge_oft(const std::string& name);
  // DoRA: creates and registers w.magnitude ("<part>.lora_magnitude_vector.<name>.weight").
  void add_magnitude(const std::string& name, LoraWeights& w);
  // W rows of w's parts += sign · s · B·A (f64 on the host, rounded once to W's dtype).
  void add_product(const LoraWeights& w, const Tensor& a, const Tensor& b, double sign);
  std::function<void(const Tensor&)> observer_;
  std::vector<LinearPart> parts_;
  Tensor weight_;  // [sum(out), in]; undefined once quantised
  Tensor bias_;  // [sum(out)] f32 or undefined
  ops::QuantizedWeight qweight_;  // the quantised weight, when set_quantized
  int64_t in_ = 0, out_ = 0;
  std::map<std::string, std::unique_ptr<LoraWeights>> lora_;  // stable addresses (registered)
};

// A plain projection: a FusedLinear with one part named by the parent (e.g. "o_proj").
class Linear : public FusedLinear {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, ParamPlacement weights,
         const std::string& name)
      : FusedLinear(in_features, {{name, out_features}}, bias, weights) {}
};

}  // namespace unillm::nn
