// ZeRO stages 1 and 2: the arena cut into per-rank ranges, state and steps per range; stage 3's
// pieces (train/param_shards.h).
#include "train/zero.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "io/safetensors_writer.h"
#include "ops/optimizer.h"
#include "train/adamw.h"

namespace unillm::train {

std::pair<int64_t, int64_t> zero_range(int64_t n, int world, int rank) {
  const int64_t per = (n + world - 1) / world;
  const int64_t lo = std::min<int64_t>(n, per * rank), hi = std::min<int64_t>(n, per * (rank + 1));
  return {lo, hi};
}

bool zero_shardable(const std::string& kind) { return kind == "adamw" || kind == "sgd"; }

namespace {
ParamArena range_of(const ParamArena& arena, const dist::ProcessGroup& g) {
  const auto [lo, hi] = zero_range(arena.numel(), g.size(), g.rank());
  return arena.range(lo, hi);
}
}  // namespace

ZeroOptimizer::ZeroOptimizer(ParamArena& arena, dist::ProcessGroup& group, int stage, const MakeInner& make_inner,
                             dist::ProcessGroup* replicas)
    : Optimizer(arena), group_(group), replicas_(replicas), stage_(stage), shard_(range_of(arena, group)) {
  UNILLM_CHECK(stage == 1 || stage == 2, "[train] ZeRO stage ", stage, " is not 1 or 2");
  std::tie(lo_, hi_) = zero_range(arena.numel(), group.size(), group.rank());
  per_rank_ = (arena.numel() + group.size() - 1) / group.size();
  inner_ = make_inner(shard_);
  for (const auto& [name, t] : inner_->state())
    UNILLM_CHECK(t->numel() == shard_.numel(), "[train] ZeRO: ", inner_->kind(), "'s state '", name,
                 "' is not one value per element; it cannot be sharded by range");
}

ZeroOptimizer::ZeroOptimizer(ParamArena& arena, dist::ProcessGroup& group, ZeroPieces pieces, const MakeInner& make_inner,
                             const std::function<void(ParamArena& shard)>& before_state,
                             dist::ProcessGroup* replicas, bool split_state)
    : Optimizer(arena),
      group_(group),
      replicas_(replicas),
      stage_(3),
      per_rank_(pieces.per_rank),
      shard_(arena.copy_runs(pieces.runs_by_rank.at(static_cast<size_t>(group.rank())), pieces.per_rank)),
      pieces_(std::move(pieces)) {
  UNILLM_CHECK(static_cast<int>(pieces_.runs_by_rank.size()) == group.size(), "[train] ZeRO-3 pieces for ",
               pieces_.runs_by_rank.size(), " ranks, the group has ", group.size());
  if (before_state) before_state(shard_);
  if (split_state && replicas_ && replicas_->size() > 1) {
    split_per_ = (per_rank_ + replicas_->size() - 1) / replicas_->size();
    const auto [lo, hi] = zero_range(per_rank_, replicas_->size(), replicas_->rank());
    split_lo_ = lo;
    split_.emplace(shard_.range(lo, hi));
  }
  ParamArena& stepped = split_ ? *split_ : shard_;
  inner_ = make_inner(stepped);
  for (const auto& [name, t] : inner_->state())
    UNILLM_CHECK(t->numel() == stepped.numel(), "[train] ZeRO: ", inner_->kind(), "'s state '", name,
                 "' is not one value per element; it cannot be sharded");
}

void ZeroOptimizer::zero_grads() {
  if (stage_ == 3) shard_.zero_grads();
}

void ZeroOptimizer::gather_into(const Tensor& mine, Tensor& whole, dist::ProcessGroup& g, int64_t per) {
  // Window by window of each rank's range: rank q's elements j.. land at q·per + j.
  const int world = g.size();
  const int64_t window = std::min(kCollectiveWindow, per);
  if (window == 0) return;
  Tensor in_buf = Tensor::empty({window}, mine.dtype(), whole.device());
  Tensor out_buf = Tensor::empty({window * world}, mine.dtype(), whole.device());
  for (int64_t j = 0; j < per; j += window) {
    const int64_t n = std::min(window, per - j);
    Tensor in = in_buf.slice(0, 0, n), out = out_buf.slice(0, 0, n * world);
    const int64_t have = std::clamp<int64_t>(mine.numel() - j, 0, n);  // the last ranks may hold fewer
    if (have < n) in.fill(0.0);
    if (have > 0) in.slice(0, 0, have).copy_from(mine.slice(0, j, j + have));
    g.allgather(in, out);
    for (int q = 0; q < world; ++q) {
      const int64_t lo = q * per + j, hi = std::min(lo + n, whole.numel());
      if (hi > lo) whole.slice(0, lo, hi).copy_from(out.slice(0, q * n, q * n + hi - lo));
    }
  }
}

void ZeroOptimizer::step(double lr) {
  inner_->step(lr);
  step_ = inner_->steps();
  if (stage_ == 3) {  // the units gather the updated pieces when they are next used
    if (split_) {  // the replicas' stepped ranges, back into every replica's shard
      Tensor params = shard_.param_tensor();
      gather_into(split_->param_tensor(), params, *replicas_, split_per_);
    }
    return;
  }
  Tensor params = arena_.param_tensor();
  gather_into(shard_.param_tensor(), params, group_, per_rank_);
}

StateTensors ZeroOptimizer::state() { return inner_->state(); }

StateTensors ZeroOptimizer::part_state() {
  StateTensors inner = inner_->state();
  if (!split_) return inner;
  part_state_.clear();
  part_state_.reserve(inner.size());  // (pointers into it are handed out)
  StateTensors out;
  for (const auto& [name, t] : inner) {
    part_state_.push_back(Tensor::zeros({per_rank_}, t->dtype(), t->device()));
    gather_into(*t, part_state_.back(), *replicas_, split_per_);
    out.emplace_back(name, &part_state_.back());
  }
  return out;
}

std::vector<ArenaRun> ZeroOptimizer::runs_of(int q) const {
  if (stage_ == 3) return pieces_.runs_by_rank[static_cast<size_t>(q)];
  const auto [lo, hi] = zero_range(arena_.numel(), group_.size(), q);
  if (hi <= lo) return {};
  return {{lo, hi, 0}};
}

void ZeroOptimizer::take_part(const Tensor& whole, Tensor& part) const {
  if (stage_ != 3) {
    if (hi_ > lo_) part.copy_from(whole.slice(0, lo_, hi_));
    return;
  }
  for (const ArenaRun& r : pieces_.runs_by_rank[static_cast<size_t>(group_.rank())])
    part.slice(0, r.at, r.at + r.hi - r.lo).copy_from(whole.slice(0, r.lo, r.hi));
}

namespace {
constexpr int kStateTag = 7100;  // + the state tensor's index; nothing else is in flight at a save
}  // namespace

void ZeroOptimizer::write_state(const std::string& path) {
  UNILLM_CHECK(group_.rank() == 0, "[train] ZeRO: the checkpoint writer is not rank 0 of its sharding group");
  StateTensors inner = part_state();
  std::vector<io::TensorSpec> specs;
  for (const auto& [name, t] : inner) {
    // One dtype and shape for all: the file's layout order is then the given order, the order in
    // which send_state() sends.
    UNILLM_CHECK(t->dtype() == inner[0].second->dtype(), "[train] ZeRO: state tensors of several dtypes");
    specs.push_back({name, t->dtype(), {arena_.numel()}});
  }
  size_t host_of = specs.size();  // which state tensor `host` holds (a device's copied once)
  Tensor host;
  io::save_safetensors_parts(path, specs, kStateWindow, [&](size_t i, int64_t lo, int64_t hi) {
    if (host_of != i) host = inner[i].second->to(Device{}), host_of = i;
    const Tensor& mine = host;
    Tensor window = Tensor::zeros({hi - lo}, mine.dtype(), Device{});
    for (int q = 0; q < group_.size(); ++q) {
      const std::vector<ArenaRun> runs = clip_runs(runs_of(q), lo, hi);
      int64_t n = 0;
      for (const ArenaRun& r : runs) n += r.hi - r.lo;
      if (n == 0) continue;
      Tensor from = mine;  // this rank's part, or rank q's elements of the window in run order
      if (q > 0) {
        Tensor part = Tensor::empty({n}, mine.dtype(), inner[i].second->device());
        group_.recv(part, q, kStateTag + static_cast<int>(i));
        from = part.to(Device{});
      }
      int64_t k = 0;
      for (const ArenaRun& r : runs) {
        const int64_t at = q == 0 ? r.at : k;
        window.slice(0, r.lo - lo, r.hi - lo).copy_from(from.slice(0, at, at + r.hi - r.lo));
        k += r.hi - r.lo;
      }
    }
    return window;
  });
  part_state_.clear();
}

void ZeroOptimizer::send_state() {
  // (Split state: every process first gathers its part's state over its replicas, the writer's
  // replicas with the writer.)
  StateTensors inner = part_state();
  if (group_.rank() == 0 || (replicas_ && replicas_->rank() != 0)) {  // the writer, or another group
    part_state_.clear();
    return;
  }
  const std::vector<ArenaRun> mine = runs_of(group_.rank());
  for (size_t i = 0; i < inner.size(); ++i)
    for (int64_t lo = 0; lo < arena_.numel(); lo += kStateWindow) {  // write_state's windows
      const std::vector<ArenaRun> runs = clip_runs(mine, lo, std::min(arena_.numel(), lo + kStateWindow));
      int64_t n = 0;
      for (const ArenaRun& r : runs) n += r.hi - r.lo;
      if (n == 0) continue;
      Tensor part = Tensor::empty({n}, inner[i].second->dtype(), inner[i].second->device());
      int64_t k = 0;
      for (const ArenaRun& r : runs) {
        part.slice(0, k, k + r.hi - r.lo).copy_from(inner[i].second->slice(0, r.at, r.at + r.hi - r.lo));
        k += r.hi - r.lo;
      }
      group_.send(part, 0, kStateTag + static_cast<int>(i));
    }
  part_state_.clear();
}

void ZeroOptimizer::read_state(const io::SafetensorsFile& f, const std::string& where) {
  for (const auto& [name, dst] : inner_->state()) {
    if (!f.has(name)) UNILLM_THROW(IoError, "[checkpoint] ", where, ": '", name, "' missing");
    const Tensor whole = f.tensor(name);  // a view of the mapping: only this rank's pages are read
    if (whole.shape() != Shape{arena_.numel()} || whole.dtype() != dst->dtype())
      UNILLM_THROW(IoError, "[checkpoint] ", where, ": '", name, "' is ", dtype_name(whole.dtype()), " ",
                   shape_str(whole.shape()), ", expected ", dtype_name(dst->dtype()), " [", arena_.numel(), "]");
    if (!split_) {
      take_part(whole, *dst);
      continue;
    }
    Tensor part = Tensor::zeros({per_rank_}, dst->dtype(), Device{});  // this rank's part, then its replica's range
    take_part(whole, part);
    dst->copy_from(part.slice(0, split_lo_, split_lo_ + dst->numel()));
  }
  inner_->set_steps(steps());
}

void ZeroOptimizer::scatter_sum(const Tensor& g, Tensor& mine, dist::ProcessGroup& grp, int64_t per,
                                dist::ProcessGroup* then) {
  // Window by window of each rank's range (gather_into's windows): the sums of rank q's elements
  // j.. reach rank q, which keeps them in `mine` (which may alias its range of g: it is written
  // only where this window already read).
  const int world = grp.size();
  const int64_t window = std::min(kCollectiveWindow, per);
  if (window == 0) return;
  Tensor in_buf = Tensor::empty({window * world}, DType::f32, g.device());
  Tensor out_buf = Tensor::empty({window}, DType::f32, g.device());
  for (int64_t j = 0; j < per; j += window) {
    const int64_t n = std::min(window, per - j);
    Tensor in = in_buf.slice(0, 0, n * world), out = out_buf.slice(0, 0, n);
    for (int q = 0; q < world; ++q) {
      const int64_t lo = q * per + j, hi = std::clamp<int64_t>(lo + n, lo, g.numel());
      Tensor dst = in.slice(0, q * n, (q + 1) * n);
      if (hi - lo < n) dst.fill(0.0);  // past the end
      if (hi > lo) dst.slice(0, 0, hi - lo).copy_from(g.slice(0, lo, hi));
    }
    grp.reduce_scatter(in, out);
    if (then) then->allreduce(out);  // the same range of the other sharding groups
    const int64_t have = std::clamp<int64_t>(mine.numel() - j, 0, n);
    if (have > 0) mine.slice(0, j, j + have).copy_from(out.slice(0, 0, have));
  }
}

void ZeroOptimizer::reduce_gradients(bool summed) {
  if (stage_ == 3) {  // each unit was reduce-scattered into the shard as backward left it
    if (!replicas_ || shard_.numel() == 0) return;
    Tensor g = shard_.grad_tensor();
    if (split_) {  // each replica steps only its range: it needs only that range's sum
      Tensor mine = split_->grad_tensor();
      scatter_sum(g, mine, *replicas_, split_per_, nullptr);
    } else {
      replicas_->allreduce(g);
    }
    return;
  }
  Tensor g = arena_.grad_tensor();
  if (summed) {
    UNILLM_CHECK(buckets_reduce(), "[zero] gradients summed outside stage 1 over one group");
    return;
  }
  if (stage_ == 1) {
    group_.allreduce(g);
    if (replicas_) replicas_->allreduce(g);
    return;
  }
  Tensor mine = shard_.grad_tensor();  // the rest of the arena's gradients are left partial, unused
  scatter_sum(g, mine, group_, per_rank_, replicas_);
}

ParamArena& ZeroOptimizer::reduced() {
  if (stage_ == 1) return arena_;
  return split_ ? *split_ : shard_;
}

double ZeroOptimizer::clip_grad_norm(double max_norm) {
  if (stage_ == 1) return train::clip_grad_norm(arena_, max_norm);
  ParamArena& mine = reduced();  // the ranks' (and split replicas') parts are disjoint: add their squares
  Tensor sq = Tensor::empty({1}, DType::f64);
  sq.data<double>()[0] = mine.numel() > 0 ? ops::sum_squares(mine.grad_tensor()) : 0.0;
  group_.allreduce(sq);
  if (split_) replicas_->allreduce(sq);
  const double norm = std::sqrt(sq.data<double>()[0]);
  if (max_norm > 0 && mine.numel() > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) ops::scale_(mine.grad_tensor(), static_cast<float>(coef));
  }
  return norm;
}

bool ZeroOptimizer::all_ranks(bool mine) {
  Tensor t = Tensor::empty({1}, DType::i32);
  t.data<int32_t>()[0] = mine ? 0 : 1;
  group_.allreduce(t, dist::ReduceOp::max);
  return t.data<int32_t>()[0] == 0;
}

}  // namespace unillm::train
