// ParamShards by owner (train/param_shards.h): pipeline stages holding only their own layers.
#include <algorithm>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "ops/elementwise.h"
#include "train/param_shards.h"

namespace unillm::train {

namespace {
constexpr int kBorrowedGradTag = 7310, kBorrowedParamTag = 7311;  // nothing else is in flight at a step
}  // namespace

ParamShards::ParamShards(const std::vector<nn::Module*>& modules, bool tied_embedding, const ParamArena& arena,
                         dist::ProcessGroup& group, const Owners& owners)
    : group_(group), device_(arena.param_tensor().device()), by_owner_(true) {
  layout(modules, tied_embedding, &arena);
  assign_owners(owners, tied_embedding);
}

ParamShards::ParamShards(nn::Module& frozen_model, bool tied_embedding, dist::ProcessGroup& group,
                         const Owners& owners)
    : ParamShards(frozen_model, tied_embedding, group) {
  by_owner_ = true;
  assign_owners(owners, tied_embedding);
  // A frozen model has no head unit: its tied embedding is in the root unit, which the first
  // stage's lookup reads too.
  units_[0].borrowed = tied_embedding && group_.rank() == 0 && group_.size() > 1;
  borrowed_by_first_ = tied_embedding && group_.size() > 1;  // (said in describe(); nothing trains)
}

void ParamShards::shard_frozen_by_owner() {
  for (Unit& u : units_) {
    make_storages(u);
    if (resident(u) && u.frozen_per > 0) {  // the frozen bytes stay, packed once
      u.frozen->refill();
      for (const Param& p : u.params)
        Tensor(u.frozen, p.tensor->shape(), p.tensor->dtype(), p.at / static_cast<int64_t>(dtype_size(p.tensor->dtype())))
            .copy_from(*p.tensor);
    }
    repoint(u);  // the whole parameters go; a foreign unit holds no memory
  }
  sharded_ = true;
}

void ParamShards::assign_owners(const Owners& owners, bool tied_embedding) {
  const int last = group_.size() - 1;
  UNILLM_CHECK(static_cast<int64_t>(owners.layer_owner.size()) >= layers_end_ - 1,
               "[pipeline] ", owners.layer_owner.size(), " layer owners for ", layers_end_ - 1, " layer units");
  std::vector<int64_t> at(static_cast<size_t>(group_.size()), 0);  // each rank's shard so far
  for (size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    const auto k = static_cast<int64_t>(i);
    u.owner = k == 0 || k == head_unit_ ? last
              : k == embedding_unit_    ? 0
                                        : owners.layer_owner.at(i - 1);
    u.borrowed = k == head_unit_ && tied_embedding && group_.rank() == 0 && last != 0;
    if (k == head_unit_ && tied_embedding && last != 0) borrowed_by_first_ = true;
    u.train_per = u.train_numel;  // the owner's piece is the whole unit
    u.frozen_per = (u.frozen_bytes + 3) / 4;
    u.shard_at = at[static_cast<size_t>(u.owner)];
    at[static_cast<size_t>(u.owner)] += u.train_numel;
  }
}

Tensor ParamShards::owned_train(const Unit& u) const {
  return shard_->param_tensor().slice(0, u.shard_at, u.shard_at + u.train_numel);
}

void ParamShards::shard_by_owner(ParamArena& arena, ParamArena& shard) {
  const int rank = group_.rank();
  shard_ = &shard;
  for (Unit& u : units_) {
    make_storages(u);
    const bool owner = u.owner == rank;
    if (resident(u)) {  // the frozen bytes stay, packed once
      u.frozen->refill();
      for (const Param& p : u.params)
        if (!p.trainable)
          Tensor(u.frozen, p.tensor->shape(), p.tensor->dtype(), p.at / static_cast<int64_t>(dtype_size(p.tensor->dtype())))
              .copy_from(*p.tensor);
    }
    if (u.borrowed && u.train_numel > 0) {  // the first stage's copy of the tied embedding
      u.train->refill();
      u.grad->refill();
      Tensor(u.grad, {u.train_numel}, DType::f32).fill(0.0);
      for (const Param& p : u.params)
        if (p.trainable) Tensor(u.train, p.tensor->shape(), DType::f32, p.at).copy_from(*p.tensor);
    }
    repoint(u);  // the unit's own storages; the owner's trainable parameters then the shard's
    if (owner) point_at_shard(u);
  }
  arena.release_storage();
  sharded_ = true;
}

void ParamShards::point_at_shard(Unit& u) {
  // The owner's parameters are the shard's elements (the optimizer steps them in place) and their
  // gradients its gradients.
  const Tensor& sp = shard_->param_tensor();
  const Tensor& sg = shard_->grad_tensor();
  for (const Param& p : u.params) {
    if (!p.trainable) continue;
    Tensor& t = *p.tensor;
    Tensor v(sp.storage(), t.shape(), DType::f32, sp.offset() + u.shard_at + p.at);
    v.set_requires_grad(true);
    v.set_grad(Tensor(sg.storage(), t.shape(), DType::f32, sg.offset() + u.shard_at + p.at));
    t = v;
  }
}

void ParamShards::keep_owned(Unit& u) {
  if (u.owner == group_.rank() && u.train_numel > 0) {
    owned_train(u).copy_from(Tensor(u.train, {u.train_numel}, DType::f32));
    point_at_shard(u);
    u.train->release();
  } else if (u.borrowed && u.train_numel > 0) {
    u.grad->refill();
    Tensor(u.grad, {u.train_numel}, DType::f32).fill(0.0);
  }
}

void ParamShards::gather_from_owner(Unit& u, bool frozen) {
  // Every rank of the group takes part (a whole-model scope): the owner sends what it holds.
  const bool owner = u.owner == group_.rank();
  if (u.train_numel > 0) {
    if (!resident(u)) u.train->refill();
    Tensor t = owner ? owned_train(u) : Tensor(u.train, {u.train_numel}, DType::f32);
    group_.broadcast(t, u.owner);
  }
  if (u.frozen_per > 0 && frozen) {
    if (!resident(u)) u.frozen->refill();
    Tensor t(u.frozen, {u.frozen_per}, DType::i32);
    group_.broadcast(t, u.owner);
  }
  u.gathered = true;
}

void ParamShards::before_reduce() {
  if (!by_owner_) return;
  // Tensor parallelism's replicated parameters: only tensor-parallel rank 0's gradient counts.
  for (Unit& u : units_)
    if (resident(u))
      for (const Param& p : u.params)
        if (p.drop_grad) p.tensor->grad().fill(0.0);
  if (head_unit_ < 0) return;
  Unit& h = units_[static_cast<size_t>(head_unit_)];
  const int last = group_.size() - 1;
  if (h.train_numel == 0 || !borrowed_by_first_ || !(h.borrowed || h.owner == group_.rank())) return;
  autograd::NoGradGuard no_grad;
  Tensor g(h.grad, {h.train_numel}, DType::f32);
  if (h.borrowed) {
    group_.send(g, last, kBorrowedGradTag);
    g.fill(0.0);
    return;
  }
  Tensor in = Tensor::empty({h.train_numel}, DType::f32, device_);
  group_.recv(in, 0, kBorrowedGradTag);
  Tensor mine = shard_->grad_tensor().slice(0, h.shard_at, h.shard_at + h.train_numel);
  mine.copy_from(ops::add(mine, in));
}

void ParamShards::send_borrowed() {
  if (!by_owner_ || head_unit_ < 0) return;
  Unit& h = units_[static_cast<size_t>(head_unit_)];
  if (h.train_numel == 0 || !borrowed_by_first_) return;
  if (h.borrowed) {
    Tensor t(h.train, {h.train_numel}, DType::f32);
    group_.recv(t, h.owner, kBorrowedParamTag);
  } else if (h.owner == group_.rank()) {
    group_.send(owned_train(h), 0, kBorrowedParamTag);
  }
}

}  // namespace unillm::train
