// Expert parallelism's frozen experts held by their runners only (train/expert_shares.h).
#include "train/expert_shares.h"

#include <string>

#include "core/error.h"

namespace unillm::train {

ExpertShares::ExpertShares(nn::Module& model, int64_t experts, dist::ProcessGroup& group)
    : group_(group) {
  const int64_t per = experts / group.size();
  UNILLM_CHECK(per > 0 && experts % group.size() == 0, "[train] ", experts, " experts over ",
               group.size(), " processes");
  model.for_each_module("", [&](const std::string& prefix, nn::Module& m) {
    auto* l = dynamic_cast<nn::FusedLinear*>(&m);
    const size_t at = prefix.find(".mlp.experts.");
    if (!l || at == std::string::npos || l->is_quantized() || !l->weight().defined() ||
        l->weight().requires_grad())
      return;
    const int64_t e = std::stoll(prefix.substr(at + 13));
    const int runner = static_cast<int>(e / per);
    held_.push_back({l, runner});
    if (runner == group_.rank()) return;
    l->hold_nothing();
    ++foreign_;
  });
}

int64_t ExpertShares::kept_bytes() const {
  int64_t n = 0;
  for (const Held& h : held_)
    if (h.runner == group_.rank()) n += static_cast<int64_t>(h.linear->weight().nbytes());
  return n;
}

int64_t ExpertShares::whole_bytes() const {
  int64_t n = 0;
  for (const Held& h : held_) n += static_cast<int64_t>(h.linear->weight().nbytes());
  return n;
}

ExpertShares::Whole::Whole(ExpertShares* s) : s_(s) {
  if (!s_ || s_->depth_++ > 0) return;
  for (const Held& h : s_->held_) {
    h.linear->refill_whole();  // nothing to do on its runner
    Tensor w = h.linear->weight();
    s_->group_.broadcast(w, h.runner);
  }
}

ExpertShares::Whole::~Whole() {
  if (!s_ || --s_->depth_ > 0) return;
  for (const Held& h : s_->held_) h.linear->release_whole();  // its runner's stays
}

}  // namespace unillm::train
