// Gradient buckets (see grad_buckets.h).
#include "train/grad_buckets.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace unillm::train {

int64_t layer_of(const std::string& name) {
  const std::string key = "layers.";
  for (size_t at = name.find(key); at != std::string::npos; at = name.find(key, at + 1)) {
    if (at > 0 && name[at - 1] != '.') continue;
    size_t i = at + key.size(), j = i;
    while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
    if (j > i && j < name.size() && name[j] == '.') return std::stoll(name.substr(i, j - i));
  }
  return -1;
}

GradBuckets::GradBuckets(ParamArena& arena, dist::ProcessGroup& group, double cap_bytes)
    : arena_(arena), group_(group), cap_bytes_(cap_bytes) {
  const int64_t n = arena.numel();
  // Each layer's range of the arena; the layers must lie in order, one after another, for a
  // bucket to be a contiguous range.
  std::map<int64_t, std::pair<int64_t, int64_t>> layers;
  bool ordered = true;
  int64_t last_layer = -1;
  for (const ArenaSegment& s : arena.segments()) {
    const int64_t l = layer_of(s.name);
    if (l < 0) continue;
    if (l < last_layer) ordered = false;
    last_layer = l;
    auto it = layers.find(l);
    if (it == layers.end())
      layers[l] = {s.offset, s.offset + s.numel};
    else
      it->second = {std::min(it->second.first, s.offset), std::max(it->second.second, s.offset + s.numel)};
  }
  int64_t lo = layers.empty() ? 0 : layers.begin()->second.first, hi = lo;
  for (const auto& [l, r] : layers) {
    if (r.first != hi && hi != lo) ordered = false;
    hi = r.second;
  }
  for (const ArenaSegment& s : arena.segments())
    if (layer_of(s.name) < 0 && s.offset < hi && s.offset + s.numel > lo) ordered = false;
  if (layers.empty() || !ordered) {
    layout_note_ = layers.empty() ? "no decoder layer is trained" : "the layers' parameters are not in layer order";
    buckets_.push_back({0, n, -1});
  } else {
    // Top layers first (backward reaches them first), consecutive layers merged up to the cap.
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      const auto [l, r] = *it;
      if (!buckets_.empty() && buckets_.back().lowest_layer >= 0 && buckets_.back().lo == r.second &&
          static_cast<double>(buckets_.back().hi - r.first) * 4 <= cap_bytes_) {
        buckets_.back().lo = r.first;
        buckets_.back().lowest_layer = l;
      } else {
        buckets_.push_back({r.first, r.second, l});
      }
    }
    if (hi < n) buckets_.push_back({hi, n, -1});  // final norm, lm_head, a stage's extra modules
    if (lo > 0) buckets_.push_back({0, lo, -1});  // the embedding
  }
  ready_.assign(buckets_.size(), false);
  works_.resize(buckets_.size());
}

std::string GradBuckets::describe() const {
  int64_t layered = 0;
  for (const Bucket& b : buckets_) layered += b.lowest_layer >= 0 ? 1 : 0;
  char buf[200];
  std::snprintf(buf, sizeof buf, "%lld bucket%s (%lld over decoder layers, up to %.0f MB each)",
                static_cast<long long>(buckets_.size()), buckets_.size() == 1 ? "" : "s",
                static_cast<long long>(layered), cap_bytes_ / 1048576.0);
  return std::string(buf) + (layout_note_.empty() ? "" : "; one bucket: " + layout_note_);
}

std::vector<std::pair<int64_t, int64_t>> GradBuckets::ranges() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const Bucket& b : buckets_) out.emplace_back(b.lo, b.hi);
  return out;
}

void GradBuckets::arm() { armed_ = true; }

void GradBuckets::start_ready() {
  while (next_ < buckets_.size() && ready_[next_]) {
    const Bucket& b = buckets_[next_];
    if (before_start_) before_start_(b.lo, b.hi);
    Tensor g = arena_.grad_tensor().slice(0, b.lo, b.hi);
    works_[next_] = group_.allreduce_async(g, dist::ReduceOp::sum);
    ++next_;
  }
}

void GradBuckets::layer_done(int64_t layer) {
  if (!armed_) return;
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].lowest_layer == layer) ready_[b] = true;
  start_ready();
  for (size_t b = 0; b < next_; ++b)  // progress: Open MPI moves data only inside MPI calls
    if (works_[b]) works_[b]->test();
}

void GradBuckets::finish() {
  std::fill(ready_.begin(), ready_.end(), true);
  start_ready();
  for (auto& w : works_) {
    if (w) w->wait();
    w.reset();
  }
  std::fill(ready_.begin(), ready_.end(), false);
  next_ = 0;
  armed_ = false;
}

}  // namespace unillm::train
