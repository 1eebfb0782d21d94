// ZeRO-3's units: layout, just-in-time gathers and per-unit gradient reduction.
#include "train/param_shards.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "models/causal_lm.h"
#include "ops/elementwise.h"

namespace unillm::train {

namespace {

constexpr int64_t kAlign = 64;  // bytes: each frozen parameter starts on a cache line

std::string mib_text(int64_t b) { return std::to_string(b / 1048576) + "." + std::to_string(b % 1048576 * 10 / 1048576); }

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// The decoder layer of an HF name ("model.layers.3.mlp.up_proj.weight" -> 3), or -1.
int64_t layer_of(const std::string& name) {
  static const std::string kPrefix = "model.layers.";
  if (name.rfind(kPrefix, 0) != 0) return -1;
  size_t end = kPrefix.size();
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == kPrefix.size() || end >= name.size() || name[end] != '.') return -1;
  return std::stoll(name.substr(kPrefix.size(), end - kPrefix.size()));
}

// Rank q's trainable runs of one unit: its piece [q·per, (q+1)·per) of the unit's flat buffer,
// through the unit's parameters to arena ranges, placed from shard_at on.
template <typename Params>
void unit_runs(const Params& params, int64_t per, int64_t numel, int q, int64_t shard_at, std::vector<ArenaRun>& out) {
  const int64_t lo = std::min(numel, per * q), hi = std::min(numel, per * (q + 1));
  for (const auto& p : params) {
    if (!p.trainable) continue;
    const int64_t n = p.tensor->numel();
    const int64_t b = std::max(lo, p.at), e = std::min(hi, p.at + n);
    if (b >= e) continue;
    out.push_back({p.arena_offset + (b - p.at), p.arena_offset + (e - p.at), shard_at + (b - lo)});
  }
}

}  // namespace

std::shared_ptr<Storage> ParamShards::released(int64_t bytes, Device device) {
  return std::make_shared<Storage>(nullptr, static_cast<size_t>(bytes), device, nullptr);
}

ParamShards::ParamShards(const std::vector<nn::Module*>& modules, bool tied_embedding, const ParamArena& arena,
                         dist::ProcessGroup& group, bool keep_whole)
    : group_(group), device_(arena.param_tensor().device()), keep_whole_(keep_whole) {
  layout(modules, tied_embedding, &arena);
}

ParamShards::ParamShards(nn::Module& frozen_model, bool tied_embedding, dist::ProcessGroup& group)
    : group_(group), frozen_model_(true) {
  const auto params = frozen_model.parameters();
  UNILLM_CHECK(!params.empty(), "[zero3] a frozen model without parameters");
  device_ = params.front().tensor->device();
  layout({&frozen_model}, tied_embedding, nullptr);
}

void ParamShards::layout(const std::vector<nn::Module*>& modules, bool tied_embedding, const ParamArena* arena) {
  const int world = group_.size();
  std::set<const Tensor*> seen;
  std::vector<Param> embedding, head;
  for (size_t mi = 0; mi < modules.size(); ++mi) {
    for (const nn::ParamRef& r : modules[mi]->parameters()) {
      if (!seen.insert(r.tensor).second || !r.tensor->defined()) continue;
      if (keep_whole_ && !r.tensor->requires_grad()) continue;  // frozen weights stay whole, no unit's
      const int64_t layer = mi == 0 ? layer_of(r.hf_names.at(0)) : -1;
      // An untied embedding is read only by the lookup: a unit of its own, gathered around it.
      // Tied, it is the lm_head too and stays in the root unit.
      const bool lookup_only = mi == 0 && !tied_embedding && r.hf_names.at(0) == "model.embed_tokens.weight";
      const auto u = static_cast<size_t>(layer + 1);
      if (units_.size() <= u) units_.resize(u + 1);
      Param p;
      p.tensor = r.tensor;
      p.trainable = r.tensor->requires_grad();
      if (p.trainable) {
        UNILLM_CHECK(arena && r.tensor->storage() == arena->param_tensor().storage() && r.tensor->dtype() == DType::f32,
                     "[zero3] trainable parameter ", r.hf_names.at(0), " is not in the arena");
        p.arena_offset = r.tensor->offset();
      }
      // The lm_head (or the tied embedding) of a trained model: a unit of its own, which an
      // eager-gradient loss lets go of as backward starts (before_backward(kHeadLayer)).
      const std::string& name = r.hf_names.at(0);
      const bool is_head = arena && mi == 0 && (name == "lm_head.weight" || (tied_embedding && name == "model.embed_tokens.weight"));
      (lookup_only ? embedding : is_head ? head : units_[u].params).push_back(p);
    }
  }
  if (units_.empty()) units_.resize(1);
  layers_end_ = static_cast<int64_t>(units_.size());
  if (!embedding.empty()) {
    embedding_unit_ = static_cast<int64_t>(units_.size());
    units_.emplace_back();
    units_.back().params = std::move(embedding);
  }
  if (!head.empty()) {
    head_unit_ = static_cast<int64_t>(units_.size());
    units_.emplace_back();
    units_.back().params = std::move(head);
  }
  int64_t shard_at = 0;
  for (Unit& u : units_) {
    for (Param& p : u.params) {
      if (p.trainable) {
        p.at = u.train_numel;
        u.train_numel += p.tensor->numel();
      } else {
        p.at = round_up(u.frozen_bytes, kAlign);
        u.frozen_bytes = p.at + static_cast<int64_t>(p.tensor->nbytes());
      }
    }
    u.train_per = (u.train_numel + world - 1) / world;
    u.frozen_per = round_up(u.frozen_bytes, 4 * world) / 4 / world;
    u.shard_at = shard_at;
    shard_at += u.train_per;
  }
}

ZeroPieces ParamShards::pieces() const {
  ZeroPieces z;
  z.runs_by_rank.resize(static_cast<size_t>(group_.size()));
  if (by_owner_) {  // each unit whole in its owner's shard
    std::vector<int64_t> total(static_cast<size_t>(group_.size()), 0);
    for (const Unit& u : units_) {
      unit_runs(u.params, u.train_numel, u.train_numel, 0, u.shard_at, z.runs_by_rank[static_cast<size_t>(u.owner)]);
      total[static_cast<size_t>(u.owner)] += u.train_numel;
    }
    z.per_rank = *std::max_element(total.begin(), total.end());
    return z;
  }
  for (const Unit& u : units_) {
    z.per_rank += u.train_per;
    for (int q = 0; q < group_.size(); ++q)
      unit_runs(u.params, u.train_per, u.train_numel, q, u.shard_at, z.runs_by_rank[static_cast<size_t>(q)]);
  }
  return z;
}

void ParamShards::shard(ParamArena& arena, ParamArena& shard) {
  UNILLM_CHECK(!sharded_ && !frozen_model_, "[zero3] sharded twice");
  shard_ = &shard;
  if (by_owner_) return shard_by_owner(arena, shard);
  if (keep_whole_) {  // the parameters stay in the arena; their gradients go to the units' buffers
    arena_ = &arena;
    for (Unit& u : units_) {
      u.grad = released(u.train_per * group_.size() * 4, device_);
      for (const Param& p : u.params) p.tensor->set_grad(Tensor(u.grad, p.tensor->shape(), DType::f32, p.at));
    }
    shard.param_tensor().storage()->release();  // a copy of the arena's elements: made for each step
    sharded_ = true;
    return;
  }
  for (Unit& u : units_) keep_pieces(u);
  arena.release_storage();
  sharded_ = true;
}

void ParamShards::shard_frozen() {
  UNILLM_CHECK(!sharded_ && frozen_model_, "[zero3] shard_frozen of a model with an arena");
  if (by_owner_) return shard_frozen_by_owner();
  for (Unit& u : units_) keep_pieces(u);
  sharded_ = true;
  gather(units_[0], false);  // for good
}

int64_t ParamShards::train_whole(const Unit& u) const { return by_owner_ ? u.train_numel : u.train_per * group_.size(); }

int64_t ParamShards::frozen_words(const Unit& u) const { return by_owner_ ? u.frozen_per : u.frozen_per * group_.size(); }

void ParamShards::make_storages(Unit& u) {
  u.train = released(train_whole(u) * 4, device_);
  u.grad = released(train_whole(u) * 4, device_);
  u.frozen = released(frozen_words(u) * 4, device_);
  if (!by_owner_) u.frozen_piece = Tensor::zeros({u.frozen_per}, DType::i32, device_);
}

void ParamShards::repoint(Unit& u) {
  for (const Param& p : u.params) {
    Tensor& t = *p.tensor;
    if (p.trainable) {
      Tensor v(u.train, t.shape(), DType::f32, p.at);
      v.set_requires_grad(true);
      v.set_grad(Tensor(u.grad, t.shape(), DType::f32, p.at));
      t = v;
    } else {
      t = Tensor(u.frozen, t.shape(), t.dtype(), p.at / static_cast<int64_t>(dtype_size(t.dtype())));
    }
  }
}

void ParamShards::keep_pieces(Unit& u) {
  const int world = group_.size(), rank = group_.rank();
  make_storages(u);
  // This rank's bytes of the frozen buffer, packed from the whole parameters once.
  if (u.frozen_per > 0) {
    Tensor whole = Tensor::zeros({u.frozen_per * world}, DType::i32, device_);
    for (const Param& p : u.params) {
      if (p.trainable) continue;
      Tensor dst(whole.storage(), p.tensor->shape(), p.tensor->dtype(), p.at / static_cast<int64_t>(dtype_size(p.tensor->dtype())));
      dst.copy_from(*p.tensor);
    }
    u.frozen_piece.copy_from(whole.slice(0, u.frozen_per * rank, u.frozen_per * (rank + 1)));
  }
  repoint(u);  // the whole parameters go (a frozen model's one unit at a time)
}

void ParamShards::begin_frozen_load() {
  UNILLM_CHECK(!sharded_ && frozen_model_, "[zero3] a frozen load of a model with an arena");
  start_load();
}

void ParamShards::begin_load(ParamArena& arena, ParamArena& shard) {
  UNILLM_CHECK(!sharded_ && !frozen_model_, "[zero3] a policy load of a frozen model, or twice");
  shard_ = &shard;
  std::map<int64_t, Tensor> initial;
  for (ParamArena::Initial& v : arena.take_initial_values()) initial.emplace(v.offset, std::move(v.values));
  for (Unit& u : units_)
    for (Param& p : u.params)
      if (p.trainable) {
        if (auto it = initial.find(p.arena_offset); it != initial.end()) p.initial = it->second;
      }
  start_load();
}

void ParamShards::start_load() {
  for (Unit& u : units_) {
    for (Param& p : u.params)  // a frozen parameter built with memory (a norm): its value kept
      if (!p.trainable && p.tensor->storage()->holds_memory()) p.initial = *p.tensor;
    make_storages(u);
    repoint(u);
  }
  loaded_.assign(units_.size(), false);
  loading_ = -1;
  fill_for_load(units_[0]);  // whole until the end: filled as its parameters arrive
}

void ParamShards::fill_for_load(Unit& u) {
  if (u.train_per > 0) u.train->refill();
  if (u.frozen_per > 0) u.frozen->refill();
  if (u.train_per > 0) Tensor(u.train, {train_whole(u)}, DType::f32).fill(0.0);
  if (u.frozen_per > 0) Tensor(u.frozen, {frozen_words(u)}, DType::i32).fill(0.0);  // the padding
  for (Param& p : u.params) {
    if (!p.initial.defined()) continue;
    Tensor(*p.tensor).copy_from(p.initial);  // the view of the unit's storage
    p.initial = Tensor();
  }
  u.gathered = true;
}

int64_t ParamShards::unit_of(const Tensor& t) const {
  const Storage* st = t.storage().get();
  for (size_t i = 0; i < units_.size(); ++i)
    if (st == units_[i].train.get() || st == units_[i].frozen.get()) return static_cast<int64_t>(i);
  return -1;
}

void ParamShards::cut_to_piece(Unit& u) {
  if (by_owner_) return keep_owned(u);
  const int64_t rank = group_.rank(), world = group_.size();
  if (u.frozen_per > 0)
    u.frozen_piece.copy_from(Tensor(u.frozen, {u.frozen_per * world}, DType::i32)
                                 .slice(0, u.frozen_per * rank, u.frozen_per * (rank + 1)));
  if (u.train_per > 0 && shard_)  // the same cut as the shard's runs (unit_runs)
    shard_->param_tensor()
        .slice(0, u.shard_at, u.shard_at + u.train_per)
        .copy_from(Tensor(u.train, {u.train_per * world}, DType::f32).slice(0, u.train_per * rank, u.train_per * (rank + 1)));
}

void ParamShards::finish_unit(int64_t i) {
  Unit& u = units_[static_cast<size_t>(i)];
  cut_to_piece(u);
  release(u);
  loaded_[static_cast<size_t>(i)] = true;
}

void ParamShards::before_copy(const Tensor& param) {
  const int64_t i = unit_of(param);
  if (i <= 0 || i == loading_) return;  // the root unit is whole throughout
  UNILLM_CHECK(!loaded_[static_cast<size_t>(i)], "[zero3] unit ", i, " read again after the next one began");
  if (loading_ > 0) finish_unit(loading_);
  fill_for_load(units_[static_cast<size_t>(i)]);
  loading_ = i;
}

void ParamShards::loaded() {
  if (loading_ > 0) finish_unit(loading_);
  for (size_t i = 1; i < units_.size(); ++i) {
    if (loaded_[i]) continue;
    // A unit no checkpoint tensor belongs to holds its initial values alone.
    fill_for_load(units_[i]);
    finish_unit(static_cast<int64_t>(i));
  }
  cut_to_piece(units_[0]);
  // A frozen model keeps its root unit gathered (by owner: on its stages, as every unit).
  if (!frozen_model_ || by_owner_) release(units_[0]);
  loading_ = -1;
  sharded_ = true;
}

void ParamShards::before_step() {
  if (!keep_whole_) return;
  Tensor shard = shard_->param_tensor();
  shard.storage()->refill();
  shard.fill(0.0);  // the padding
  const Tensor& arena = arena_->param_tensor();
  std::vector<ArenaRun> runs;
  for (const Unit& u : units_) unit_runs(u.params, u.train_per, u.train_numel, group_.rank(), u.shard_at, runs);
  for (const ArenaRun& r : runs) shard.slice(0, r.at, r.at + (r.hi - r.lo)).copy_from(arena.slice(0, r.lo, r.hi));
}

void ParamShards::after_step() {
  send_borrowed();
  if (!keep_whole_) return;
  autograd::NoGradGuard no_grad;
  for (Unit& u : units_) {  // every rank's stepped pieces, a unit at a time, into the whole parameters
    if (u.train_per == 0) continue;
    Tensor whole = Tensor::empty({u.train_per * group_.size()}, DType::f32, device_);
    group_.allgather(shard_->param_tensor().slice(0, u.shard_at, u.shard_at + u.train_per), whole);
    for (const Param& p : u.params)
      Tensor(*p.tensor).copy_from(whole.slice(0, p.at, p.at + p.tensor->numel()).view(p.tensor->shape()));
  }
  shard_->param_tensor().storage()->release();
}

void ParamShards::gather(Unit& u, bool grads, bool frozen) {
  if (by_owner_) return gather_from_owner(u, frozen);  // (no gradients: training gathers nothing)
  if (keep_whole_) {  // the parameters are whole already: only the gradient buffer comes
    if (grads && u.train_per > 0) {
      u.grad->refill();
      Tensor(u.grad, {u.train_per * group_.size()}, DType::f32).fill(0.0);
    }
    u.gathered = true;
    u.with_grads = grads && u.train_per > 0;
    return;
  }
  if (u.train_per > 0) {
    u.train->refill();
    Tensor out(u.train, {u.train_per * group_.size()}, DType::f32);
    group_.allgather(shard_->param_tensor().slice(0, u.shard_at, u.shard_at + u.train_per), out);
    if (grads) {
      u.grad->refill();
      Tensor(u.grad, {u.train_per * group_.size()}, DType::f32).fill(0.0);
    }
  }
  if (u.frozen_per > 0 && frozen) {
    u.frozen->refill();
    Tensor out(u.frozen, {u.frozen_per * group_.size()}, DType::i32);
    group_.allgather(u.frozen_piece, out);
  }
  u.gathered = true;
  u.with_grads = grads && u.train_per > 0;
}

void ParamShards::release(Unit& u) {
  if (by_owner_ ? !resident(u) : !keep_whole_) {  // keep_whole: the parameters stay (the gradient buffer goes in reduce())
    u.train->release();
    u.frozen->release();
  }
  u.gathered = false;
}

void ParamShards::reduce(Unit& u) {
  if (!u.with_grads) return;
  autograd::NoGradGuard no_grad;
  Tensor out = Tensor::empty({u.train_per}, DType::f32, device_);
  Tensor whole(u.grad, {u.train_per * group_.size()}, DType::f32);
  if (stand_in_) whole.fill(0.0);
  for (const Param& p : u.params)
    if (p.drop_grad && !stand_in_) Tensor(u.grad, {p.tensor->numel()}, DType::f32, p.at).fill(0.0);
  group_.reduce_scatter(whole, out);
  Tensor mine = shard_->grad_tensor().slice(0, u.shard_at, u.shard_at + u.train_per);
  mine.copy_from(ops::add(mine, out));  // += : micro-batches accumulate
  u.grad->release();
  u.with_grads = false;
}

ParamShards::Unit* ParamShards::layer_unit(int64_t layer) {
  if (layer == -1) return embedding_unit_ > 0 ? &units_[static_cast<size_t>(embedding_unit_)] : nullptr;
  const auto i = static_cast<size_t>(layer + 1);
  UNILLM_CHECK(layer >= 0 && static_cast<int64_t>(i) < layers_end_,
               "[zero3] layer ", layer, " has no unit");
  return &units_[i];
}

void ParamShards::before_forward(int64_t layer) {
  // Owners: a stage's training forwards run only what it holds; a whole-model scope's forwards
  // run every unit on every rank, gathering from the owners.
  if (layer == models::CausalLM::kHeadLayer || (by_owner_ && scopes_ == 0)) return;
  Unit* p = layer_unit(layer);
  if (!p) return;
  Unit& u = *p;
  if (whole_ > 0 || u.gathered) return;
  gather(u, false);
  u.forward = true;
}

void ParamShards::after_forward(int64_t layer) {
  if (by_owner_ && scopes_ == 0) return;
  if (layer == models::CausalLM::kHeadLayer) {
    // The loss will read the head in backward after all: its gradient buffer now, weights kept.
    if (!head_eager_) return;
    Unit& h = units_[static_cast<size_t>(head_unit_)];
    h.grad->refill();
    Tensor(h.grad, {h.train_per * group_.size()}, DType::f32).fill(0.0);
    h.with_grads = true;
    head_eager_ = false;
    return;
  }
  Unit* p = layer_unit(layer);
  if (!p || !p->forward) return;
  Unit& u = *p;
  u.forward = false;
  release(u);
}

void ParamShards::before_backward(int64_t layer) {
  if (by_owner_) return;  // the owner's gradients are the shard's
  if (layer == models::CausalLM::kHeadLayer) {
    // Backward starts at an eager-gradient loss, which holds its own dW and reads no weight:
    // the head's weights go and its gradient buffer comes (not both at once).
    if (!head_eager_) return;
    Unit& h = units_[static_cast<size_t>(head_unit_)];
    if (h.with_grads) return;
    release(h);
    h.grad->refill();
    Tensor(h.grad, {h.train_per * group_.size()}, DType::f32).fill(0.0);
    h.with_grads = true;
    return;
  }
  Unit* p = layer_unit(layer);
  if (!p) return;
  Unit& u = *p;
  if (u.open++ > 0) return;
  if (u.gathered) release(u);  // a Whole scope's copy: gather again with a gradient buffer
  gather(u, true);
}

void ParamShards::after_backward(int64_t layer) {
  if (by_owner_) return;
  Unit* p = layer_unit(layer);
  if (!p) return;
  Unit& u = *p;
  if (u.open == 0 || --u.open > 0) return;
  reduce(u);
  release(u);
}

void ParamShards::begin_micro(bool stand_in, bool eager_head, bool head) {
  if (by_owner_) return;
  stand_in_ = stand_in;
  Unit& root = units_[0];
  if (root.gathered) release(root);
  gather(root, true);
  if (head_unit_ > 0 && head) {
    Unit& h = units_[static_cast<size_t>(head_unit_)];
    if (h.gathered) release(h);
    head_eager_ = eager_head && h.train_per > 0;
    gather(h, !head_eager_);  // eager: its gradient buffer comes as backward starts
  }
}

void ParamShards::end_micro() {
  if (by_owner_) return;
  for (size_t i = units_.size(); i-- > 1;) {
    Unit& u = units_[i];
    if (static_cast<int64_t>(i) == head_unit_) continue;  // reduced with the root, below
    if (u.open == 0) continue;
    u.open = 0;
    reduce(u);
    release(u);
  }
  // (An eager head has swapped its weights for its gradient buffer: gathered no more, with grads.)
  if (head_unit_ > 0 && (units_[static_cast<size_t>(head_unit_)].gathered ||
                         units_[static_cast<size_t>(head_unit_)].with_grads)) {
    Unit& h = units_[static_cast<size_t>(head_unit_)];
    reduce(h);
    release(h);
    head_eager_ = false;
  }
  reduce(units_[0]);
  release(units_[0]);
  stand_in_ = false;
}

void ParamShards::drop_gradients_of(const std::vector<const Tensor*>& params) {
  const std::set<const Tensor*> drop(params.begin(), params.end());
  for (Unit& u : units_)
    for (Param& p : u.params)
      if (p.trainable && drop.count(p.tensor)) p.drop_grad = true;
}

bool ParamShards::all_finite() {
  if (keep_whole_) return arena_->all_finite();  // every rank holds the same whole parameters
  Tensor bad = Tensor::empty({1}, DType::i32);
  bad.data<int32_t>()[0] = shard_->all_finite() ? 0 : 1;  // this process's pieces, then every process's
  group_.allreduce(bad, dist::ReduceOp::max);
  return bad.data<int32_t>()[0] == 0;
}

int64_t ParamShards::kept_bytes() const {
  int64_t n = 0;
  for (const Unit& u : units_)
    if (!by_owner_ || resident(u)) n += u.train_per * 4 + u.frozen_per * 4;
  return n;
}

std::string ParamShards::describe_gradients() const {
  // (kept_bytes() counts the trainable pieces only here: keep_whole's units hold no frozen bytes.)
  int64_t whole = 0, largest = 0;
  for (size_t i = 0; i < units_.size(); ++i) {
    whole += units_[i].train_numel * 4;
    if (i > 0) largest = std::max(largest, units_[i].train_numel * 4);
  }
  return UNILLM_MSG(layers_end_ - 1, " layer units", embedding_unit_ > 0 ? ", an embedding unit" : "",
                    head_unit_ > 0 ? ", a head unit" : "", " and a root unit: this process keeps ",
                    mib_text(kept_bytes()), " of ", mib_text(whole), " MiB of gradients and fills one unit's whole "
                    "gradients (at most ", mib_text(largest), " MiB, the root unit's ", mib_text(units_[0].train_numel * 4),
                    ") while backward is in it");
}

std::string ParamShards::describe() const {
  int64_t whole = 0, largest = 0;
  for (size_t i = 0; i < units_.size(); ++i) {
    const int64_t b = units_[i].train_numel * 4 + units_[i].frozen_bytes;
    whole += b;
    if (i > 0) largest = std::max(largest, b);
  }
  const int64_t layers = layers_end_ - 1;
  const auto mib = mib_text;
  if (by_owner_) {
    int64_t owned = 0;
    for (size_t i = 1; i < static_cast<size_t>(layers_end_); ++i) owned += units_[i].owner == group_.rank();
    return UNILLM_MSG("this stage holds ", owned, " of the ", layers, " layers",
                      units_[0].owner == group_.rank() ? ", the final norm and the head" : "",
                      embedding_unit_ > 0 && units_[static_cast<size_t>(embedding_unit_)].owner == group_.rank()
                          ? ", the embedding" : "",
                      borrowed_by_first_ && group_.rank() == 0 ? ", a copy of the tied embedding" : "", ": ",
                      mib(kept_bytes()), " of ", mib(whole), " MiB of parameters; evaluation and saving have each "
                      "other unit (at most ", mib(largest), " MiB) broadcast by its stage");
  }
  return UNILLM_MSG(layers, " layer units", embedding_unit_ > 0 ? ", an embedding unit" : "",
                    head_unit_ > 0 ? ", a head unit" : "", " and a root unit (",
                    mib(units_[0].train_numel * 4 + units_[0].frozen_bytes),
                    " MiB); this process keeps ", mib(kept_bytes()), " of ", mib(whole),
                    " MiB of parameters and gathers a unit (at most ", mib(largest), " MiB) just in time");
}

}  // namespace unillm::train
