// The serving engine (docs/ARCHITECTURE.md, "Serving engine"): requests enter a queue, and each
// step() runs ONE forward over every scheduled token of every running sequence (a ragged batch
// over the paged KV cache, the lm_head only on the rows that sample), then samples each of those
// sequences with its own RNG. Not thread-safe: one thread owns the engine and calls step().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "infer/block_manager.h"
#include "infer/request.h"
#include "infer/scheduler.h"
#include "models/causal_lm.h"

namespace unillm::infer {

class TokenTrie;  // infer/grammar.h

struct EngineConfig {
  int64_t block_size = 16;
  int64_t num_blocks = 0;  // KV blocks of the whole cache (every sequence together)
  bool prefix_caching = true;
  // The KV blocks' dtype: f32, or bf16/f16 (half the bytes the decode attention reads; the
  // queries and the softmax stay f32). Part of the prefix-cache salt.
  DType kv_dtype = DType::f32;
  SchedulerConfig scheduler;
};

struct EngineStats {
  int64_t steps = 0, prompt_tokens = 0, computed_tokens = 0, generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t block_copies = 0;  // copy-on-write copies (forked choices writing a shared block)
};

class Engine {
 public:
  Engine(models::CausalLM& model, const EngineConfig& config);
  // Queues a request; returns its id. ConfigError when it can never fit the cache (prompt +
  // max_tokens beyond num_blocks · block_size) or names an adapter the model lacks.
  int64_t add_request(Request r);
  // Queues the choices of one prompt (n > 1): the first computes the prompt, and when its prefill
  // ends the others fork from it, sharing its blocks (copy-on-write) and sampling their first
  // token from the same logits with their own RNG. Choices that differ in prompt or adapter are
  // queued on their own. Returns their ids in order; nothing is queued when one is refused.
  std::vector<int64_t> add_requests(std::vector<Request> choices);
  // add_request's checks alone; reads only constant facts (the config, the model's vocabulary
  // and adapters), so another thread may call it while this one steps.
  void validate(const Request& r) const;
  // The bytes each token id adds to the output text (io::Tokenizer::token_bytes): what
  // structured output (Request::grammar) matches tokens by. Set once, before such requests.
  void set_vocabulary(std::vector<std::string> token_bytes);
  // Ends a request now (client gone, a stop string matched): its blocks are released at once and
  // the next step() reports it with `reason` (abort or stop).
  void finish(int64_t id, FinishReason reason = FinishReason::abort);
  // (Pending forks need their parent, which is running or waiting.)
  bool has_work() const { return sched_.num_running() + sched_.num_waiting() > 0 || !pending_.empty(); }
  // One scheduling step and its forward; the tokens sampled (and requests ended) in it.
  std::vector<StepOutput> step();

  int64_t num_running() const { return sched_.num_running(); }
  int64_t num_waiting() const { return sched_.num_waiting(); }
  const BlockManager& blocks() const { return blocks_; }
  const EngineStats& stats() const { return stats_; }
  const EngineConfig& config() const { return c_; }

 private:
  std::unique_ptr<Sequence> make_sequence(Request r);
  models::ForwardBatch build_batch(const std::vector<Scheduled>& work) const;
  void copy_blocks(const std::vector<BlockCopy>& copies);
  // Starts the pending forks of s (its prefill just ended, its first token sampled from logits).
  void start_forks(Sequence& s, const float* logits, int64_t vocab, std::vector<StepOutput>& out);
  void orphan_forks(int64_t parent);  // queues the pending forks of a sequence that ended
  StepOutput sample(Sequence& s, const float* logits, int64_t vocab);

  models::CausalLM& model_;
  EngineConfig c_;
  std::vector<std::string> token_bytes_;
  std::shared_ptr<const TokenTrie> trie_;
  models::KvCaches caches_;
  BlockManager blocks_;
  Scheduler sched_;
  std::vector<StepOutput> pending_;  // ends reported by the next step()
  // Choices waiting for their parent's prefill, by parent id (they hold no blocks yet).
  std::map<int64_t, std::vector<std::unique_ptr<Sequence>>> forks_;
  int64_t next_id_ = 1;
  EngineStats stats_;
};

// Requests and the cache they need: blocks for `tokens` tokens of one sequence.
int64_t blocks_for(int64_t tokens, int64_t block_size);

}  // namespace unillm::infer
