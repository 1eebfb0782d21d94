// The serving engine's scheduling policy (vLLM's): per step, under a cap on sequences and a
// token budget, the running sequences first (a decode token each, or the next chunk of an
// unfinished prompt), then waiting ones in arrival order with their prompt chunked to what is
// left of the budget. When a running sequence needs a block and none is available, the most
// recently admitted running sequence is preempted: its blocks are released and it goes back to
// the front of the queue, to recompute its prompt and generated tokens when readmitted. Blocks
// that waiting forks hold (docs/ARCHITECTURE.md, "Forks") are given up before any preemption.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "infer/block_manager.h"
#include "infer/request.h"

namespace unillm::infer {

class GrammarMatcher;  // infer/grammar.h

struct Sequence {
  int64_t id = 0;
  Request req;
  std::vector<int32_t> tokens;  // prompt, then the generated tokens
  int64_t prompt_len = 0;
  int64_t computed = 0;  // tokens whose K/V are in the cache
  BlockTable table;
  Rng rng;
  uint64_t salt = 0;  // prefix-cache salt: the adapter
  int64_t preemptions = 0;
  std::shared_ptr<GrammarMatcher> matcher;  // the structured-output state (req.grammar)
  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
};

struct SchedulerConfig {
  int64_t max_num_seqs = 32;
  int64_t max_num_batched_tokens = 512;
};

// One sequence's share of a step: tokens [seq->computed, seq->computed + n).
struct Scheduled {
  Sequence* seq;
  int64_t n;
  bool samples() const { return seq->computed + n == static_cast<int64_t>(seq->tokens.size()); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& c, BlockManager& blocks) : c_(c), blocks_(blocks) {}
  void add(std::unique_ptr<Sequence> s) { waiting_.push_back(std::move(s)); }
  // Queues s ahead of every waiting sequence (a fork, which already holds its parent's blocks).
  void add_first(std::unique_ptr<Sequence> s) { waiting_.push_front(std::move(s)); }
  // The sequences of the next step (blocks reserved for their tokens); empty when idle.
  std::vector<Scheduled> schedule();
  // The copy-on-write block copies the schedule() calls so far made, in order: the caller copies
  // each block's K/V before the step's forward.
  std::vector<BlockCopy> take_copies();
  // Removes a finished or aborted sequence (running or waiting), releasing its blocks.
  void remove(int64_t id);
  Sequence* find(int64_t id);
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t preemptions() const { return preemptions_; }

 private:
  void preempt(size_t index);
  // Releases the blocks that waiting sequences other than keep hold (forks hold their parent's
  // blocks until admitted): the first thing given up when blocks run short. false when none held any.
  bool drop_waiting_blocks(const Sequence* keep);

  SchedulerConfig c_;
  BlockManager& blocks_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  int64_t preemptions_ = 0;
  std::vector<BlockCopy> copies_;
};

}  // namespace unillm::infer
