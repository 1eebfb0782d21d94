// Tensor parallelism's frozen split weights held as blocks (train/tp_blocks.h).
#include "train/tp_blocks.h"

namespace unillm::train {

TpBlocks::TpBlocks(const std::vector<models::CausalLM::SplitLinear>& split) {
  for (const auto& [l, group] : split) {
    if (!group || group->size() == 1 || l->split() == nn::TpSplit::kNone || l->is_quantized() ||
        !l->weight().defined() || l->weight().requires_grad())
      continue;
    l->hold_block(*group);
    layers_.push_back(l);
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
