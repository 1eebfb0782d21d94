// The serving engine against the single-sequence generator (infer::generate, the oracle): many
// requests batched into one forward per step give token for token what each gives alone — with
// prefix caching on and off, chunked prefill forced by a tiny token budget, preemption forced by
// a tiny block budget, and seeded sampling; logprobs match the unbatched forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include "autograd/grad_mode.h"
#include "infer/engine.h"
#include "infer/engine_generate.h"
#include "infer/generator.h"
#include "infer/grammar.h"
#include "infer/json_schema.h"
#include "io/tokenizer.h"
#include "models/causal_lm.h"
#include "support/expect.h"

namespace unillm::infer {
namespace {

models::CausalLM& model() {
  static std::unique_ptr<models::CausalLM> m = [] {
    testing::init_cpu();
    return models::load_causal_lm(testing::source_path("assets/stories260K"));
  }();
  return *m;
}

// 16 prompts of 5..50 tokens; every fourth shares a 35-token start with the first (prefix cache).
std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> out;
  std::vector<int32_t> common;
  for (int i = 0; i < 35; ++i) common.push_back(1 + (i * 37 + 11) % 500);
  for (int r = 0; r < 16; ++r) {
    std::vector<int32_t> p;
    if (r % 4 == 0) p = common;
    const int len = 5 + (r * 13) % 46;
    for (int i = 0; i < len; ++i) p.push_back(1 + (r * 101 + i * 53 + 7) % 500);
    if (p.front() != 1) p.insert(p.begin(), 1);  // BOS
    out.push_back(p);
  }
  return out;
}

SamplingParams sampled() {
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_p = 0.95f;
  return s;
}

std::vector<int32_t> alone(const std::vector<int32_t>& prompt, const SamplingParams& sp,
                           uint64_t seed, int64_t max_tokens) {
  GenerateOptions o;
  o.max_new_tokens = max_tokens;
  o.sampling = sp;
  o.seed = seed;
  o.ignore_eos = true;
  return generate(model(), prompt, o, [](int32_t) { return true; }).tokens;
}

struct EngineRun {
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, std::vector<float>> logprobs;
  std::vector<int64_t> ids;
  int64_t hits = 0, preemptions = 0, max_rows_step = 0;
};

EngineRun batched(const EngineConfig& c, const SamplingParams& sp, int64_t max_tokens, int logprobs = -1) {
  Engine e(model(), c);
  EngineRun r;
  const auto ps = prompts();
  for (size_t i = 0; i < ps.size(); ++i) {
    Request q;
    q.prompt = ps[i];
    q.sampling = sp;
    q.seed = 1000 + i;
    q.max_tokens = max_tokens;
    q.ignore_eos = true;
    q.logprobs = logprobs;
    r.ids.push_back(e.add_request(q));
  }
  int64_t guard = 0;
  while (e.has_work()) {
    EXPECT_LT(++guard, 100000) << "the engine does not finish";
    if (guard >= 100000) break;
    for (const StepOutput& o : e.step()) {
      EXPECT_GE(o.token, 0);
      if (o.token < 0) continue;
      r.tokens[o.request].push_back(o.token);
      r.logprobs[o.request].push_back(o.logprobs.logprob);
    }
  }
  EXPECT_EQ(e.blocks().used(), 0) << "every block is released at the end";
  r.hits = e.blocks().hits();
  r.preemptions = e.stats().preemptions;
  return r;
}

EngineConfig config(int64_t num_blocks, int64_t budget, bool prefix) {
  EngineConfig c;
  c.block_size = 16;
  c.num_blocks = num_blocks;
  c.prefix_caching = prefix;
  c.scheduler.max_num_seqs = 16;
  c.scheduler.max_num_batched_tokens = budget;
  return c;
}

void expect_alone(const EngineRun& r, const SamplingParams& sp, int64_t max_tokens) {
  const auto ps = prompts();
  for (size_t i = 0; i < ps.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "request " << i << " (" << ps[i].size() << " prompt tokens)");
    EXPECT_EQ(r.tokens.at(r.ids[i]), alone(ps[i], sp, 1000 + i, max_tokens));
  }
}

TEST(Engine, GreedyBatchedEqualsAlone) {
  const EngineRun r = batched(config(256, 512, false), SamplingParams{0.0f}, 20);
  expect_alone(r, SamplingParams{0.0f}, 20);
  EXPECT_EQ(r.hits, 0);
}

TEST(Engine, PrefixCachingReusesBlocksAndChangesNothing) {
  // A budget of 40 tokens: request 0's first blocks are computed (and cached) before requests
  // 4, 8 and 12 are admitted.
  const EngineRun r = batched(config(256, 40, true), SamplingParams{0.0f}, 20);
  expect_alone(r, SamplingParams{0.0f}, 20);
  EXPECT_GE(r.hits, 6) << "requests 4, 8 and 12 share two full blocks with request 0";
}

TEST(Engine, ChunkedPrefillUnderATinyTokenBudget) {
  const EngineRun r = batched(config(256, 7, true), SamplingParams{0.0f}, 12);
  expect_alone(r, SamplingParams{0.0f}, 12);
}

TEST(Engine, PreemptionByRecomputeUnderATinyBlockBudget) {
  // 12 blocks of 16 slots hold about three of these sequences at once.
  const EngineRun r = batched(config(12, 256, false), SamplingParams{0.0f}, 40);
  expect_alone(r, SamplingParams{0.0f}, 40);
  EXPECT_GT(r.preemptions, 0);
}

TEST(Engine, SeededSamplingDoesNotDependOnTheBatch) {
  const EngineRun r = batched(config(12, 64, true), sampled(), 24);
  expect_alone(r, sampled(), 24);
}

TEST(Engine, LogprobsMatchTheUnbatchedForward) {
  const EngineRun r = batched(config(256, 512, false), SamplingParams{0.0f}, 8, 3);
  const auto ps = prompts();
  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < ps.size(); i += 5) {
    std::vector<int32_t> seq = ps[i];
    const auto& toks = r.tokens.at(r.ids[i]);
    seq.insert(seq.end(), toks.begin(), toks.end() - 1);
    const std::vector<float> all = model().logits_all(seq).to_float_vector();
    const int64_t v = model().config().vocab_size;
    for (size_t j = 0; j < toks.size(); ++j) {
      const float* row = all.data() + (ps[i].size() - 1 + j) * v;
      double mx = row[0], sum = 0;
      for (int64_t t = 0; t < v; ++t) mx = std::max<double>(mx, row[t]);
      for (int64_t t = 0; t < v; ++t) sum += std::exp(row[t] - mx);
      const double want = row[toks[j]] - mx - std::log(sum);
      EXPECT_NEAR(r.logprobs.at(r.ids[i])[j], want, 1e-5 * std::max(1.0, std::abs(want)));
    }
  }
}

// --kv-cache-dtype bf16/f16: the decode steps read 16-bit K/V; their log-probabilities stay
// within the cache's rounding of the f32 engine's (compared while the greedy tokens agree): bf16's
// 8-bit mantissa moves them by up to ~0.05 on stories260K, f16's 11 bits by ~10x less.
TEST(Engine, HalfPrecisionKvCacheStaysCloseToF32) {
  const EngineRun f32 = batched(config(256, 512, false), SamplingParams{0.0f}, 12, 1);
  for (DType dt : {DType::bf16, DType::f16}) {
    EngineConfig c = config(256, 512, false);
    c.kv_dtype = dt;
    const EngineRun half = batched(c, SamplingParams{0.0f}, 12, 1);
    int compared = 0;
    for (size_t i = 0; i < f32.ids.size(); ++i) {
      const auto& a = f32.tokens.at(f32.ids[i]);
      const auto& b = half.tokens.at(half.ids[i]);
      for (size_t j = 0; j < a.size() && a[j] == b[j]; ++j, ++compared)
        EXPECT_NEAR(half.logprobs.at(half.ids[i])[j], f32.logprobs.at(f32.ids[i])[j], dt == DType::bf16 ? 8e-2 : 1e-2)
            << dtype_name(dt) << " request " << i << " token " << j;
    }
    EXPECT_GT(compared, 100) << dtype_name(dt) << ": the greedy tokens agree mostly";
  }
}

TEST(Engine, GenerateOnTheEngineEqualsTheGenerator) {
  const auto ps = prompts();
  GenerateOptions o;
  o.max_new_tokens = 16;
  o.sampling = sampled();
  o.seed = 5;
  o.prefill_chunk = 8;
  for (size_t i = 0; i < ps.size(); i += 3) {
    auto a = generate(model(), ps[i], o, [](int32_t) { return true; });
    auto b = engine_generate(model(), ps[i], o, [](int32_t) { return true; });
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.reason, b.reason);
  }
  // A callback that stops after 3 tokens stops both the same way.
  int n = 0;
  auto r = engine_generate(model(), ps[0], o, [&](int32_t) { return ++n < 3; });
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(r.reason, StopReason::callback);
}

TEST(Engine, BadRequestsAreRefused) {
  Engine e(model(), config(4, 64, true));
  Request q;
  EXPECT_THROW(e.add_request(q), ConfigError);  // empty prompt
  q.prompt = {1, 2, 3};
  q.max_tokens = 100;  // 103 tokens > 4 blocks of 16
  EXPECT_THROW(e.add_request(q), ConfigError);
  q.max_tokens = 0;
  EXPECT_THROW(e.add_request(q), ConfigError);
  q.max_tokens = 4;
  q.prompt = {1, 100000};
  EXPECT_THROW(e.add_request(q), ConfigError);
  q.prompt = {1, 2};
  q.adapter = "nope";
  EXPECT_THROW(e.add_request(q), ConfigError);
  EXPECT_FALSE(e.has_work());
}

TEST(Engine, FinishReleasesTheBlocksAndReportsOnce) {
  Engine e(model(), config(64, 64, false));
  Request q;
  q.prompt = prompts()[3];
  q.max_tokens = 30;
  q.sampling = SamplingParams{0.0f};
  const int64_t id = e.add_request(q);
  e.step();
  EXPECT_GT(e.blocks().used(), 0);
  e.finish(id);
  EXPECT_EQ(e.blocks().used(), 0);
  auto out = e.step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].finished, FinishReason::abort);
  EXPECT_FALSE(e.has_work());
}

// n choices of one prompt: the first computes the prompt, the others fork from it (shared
// blocks, copy-on-write of the partial last one) and give what separate requests seeded
// seed + i give alone.
struct ForkRun {
  std::vector<std::vector<int64_t>> ids;  // [prompt][choice]
  std::map<int64_t, std::vector<int32_t>> tokens;
  EngineStats stats;
};

ForkRun forked(const EngineConfig& c, int n, int64_t max_tokens, const std::function<void(Engine&, ForkRun&)>& before = {}) {
  Engine e(model(), c);
  ForkRun r;
  const auto ps = prompts();
  for (size_t i = 0; i < ps.size(); i += 3) {
    std::vector<Request> choices;
    for (int k = 0; k < n; ++k) {
      Request q;
      q.prompt = ps[i];
      q.sampling = sampled();
      q.seed = 1000 + i + k;
      q.max_tokens = max_tokens;
      q.ignore_eos = true;
      choices.push_back(q);
    }
    r.ids.push_back(e.add_requests(choices));
  }
  if (before) before(e, r);
  for (int64_t guard = 0; e.has_work() && guard < 100000; ++guard)
    for (const StepOutput& o : e.step())
      if (o.token >= 0) r.tokens[o.request].push_back(o.token);
  EXPECT_FALSE(e.has_work());
  EXPECT_EQ(e.blocks().used(), 0) << "every block is released at the end";
  r.stats = e.stats();
  return r;
}

void expect_choices_alone(const ForkRun& r, int64_t max_tokens) {
  const auto ps = prompts();
  for (size_t p = 0; p < r.ids.size(); ++p) {
    for (size_t k = 0; k < r.ids[p].size(); ++k) {
      SCOPED_TRACE(::testing::Message() << "prompt " << p * 3 << ", choice " << k);
      EXPECT_EQ(r.tokens.count(r.ids[p][k]) ? r.tokens.at(r.ids[p][k]) : std::vector<int32_t>{},
                alone(ps[p * 3], sampled(), 1000 + p * 3 + k, max_tokens));
    }
  }
}

TEST(Engine, ForkedChoicesShareThePromptAndEqualSeparateRequests) {
  const ForkRun r = forked(config(256, 512, false), 4, 20);
  expect_choices_alone(r, 20);
  // Each prompt is computed once, not four times; the other choices copy its partial last block.
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < prompts().size(); i += 3) prompt_tokens += prompts()[i].size();
  EXPECT_EQ(r.stats.computed_tokens, prompt_tokens + 6 * 4 * 19) << "6 prompts, 4 choices, 19 decodes each";
  EXPECT_GT(r.stats.block_copies, 0);
}

TEST(Engine, ForkedChoicesUnderChunkingAndPreemption) {
  // A 7-token budget chunks every prompt; 10 blocks of 16 slots force preemptions of forks
  // (which then recompute their prompt) and copies of blocks shared at the time.
  const ForkRun r = forked(config(10, 7, true), 3, 30);
  expect_choices_alone(r, 30);
  EXPECT_GT(r.stats.preemptions, 0);
}

TEST(Engine, ChoicesOutliveTheirParentAndEndAlone) {
  // Ending the first choice before its prefill: the others compute the prompt themselves; ending
  // a waiting choice reports it once and touches nothing else.
  std::vector<int64_t> ended;
  const ForkRun r = forked(config(256, 512, true), 3, 10, [&](Engine& e, ForkRun& run) {
    e.finish(run.ids[0][0]);
    e.finish(run.ids[1][2]);
    ended = {run.ids[0][0], run.ids[1][2]};
  });
  for (int64_t id : ended) EXPECT_EQ(r.tokens.count(id), 0u);
  const auto ps = prompts();
  for (size_t p = 0; p < r.ids.size(); ++p)
    for (size_t k = 0; k < 3; ++k) {
      const int64_t id = r.ids[p][k];
      if (std::find(ended.begin(), ended.end(), id) != ended.end()) continue;
      EXPECT_EQ(r.tokens.at(id), alone(ps[p * 3], sampled(), 1000 + p * 3 + k, 10)) << "prompt " << p * 3 << ", choice " << k;
    }
}

// Structured output in the engine: each constrained request gives the same tokens whatever
// shares its steps (batched with unconstrained ones, and preempted under a tiny block budget),
// and every output that ends by the grammar is JSON that satisfies the schema.
TEST(Engine, StructuredOutputIsJsonAndDoesNotDependOnTheBatch) {
  const auto tok = io::Tokenizer::load(testing::source_path("assets/stories260K"));
  std::vector<std::string> bytes(model().config().vocab_size);
  for (size_t id = 0; id < bytes.size(); ++id) bytes[id] = tok->token_bytes(static_cast<int32_t>(id));
  const auto grammar = json_schema_grammar(nlohmann::json::parse(R"({"type": "object",
      "properties": {"name": {"type": "string", "maxLength": 10}, "n": {"type": "integer", "minimum": 0, "maximum": 99}},
      "required": ["name", "n"]})"));
  auto request = [&](size_t i, bool constrained) {
    Request q;
    q.prompt = prompts()[i];
    q.sampling = sampled();
    q.seed = 77 + i;
    q.max_tokens = 120;
    q.stop_ids = {tok->eos_id()};
    if (constrained) q.grammar = grammar;
    return q;
  };
  auto run = [&](const EngineConfig& c, const std::vector<std::pair<size_t, bool>>& which) {
    Engine e(model(), c);
    e.set_vocabulary(bytes);
    std::map<int64_t, std::vector<int32_t>> toks;
    std::map<int64_t, FinishReason> ends;
    std::vector<int64_t> ids;
    for (const auto& [i, constrained] : which) ids.push_back(e.add_request(request(i, constrained)));
    for (int guard = 0; e.has_work() && guard < 100000; ++guard)
      for (const StepOutput& o : e.step()) {
        if (o.token >= 0) toks[o.request].push_back(o.token);
        if (o.finished != FinishReason::none) ends[o.request] = o.finished;
      }
    EXPECT_EQ(e.blocks().used(), 0);
    std::vector<std::pair<std::vector<int32_t>, FinishReason>> out;
    for (int64_t id : ids) out.emplace_back(toks[id], ends[id]);
    return out;
  };
  std::vector<std::pair<size_t, bool>> mixed;
  for (size_t i = 0; i < 12; ++i) mixed.push_back({i, i % 2 == 0});
  const auto together = run(config(256, 64, true), mixed);
  const auto tight = run(config(14, 64, true), mixed);  // preemptions
  int stopped = 0;
  for (size_t i = 0; i < mixed.size(); i += 2) {
    const auto alone_out = run(config(256, 64, true), {{i, true}});
    EXPECT_EQ(together[i].first, alone_out[0].first) << "request " << i;
    EXPECT_EQ(tight[i].first, alone_out[0].first) << "request " << i << ", preempted";
    std::vector<int32_t> out = together[i].first;
    if (together[i].second != FinishReason::stop) continue;
    ++stopped;
    if (!out.empty() && out.back() == tok->eos_id()) out.pop_back();
    std::string text;
    for (int32_t t : out) text += bytes[t];
    const nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(v.is_object()) << text;
    EXPECT_EQ(v.size(), 2u) << text;
    EXPECT_TRUE(v["name"].is_string()) << text;
    EXPECT_TRUE(v["n"].is_number_integer() && v["n"] >= 0 && v["n"] <= 99) << text;
  }
  EXPECT_EQ(stopped, 6) << "bounded fields: every object ends within 120 tokens";
}

// A grammar that no token of the vocabulary can start ends the request at once (stop, no
// token); the other choices of the request, waiting to fork from it, end the same way instead
// of being left behind.
TEST(Engine, AGrammarThatAdmitsNothingEndsEveryChoice) {
  Engine e(model(), config(64, 64, true));
  e.set_vocabulary(std::vector<std::string>(model().config().vocab_size, "x"));
  Request q;
  q.prompt = prompts()[0];
  q.max_tokens = 5;
  q.stop_ids = {2};
  q.grammar = json_object_grammar();
  const std::vector<int64_t> ids = e.add_requests({q, q, q});
  std::map<int64_t, int> ends;
  for (int guard = 0; e.has_work() && guard < 1000; ++guard)
    for (const StepOutput& o : e.step()) {
      EXPECT_EQ(o.token, -1);
      EXPECT_EQ(o.finished, FinishReason::stop);
      ++ends[o.request];
    }
  for (int64_t id : ids) EXPECT_EQ(ends[id], 1) << "request " << id << " ends once";
  EXPECT_FALSE(e.has_work());
  EXPECT_EQ(e.blocks().used(), 0);
}

}  // namespace
}  // namespace unillm::infer
