// A frozen split weight held as this rank's block (nn/linear.h, hold_block): the block is what
// forward_split multiplies, so a training forward never needs the rest; the whole weight comes
// back, from every rank's block, only around the phases that read it whole. An expert another
// process runs holds nothing of its frozen weight (hold_nothing) until refilled.
#include "autograd/grad_mode.h"
#include "nn/linear.h"
#include "ops/take.h"

namespace unillm::nn {

Tensor FusedLinear::cut_block(int size, int rank) const {
  if (split_ == TpSplit::kColumn) {
    std::vector<std::pair<int64_t, int64_t>> rows;  // the rank's rows of every part, in part order
    for (size_t p = 0; p < parts_.size(); ++p) {
      const auto [lo, hi] = tp_share(parts_[p].out_features, size, rank);
      rows.emplace_back(part_begin(p) + lo, part_begin(p) + hi);
    }
    return ops::take_rows(weight_, rows);
  }
  const auto [c0, c1] = tp_share(in_, size, rank);
  return ops::take_cols(weight_, c0, c1);
}

void FusedLinear::hold_block(Collective& group) {
  const std::string name = parts_.empty() ? std::string("?") : parts_[0].name;
  if (split_ == TpSplit::kNone || !weight_.defined() || weight_.requires_grad())
    UNILLM_THROW(ConfigError, "[nn] ", name,
                 ": only a frozen weight of a split layer can be held as its block");
  if (block_group_) return;
  check_split(group.size());
  {
    autograd::NoGradGuard no_grad;
    block_ = cut_block(group.size(), group.rank());
  }
  block_group_ = &group;
  release_storage();
}

void FusedLinear::release_storage() {
  // The whole weight's own storage, empty until gathered or refilled (the old memory goes with
  // the last view of it).
  auto whole = std::make_shared<Storage>(nullptr, weight_.nbytes(), weight_.device(), nullptr);
  weight_ = Tensor(whole, weight_.shape(), weight_.dtype());
}

void FusedLinear::hold_nothing() {
  const std::string name = parts_.empty() ? std::string("?") : parts_[0].name;
  if (!weight_.defined() || weight_.requires_grad() || block_group_)
    UNILLM_THROW(ConfigError, "[nn] ", name,
                 ": only a frozen, whole weight can be held as nothing");
  if (holds_nothing_) return;
  holds_nothing_ = true;
  release_storage();
}

void FusedLinear::refill_whole() {
  if (!whole_in_memory()) weight_.storage()->refill();
}

bool FusedLinear::whole_in_memory() const {
  return !weight_.defined() || weight_.storage()->holds_memory();
}

void FusedLinear::check_whole(const char* what) const {
  if (whole_in_memory()) return;
  UNILLM_THROW(NotImplemented, "[nn] ", parts_.empty() ? std::string("?") : parts_[0].name, ": ",
               what, " reads the whole weight, but this process holds ",
               holds_nothing_ ? "none of it (an expert another process runs)"
                              : "only its tensor-parallel block of it",
               " (the phase must gather it first)");
}

void FusedLinear::gather_whole() {
  if (whole_in_memory()) return;
  UNILLM_CHECK(block_group_ && block_.defined(),
               "[nn] gather_whole of a weight held as nothing (refill_whole is its caller's)");
  Collective& g = *block_group_;
  const int n = g.size();
  Tensor all = Tensor::empty({n * block_.size(0), block_.size(1)}, block_.dtype(), block_.device());
  g.allgather(block_, all);
  weight_.storage()->refill();
  const auto es = static_cast<int64_t>(dtype_size(weight_.dtype()));
  const Device dev = weight_.device();
  char* dst = static_cast<char*>(weight_.raw_data());
  const char* src = static_cast<const char*>(all.raw_data());
  auto copy = [&](int64_t to, int64_t from, int64_t elements) {
    copy_bytes(dst + to * es, dev, src + from * es, dev, static_cast<size_t>(elements * es));
  };
  if (split_ == TpSplit::kColumn) {  // rank q's block: its rows of part 0, then of part 1, …
    const int64_t rows = block_.size(0);
    for (int q = 0; q < n; ++q) {
      int64_t local = 0;
      for (size_t p = 0; p < parts_.size(); ++p) {
        const auto [lo, hi] = tp_share(parts_[p].out_features, n, q);
        copy((part_begin(p) + lo) * in_, (q * rows + local) * in_, (hi - lo) * in_);
        local += hi - lo;
      }
    }
  } else {
    const int64_t cols = in_ / n;  // rank q's block: columns [q·cols, (q+1)·cols) of every row
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < out_; ++i) copy(i * in_ + q * cols, (q * out_ + i) * cols, cols);
  }
  // While the weight is whole the block is not needed (nothing splits in a whole-model phase):
  // letting it go keeps such a phase at the whole weight's size, as before blocks. release_whole
  // cuts it again.
  block_ = Tensor();
}

void FusedLinear::release_whole() {
  if ((!block_group_ && !holds_nothing_) || !whole_in_memory()) return;
  if (block_group_) {
    autograd::NoGradGuard no_grad;
    block_ = cut_block(block_group_->size(), block_group_->rank());
  }
  weight_.storage()->release();
}

}  // namespace unillm::nn
