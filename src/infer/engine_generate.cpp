// generate() on the engine: one request, stepped until it finishes.
#include "infer/engine_generate.h"

#include <chrono>

#include "core/error.h"
#include "infer/engine.h"

namespace unillm::infer {

GenerateResult engine_generate(models::CausalLM& model, const std::vector<int32_t>& prompt,
                               const GenerateOptions& o, const std::function<bool(int32_t)>& on_token) {
  UNILLM_CHECK(!prompt.empty(), "[generate] empty prompt");
  GenerateResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  if (o.max_new_tokens <= 0) return r;
  EngineConfig c;
  c.block_size = o.block_size;
  c.num_blocks = blocks_for(r.prompt_tokens + o.max_new_tokens, o.block_size);
  c.prefix_caching = false;  // one request: nothing to share
  c.kv_dtype = o.kv_dtype;
  c.scheduler.max_num_seqs = 1;
  c.scheduler.max_num_batched_tokens = o.prefill_chunk;
  Engine engine(model, c);
  Request q;
  q.prompt = prompt;
  q.sampling = o.sampling;
  q.seed = o.seed;
  q.max_tokens = o.max_new_tokens;
  q.stop_ids = o.eos_ids;
  q.ignore_eos = o.ignore_eos;
  const int64_t id = engine.add_request(std::move(q));
  const auto t0 = std::chrono::steady_clock::now();
  auto first = t0;
  while (engine.has_work()) {
    for (const StepOutput& s : engine.step()) {
      if (s.token < 0) continue;  // the end of a request finished below
      if (r.tokens.empty()) first = std::chrono::steady_clock::now();
      r.tokens.push_back(s.token);
      const bool keep = on_token(s.token);
      if (s.finished == FinishReason::stop) {
        r.reason = StopReason::eos;
      } else if (!keep) {
        r.reason = StopReason::callback;
        if (s.finished == FinishReason::none) engine.finish(id, FinishReason::stop);
      }
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  r.prefill_seconds = std::chrono::duration<double>(first - t0).count();
  r.decode_seconds = std::chrono::duration<double>(t1 - first).count();
  return r;
}

}  // namespace unillm::infer
