// Tensor parallelism's frozen split weights held as blocks (train/tp_blocks.h).
#include "train/tp_blocks.h"

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
