// Tensor parallelism's frozen split weights held as blocks (train/tp_blocks.h).
#include "train/tp_blocks.h"

#include "core/error.h"

namespace unillm::train {

TpBlocks::TpBlocks(const std::vector<models::CausalLM::SplitLinear>& split) {
  for (const auto& [l, group, layer] : split) {
    if (!group || group->size() == 1 || l->split() == nn::TpSplit::kNone || l->is_quantized() ||
        !l->weight().defined() || l->weight().requires_grad())
      continue;
    l->hold_block(*group);
    layers_.push_back(l);
    layer_of_.push_back(layer);
  }
}

int64_t TpBlocks::kept_bytes() const {
  int64_t n = 0;
  for (const nn::FusedLinear* l : layers_) n += static_cast<int64_t>(l->block().nbytes());
  return n;
}

int64_t TpBlocks::whole_bytes() const {
  int64_t n = 0;
  for (const nn::FusedLinear* l : layers_) n += static_cast<int64_t>(l->weight().nbytes());
  return n;
}

// Every process of a group gathers its blocks in the same order (the model's, as built).
void TpBlocks::gather_layer(int64_t layer) {
  if (depth_ > 0) return;
  for (size_t i = 0; i < layers_.size(); ++i)
    if (layer_of_[i] == layer) layers_[i]->gather_whole();
}

void TpBlocks::release_layer(int64_t layer) {
  if (depth_ > 0) return;
  for (size_t i = 0; i < layers_.size(); ++i)
    if (layer_of_[i] == layer) layers_[i]->release_whole();
}

TpBlocks::PerLayer::PerLayer(TpBlocks* b, models::CausalLM& model)
    : b_(b), model_(model), before_(model.layer_hooks()) {
  if (!b_) return;
  models::CausalLM::LayerHooks h = before_;
  h.before_forward = [b, f = before_.before_forward](int64_t l) {
    if (f) f(l);
    b->gather_layer(l);
  };
  h.after_forward = [b, f = before_.after_forward](int64_t l) {
    b->release_layer(l);
    if (f) f(l);
  };
  model_.set_layer_hooks(std::move(h));
}

TpBlocks::PerLayer::~PerLayer() {
  if (b_) model_.set_layer_hooks(before_);
}

TpBlocks::Streamed::Streamed(TpBlocks* b, dist::ProcessGroup& requests, bool writer)
    : b_(b), requests_(requests), writer_(writer) {
  UNILLM_CHECK(b_->depth_ == 0, "[train] streamed saving of the blocks inside a whole-model scope");
  UNILLM_CHECK(writer == (requests.rank() == 0), "[train] the streamed writer is not rank 0 of its tp group");
  if (writer_) return;
  Tensor msg = Tensor::empty({1}, DType::i32);
  for (;;) {  // serve the writer's requests
    requests_.broadcast(msg, 0);
    const int64_t i = msg.data<int32_t>()[0];
    if (i < 0) break;
    hold(i);
  }
  hold(-1);
}

void TpBlocks::Streamed::request(int64_t i) {
  Tensor msg = Tensor::empty({1}, DType::i32);
  msg.data<int32_t>()[0] = static_cast<int32_t>(i);
  requests_.broadcast(msg, 0);
}

void TpBlocks::Streamed::hold(int64_t i) {
  if (held_ >= 0) b_->layers_[static_cast<size_t>(held_)]->release_whole();
  held_ = i;
  if (i >= 0) b_->layers_[static_cast<size_t>(i)]->gather_whole();
}

// A tensor is a blocked weight's when it shares its storage (a fused weight's parts are views).
void TpBlocks::Streamed::read(const Tensor& t) {
  if (!t.defined()) return;
  const Storage* st = t.storage().get();
  for (size_t i = 0; i < b_->layers_.size(); ++i) {
    if (b_->layers_[i]->weight().storage().get() != st) continue;
    if (static_cast<int64_t>(i) == held_) return;
    request(static_cast<int64_t>(i));
    hold(static_cast<int64_t>(i));
    return;
  }
}

TpBlocks::Streamed::~Streamed() {
  if (!writer_) return;
  try {  // the writer's end: the others stop serving
    request(-1);
    hold(-1);
  } catch (...) {  // a collective failing here ends the job through its watchdog
  }
}

TpBlocks::Whole::Whole(TpBlocks* b) : b_(b) {
  if (!b_) return;
  if (b_->depth_++ > 0) return;
  for (nn::FusedLinear* l : b_->layers_) l->gather_whole();
}

TpBlocks::Whole::~Whole() {
  if (!b_) return;
  if (--b_->depth_ > 0) return;
  for (nn::FusedLinear* l : b_->layers_) l->release_whole();
}

}  // namespace unillm::train
