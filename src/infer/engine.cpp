// One engine step: schedule, build the ragged batch, one forward, sample the sampling rows.
#include "infer/engine.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/thread_team.h"
#include "infer/grammar.h"
#include "ops/attention.h"
#include "ops/gather.h"

namespace unillm::infer {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::length: return "length";
    case FinishReason::stop: return "stop";
    case FinishReason::abort: return "abort";
    default: return "";
  }
}

int64_t blocks_for(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }

namespace {
constexpr int64_t kTeamMaxRows = 4;  // GEMV-sized steps run inside one held thread team
}  // namespace

Engine::Engine(models::CausalLM& model, const EngineConfig& c)
    : model_(model), c_(c),
      caches_(models::KvCaches::allocate(model.config(), c.num_blocks, c.block_size, c.kv_dtype,
                                         model.device())),
      blocks_(c.num_blocks, c.block_size, c.prefix_caching), sched_(c.scheduler, blocks_) {
  UNILLM_CHECK(c.scheduler.max_num_seqs > 0 && c.scheduler.max_num_batched_tokens > 0,
               "[engine] max_num_seqs and max_num_batched_tokens must be positive");
  if (c.kv_dtype != DType::f32 && c.kv_dtype != DType::bf16 && c.kv_dtype != DType::f16)
    UNILLM_THROW(ConfigError, "[engine] the KV cache dtype must be f32, bf16 or f16, got ", dtype_name(c.kv_dtype));
}

void Engine::validate(const Request& r) const {
  if (r.prompt.empty()) UNILLM_THROW(ConfigError, "[engine] the prompt is empty");
  if (r.max_tokens < 1) UNILLM_THROW(ConfigError, "[engine] max_tokens must be at least 1, got ", r.max_tokens);
  const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  const int64_t need = blocks_for(total, c_.block_size);
  if (need > c_.num_blocks)
    UNILLM_THROW(ConfigError, "[engine] a request of ", r.prompt.size(), " prompt tokens and up to ",
                 r.max_tokens, " new ones needs ", need, " KV blocks of ", c_.block_size,
                 " tokens; the cache has ", c_.num_blocks, " (raise --num-kv-blocks or --kv-cache-memory, or lower max_tokens)");
  const int64_t vocab = model_.config().vocab_size;
  for (int32_t t : r.prompt)
    if (t < 0 || t >= vocab) UNILLM_THROW(ConfigError, "[engine] prompt token id ", t, " is outside the vocabulary (", vocab, ")");
  if (r.grammar && !trie_)
    UNILLM_THROW(ConfigError, "[engine] structured output needs the tokenizer's vocabulary (Engine::set_vocabulary)");
  if (!r.adapter.empty() && !model_.has_adapter(r.adapter))
    UNILLM_THROW(ConfigError, "[engine] no adapter named '", r.adapter, "' is loaded");
}

void Engine::set_vocabulary(std::vector<std::string> token_bytes) {
  UNILLM_CHECK(static_cast<int64_t>(token_bytes.size()) == model_.config().vocab_size,
               "[engine] the vocabulary has ", token_bytes.size(), " tokens, the model ", model_.config().vocab_size);
  trie_ = std::make_shared<const TokenTrie>(token_bytes);
  token_bytes_ = std::move(token_bytes);
}

std::unique_ptr<Sequence> Engine::make_sequence(Request r) {
  auto s = std::make_unique<Sequence>();
  s->id = next_id_++;
  s->tokens = r.prompt;
  s->prompt_len = static_cast<int64_t>(r.prompt.size());
  s->rng = Rng(r.seed);
  // Prefix-cache salt: the adapter and the KV dtype (blocks of another dtype hold other values).
  s->salt = (r.adapter.empty() ? 0 : std::hash<std::string>()(r.adapter) | 1) ^
            (static_cast<uint64_t>(dtype_code(c_.kv_dtype)) << 56);
  if (r.grammar) s->matcher = std::make_shared<GrammarMatcher>(r.grammar);
  s->req = std::move(r);
  stats_.prompt_tokens += s->prompt_len;
  return s;
}

int64_t Engine::add_request(Request r) {
  validate(r);
  auto s = make_sequence(std::move(r));
  const int64_t id = s->id;
  sched_.add(std::move(s));
  return id;
}

std::vector<int64_t> Engine::add_requests(std::vector<Request> choices) {
  for (const Request& r : choices) validate(r);
  std::vector<int64_t> ids;
  Sequence* parent = nullptr;
  for (Request& r : choices) {
    const bool fork = parent && r.prompt == parent->req.prompt && r.adapter == parent->req.adapter;
    auto s = make_sequence(std::move(r));
    ids.push_back(s->id);
    if (fork) {
      forks_[parent->id].push_back(std::move(s));
    } else {
      if (!parent) parent = s.get();
      sched_.add(std::move(s));
    }
  }
  return ids;
}

void Engine::finish(int64_t id, FinishReason reason) {
  StepOutput o;
  o.request = id;
  o.finished = reason;
  for (auto& [parent, list] : forks_)  // a choice still waiting for its parent's prefill
    for (auto it = list.begin(); it != list.end(); ++it)
      if ((*it)->id == id) {
        list.erase(it);
        if (list.empty()) forks_.erase(parent);
        pending_.push_back(o);
        return;
      }
  if (!sched_.find(id)) return;
  sched_.remove(id);
  orphan_forks(id);
  pending_.push_back(o);
}

void Engine::orphan_forks(int64_t parent) {
  // Choices that were to fork from a sequence that ended before its prefill did compute their
  // prompt themselves.
  if (auto it = forks_.find(parent); it != forks_.end()) {
    for (auto& f : it->second) sched_.add(std::move(f));
    forks_.erase(it);
  }
}

void Engine::start_forks(Sequence& s, const float* logits, int64_t vocab, std::vector<StepOutput>& out) {
  auto it = forks_.find(s.id);
  if (it == forks_.end()) return;
  std::vector<std::unique_ptr<Sequence>> list = std::move(it->second);
  forks_.erase(it);
  std::vector<std::unique_ptr<Sequence>> started;
  for (auto& f : list) {
    f->table = blocks_.fork(s.table);
    f->computed = s.computed;  // the prompt (the parent's table holds exactly it)
    out.push_back(sample(*f, logits, vocab));
    if (out.back().finished != FinishReason::none) {
      blocks_.release(f->table);
    } else {
      started.push_back(std::move(f));
    }
  }
  // At the front of the queue, in choice order.
  for (auto f = started.rbegin(); f != started.rend(); ++f) sched_.add_first(std::move(*f));
}

void Engine::copy_blocks(const std::vector<BlockCopy>& copies) {
  if (copies.empty()) return;
  stats_.block_copies += static_cast<int64_t>(copies.size());
  const int64_t bs = c_.block_size;
  std::vector<int32_t> from, to;
  for (const BlockCopy& c : copies)
    for (int64_t j = 0; j < bs; ++j) {
      from.push_back(static_cast<int32_t>(c.from * bs + j));
      to.push_back(static_cast<int32_t>(c.to * bs + j));
    }
  const Tensor src = Tensor::from_ints(from, {static_cast<int64_t>(from.size())});
  const Tensor dst = Tensor::from_ints(to, {static_cast<int64_t>(to.size())});
  for (std::vector<Tensor>* caches : {&caches_.k, &caches_.v})
    for (Tensor& cache : *caches) {
      const Shape& sh = cache.shape();  // [NB, BS, Hkv, D]
      const Tensor rows = ops::gather_rows(cache.view({sh[0] * sh[1], sh[2] * sh[3]}), src);
      ops::kv_cache_write(rows.view({rows.shape()[0], sh[2], sh[3]}), cache, dst);
    }
}

models::ForwardBatch Engine::build_batch(const std::vector<Scheduled>& work) const {
  const auto S = static_cast<int64_t>(work.size());
  int64_t max_blocks = 1;
  for (const Scheduled& w : work)
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(w.seq->table.blocks.size()));
  std::vector<int32_t> ids, pos, slots, table(S * max_blocks, 0), q_start{0}, kv_len, rows;
  const int64_t bs = c_.block_size;
  for (int64_t i = 0; i < S; ++i) {
    const Sequence& s = *work[i].seq;
    for (int64_t j = 0; j < work[i].n; ++j) {
      const int64_t p = s.computed + j;
      ids.push_back(s.tokens[p]);
      pos.push_back(static_cast<int32_t>(p));
      slots.push_back(static_cast<int32_t>(s.table.blocks[p / bs] * bs + p % bs));
    }
    std::copy(s.table.blocks.begin(), s.table.blocks.end(), table.begin() + i * max_blocks);
    q_start.push_back(static_cast<int32_t>(ids.size()));
    kv_len.push_back(static_cast<int32_t>(s.computed + work[i].n));
    if (work[i].samples()) rows.push_back(static_cast<int32_t>(ids.size()) - 1);
  }
  const auto n = static_cast<int64_t>(ids.size());
  if (rows.empty()) rows.push_back(static_cast<int32_t>(n - 1));  // no sampler: one row, unread
  models::ForwardBatch b;
  b.ids = Tensor::from_ints(ids, {n});
  b.positions = Tensor::from_ints(pos, {n});
  b.slot_mapping = Tensor::from_ints(slots, {n});
  b.attn.block_table = Tensor::from_ints(table, {S, max_blocks});
  b.attn.q_start = Tensor::from_ints(q_start, {S + 1});
  b.attn.kv_len = Tensor::from_ints(kv_len, {S});
  b.logit_rows = Tensor::from_ints(rows, {static_cast<int64_t>(rows.size())});
  // Rows per adapter group (work is grouped by adapter): a named adapter on its rows; "" the
  // model's active set on its rows.
  int64_t row = 0;
  for (size_t i = 0; i < work.size();) {
    const std::string& name = work[i].seq->req.adapter;
    const int64_t begin = row;
    for (; i < work.size() && work[i].seq->req.adapter == name; ++i) row += work[i].n;
    const std::vector<std::string> apply = name.empty() ? model_.active_adapters() : std::vector<std::string>{name};
    for (const auto& a : apply) b.adapter_rows.push_back({a, begin, row});
  }
  if (b.adapter_rows.empty()) b.adapters = std::vector<std::string>{};  // base model only
  return b;
}

StepOutput Engine::sample(Sequence& s, const float* logits, int64_t vocab) {
  StepOutput o;
  o.request = s.id;
  std::vector<float> row(logits, logits + vocab);
  std::vector<uint8_t> allowed;
  if (s.matcher) {  // structured output: the grammar's next tokens; a stop id once it is whole
    s.matcher->allowed_tokens(*trie_, allowed);
    const bool can_end = s.matcher->complete() && !s.req.ignore_eos;
    for (int32_t id : s.req.stop_ids)
      if (id >= 0 && id < vocab) allowed[id] = can_end;
    if (std::find(allowed.begin(), allowed.end(), 1) == allowed.end()) {
      // Nothing fits (a vocabulary without the bytes the grammar needs): end here.
      o.finished = FinishReason::stop;
      return o;
    }
  }
  try {
    o.token = sample_token(row, s.req.sampling, s.tokens, s.rng, static_cast<size_t>(s.prompt_len),
                           s.matcher ? &allowed : nullptr);
  } catch (const NumericError&) {
    UNILLM_THROW(NumericError, "[engine] request ", s.id, ": the logits at position ",
                 s.tokens.size() - 1, " are NaN or inf (the model's weights or config give non-finite values)");
  }
  if (s.req.logprobs >= 0) {  // log-softmax of the model's logits
    const float mx = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
    const double lse = mx + std::log(sum);
    o.logprobs.logprob = static_cast<float>(row[o.token] - lse);
    const int64_t k = std::min<int64_t>(s.req.logprobs, vocab);
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (int64_t i = 0; i < k; ++i)
      o.logprobs.top.emplace_back(order[i], static_cast<float>(row[order[i]] - lse));
  }
  s.tokens.push_back(o.token);
  ++stats_.generated_tokens;
  const bool stop_id = std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), o.token) != s.req.stop_ids.end();
  bool grammar_done = false;
  if (s.matcher && !stop_id) {
    UNILLM_CHECK(s.matcher->accept(token_bytes_[o.token]), "[engine] a sampled token left the grammar");
    grammar_done = s.matcher->complete() && !s.matcher->can_continue();
  }
  if ((stop_id && !s.req.ignore_eos) || grammar_done) {
    o.finished = FinishReason::stop;
  } else if (s.generated() >= s.req.max_tokens) {
    o.finished = FinishReason::length;
  }
  return o;
}

std::vector<StepOutput> Engine::step() {
  std::vector<StepOutput> out = std::move(pending_);
  pending_.clear();
  std::vector<Scheduled> work = sched_.schedule();
  stats_.preemptions = sched_.preemptions();
  if (work.empty()) return out;
  autograd::NoGradGuard no_grad;
  copy_blocks(sched_.take_copies());
  // Requests for different adapters share the step: grouped so that each adapter applies to
  // one run of rows (the segmented LoRA GEMM).
  std::stable_sort(work.begin(), work.end(), [](const Scheduled& a, const Scheduled& b) {
    return a.seq->req.adapter < b.seq->req.adapter;
  });
  models::ForwardBatch batch = build_batch(work);
  Tensor logits;
  const int64_t rows = batch.ids.numel();
  auto run = [&] { logits = model_.forward(batch, caches_); };
  if (rows <= kTeamMaxRows) {
    run_with_team(run);  // GEMV-sized: a held thread team saves a wake-up per kernel
  } else {
    run();
  }
  const std::vector<float> host = logits.to_float_vector();
  const int64_t vocab = model_.config().vocab_size;
  int64_t row = 0;
  std::vector<int64_t> done;
  for (const Scheduled& w : work) {
    Sequence& s = *w.seq;
    const bool samples = w.samples();
    s.computed += w.n;
    stats_.computed_tokens += w.n;
    blocks_.commit(s.table, s.tokens, s.computed, s.salt);
    if (!samples) continue;
    const float* logits_row = host.data() + row * vocab;
    ++row;
    out.push_back(sample(s, logits_row, vocab));
    if (out.back().finished != FinishReason::none) done.push_back(s.id);
    if (s.generated() == 1) start_forks(s, logits_row, vocab, out);
  }
  for (int64_t id : done) {
    sched_.remove(id);
    orphan_forks(id);  // ended without a first token (the grammar admitted none): its forks go on
  }
  ++stats_.steps;
  return out;
}

}  // namespace unillm::infer
