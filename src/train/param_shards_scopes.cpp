// ZeRO-3's scopes: the whole model, the root units, and the unit-by-unit stream a save reads.
#include "core/error.h"
#include "train/param_shards.h"

namespace unillm::train {

ParamShards::Whole::Whole(ParamShards* s, bool trainable_only) : s_(s) {
  if (!s_) return;
  ++s_->scopes_;
  UNILLM_CHECK(!trainable_only || s_->whole_ == 0, "[zero3] a trainable-only Whole scope inside another");
  if (s_->whole_++ > 0) return;
  for (Unit& u : s_->units_)
    if (!u.gathered) s_->gather(u, false, !trainable_only);
}

ParamShards::Whole::~Whole() {
  if (!s_) return;
  --s_->scopes_;
  if (--s_->whole_ > 0) return;
  for (size_t i = 0; i < s_->units_.size(); ++i)
    if (s_->units_[i].gathered && !(i == 0 && s_->frozen_model_ && !s_->by_owner_)) s_->release(s_->units_[i]);
}

ParamShards::Root::Root(ParamShards* s) : s_(s) {
  if (!s_) return;
  ++s_->scopes_;
  if (s_->units_[0].gathered) return;
  s_->gather(s_->units_[0], false);
  if (s_->head_unit_ > 0 && !s_->units_[static_cast<size_t>(s_->head_unit_)].gathered)
    s_->gather(s_->units_[static_cast<size_t>(s_->head_unit_)], false);
  gathered_ = true;
}

ParamShards::Root::~Root() {
  if (!s_) return;
  --s_->scopes_;
  if (!gathered_) return;
  if (s_->units_[0].gathered) s_->release(s_->units_[0]);
  if (s_->head_unit_ > 0 && s_->units_[static_cast<size_t>(s_->head_unit_)].gathered)
    s_->release(s_->units_[static_cast<size_t>(s_->head_unit_)]);
}

ParamShards::Streamed::Streamed(ParamShards* s, bool writer) : s_(s), writer_(writer) {
  if (!s_) return;
  UNILLM_CHECK(s_->whole_ == 0 && !s_->frozen_model_, "[zero3] streamed saving inside a whole-model scope");
  UNILLM_CHECK(writer == (s_->group_.rank() == 0), "[zero3] the streamed writer is not rank 0 of the group");
  ++s_->scopes_;
  if (!s_->units_[0].gathered) {
    s_->gather(s_->units_[0], false);
    root_ = true;
  }
  if (writer_) return;
  Tensor msg = Tensor::empty({1}, DType::i32);
  for (;;) {  // serve the writer's requests
    s_->group_.broadcast(msg, 0);
    const int64_t unit = msg.data<int32_t>()[0];
    if (unit < 0) break;
    hold(unit);
  }
  hold(-1);
}

void ParamShards::Streamed::hold(int64_t unit) {
  if (held_ > 0) s_->release(s_->units_[static_cast<size_t>(held_)]);
  held_ = unit;
  if (unit > 0) s_->gather(s_->units_[static_cast<size_t>(unit)], false);
}

void ParamShards::Streamed::read(const Tensor& t) {
  if (!s_ || !t.defined()) return;
  const Storage* st = t.storage().get();
  for (size_t i = 1; i < s_->units_.size(); ++i) {
    const Unit& u = s_->units_[i];
    if (st != u.train.get() && st != u.frozen.get()) continue;
    if (static_cast<int64_t>(i) == held_ || (s_->by_owner_ && s_->resident(u))) return;  // (an owner's own)
    Tensor msg = Tensor::empty({1}, DType::i32);
    msg.data<int32_t>()[0] = static_cast<int32_t>(i);
    s_->group_.broadcast(msg, 0);
    hold(static_cast<int64_t>(i));
    return;
  }
}

ParamShards::Streamed::~Streamed() {
  if (!s_) return;
  // The writer's end (also when its write failed): the others stop serving.
  if (writer_) {
    try {
      Tensor msg = Tensor::empty({1}, DType::i32);
      msg.data<int32_t>()[0] = -1;
      s_->group_.broadcast(msg, 0);
      hold(-1);
    } catch (...) {  // a collective failing here ends the job through its watchdog
    }
  }
  if (root_ && s_->units_[0].gathered) s_->release(s_->units_[0]);
  --s_->scopes_;
}

}  // namespace unillm::train
