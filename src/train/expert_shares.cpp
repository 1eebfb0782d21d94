// Expert parallelism's frozen experts held by their runners only (train/expert_shares.h).
#include "train/expert_shares.h"

#include <string>

#include "core/error.h"

namespace unillm::train {

std::vector<std::pair<nn::FusedLinear*, int>> ExpertShares::runners(nn::Module& model,
                                                                    int64_t experts, int size) {
  const int64_t per = experts / size;
  UNILLM_CHECK(per > 0 && experts % size == 0, "[train] ", experts, " experts over ", size,
               " processes");
  std::vector<std::pair<nn::FusedLinear*, int>> out;
  model.for_each_module("", [&](const std::string& prefix, nn::Module& m) {
    auto* l = dynamic_cast<nn::FusedLinear*>(&m);
    const size_t at = prefix.find(".mlp.experts.");
    if (l && at != std::string::npos)
      out.emplace_back(l, static_cast<int>(std::stoll(prefix.substr(at + 13)) / per));
  });
  return out;
}

ExpertShares::ExpertShares(nn::Module& model, int64_t experts, dist::ProcessGroup& group)
    : group_(group) {
  for (const auto& [l, runner] : runners(model, experts, group.size())) {
    if (l->is_quantized() || !l->weight().defined() || l->weight().requires_grad()) continue;
    held_.push_back({l, runner});
    if (runner == group_.rank()) continue;
    l->hold_nothing();  // (nothing to do where the load let it go already)
    ++foreign_;
  }
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
