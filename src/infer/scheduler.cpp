// The scheduling policy: running sequences first, then admissions, under one token budget.
#include "infer/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace unillm::infer {

void Scheduler::preempt(size_t index) {
  std::unique_ptr<Sequence> s = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  blocks_.release(s->table);
  s->computed = 0;  // recompute prompt + generated tokens when readmitted
  ++s->preemptions;
  ++preemptions_;
  waiting_.push_front(std::move(s));
}

bool Scheduler::drop_waiting_blocks(const Sequence* keep) {
  bool dropped = false;
  for (auto& w : waiting_)
    if (w.get() != keep && !w->table.blocks.empty()) {
      blocks_.release(w->table);
      w->computed = 0;  // recomputes its prompt and tokens when admitted
      dropped = true;
    }
  return dropped;
}

std::vector<Scheduled> Scheduler::schedule() {
  std::vector<Scheduled> out;
  int64_t budget = c_.max_num_batched_tokens;
  // Running sequences, oldest first; a sequence short of blocks preempts the youngest.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i].get();
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s->tokens.size()) - s->computed, budget);
    bool ok = blocks_.reserve(s->table, s->computed, s->computed + n, &copies_);
    if (!ok && drop_waiting_blocks(nullptr)) ok = blocks_.reserve(s->table, s->computed, s->computed + n, &copies_);
    while (!ok && running_.size() > i + 1) {
      preempt(running_.size() - 1);
      ok = blocks_.reserve(s->table, s->computed, s->computed + n, &copies_);
    }
    if (!ok) {  // nothing younger left to take blocks from: this one waits
      preempt(i);
      continue;
    }
    out.push_back({s, n});
    budget -= n;
    ++i;
  }
  // Admissions in arrival order (preempted ones are at the front).
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < c_.max_num_seqs) {
    Sequence* s = waiting_.front().get();
    if (s->table.blocks.empty()) s->computed = blocks_.match_prefix(s->table, s->tokens, s->salt);
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s->tokens.size()) - s->computed, budget);
    bool ok = blocks_.reserve(s->table, s->computed, s->computed + n, &copies_);
    if (!ok && drop_waiting_blocks(s)) ok = blocks_.reserve(s->table, s->computed, s->computed + n, &copies_);
    if (!ok) {
      // Gives back the prefix it matched (or a fork's shared blocks: it recomputes them when
      // admitted); retried next step.
      blocks_.release(s->table);
      s->computed = 0;
      break;
    }
    out.push_back({s, n});
    budget -= n;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  return out;
}

std::vector<BlockCopy> Scheduler::take_copies() {
  std::vector<BlockCopy> out;
  out.swap(copies_);
  return out;
}

Sequence* Scheduler::find(int64_t id) {
  for (auto& s : running_)
    if (s->id == id) return s.get();
  for (auto& s : waiting_)
    if (s->id == id) return s.get();
  return nullptr;
}

void Scheduler::remove(int64_t id) {
  auto drop = [&](auto& list) {
    for (auto it = list.begin(); it != list.end(); ++it)
      if ((*it)->id == id) {
        blocks_.release((*it)->table);
        list.erase(it);
        return true;
      }
    return false;
  };
  if (!drop(running_)) drop(waiting_);
}

}  // namespace unillm::infer
