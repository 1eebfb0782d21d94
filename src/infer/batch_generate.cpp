// batch_generate (batch_generate.h).
#include "infer/batch_generate.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "infer/engine.h"

namespace unillm::infer {

std::vector<std::vector<int32_t>> batch_generate(models::CausalLM& model,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const BatchGenerateOptions& o,
                                                 const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<std::vector<int32_t>> out(prompts.size());
  const GenerateOptions& g = o.generate;
  UNILLM_CHECK(o.seeds.empty() || o.seeds.size() == prompts.size(), "[generate] ", o.seeds.size(), " seeds for ",
               prompts.size(), " prompts");
  if (prompts.empty() || g.max_new_tokens <= 0) return out;
  int64_t longest = 0;
  for (const auto& p : prompts) {
    UNILLM_CHECK(!p.empty(), "[generate] empty prompt");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  }
  EngineConfig c;
  c.block_size = g.block_size;
  // Room for max_num_seqs of the longest requests at once; the scheduler waits (or preempts)
  // when the real mix needs more.
  c.num_blocks = o.max_num_seqs * blocks_for(longest + g.max_new_tokens, g.block_size);
  c.prefix_caching = true;  // prompts of one template share their system/prefix blocks
  c.scheduler.max_num_seqs = o.max_num_seqs;
  c.scheduler.max_num_batched_tokens = std::max<int64_t>(o.max_num_batched_tokens, o.max_num_seqs);
  Engine engine(model, c);
  std::map<int64_t, size_t> index;  // request id -> prompt
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request q;
    q.prompt = prompts[i];
    q.sampling = g.sampling;
    q.seed = o.seeds.empty() ? g.seed + i : o.seeds.at(i);
    q.max_tokens = g.max_new_tokens;
    q.stop_ids = g.eos_ids;
    q.ignore_eos = g.ignore_eos;
    index[engine.add_request(std::move(q))] = i;
  }
  int64_t done = 0;
  while (engine.has_work()) {
    for (const StepOutput& s : engine.step()) {
      if (s.token >= 0) out[index.at(s.request)].push_back(s.token);
      if (s.finished != FinishReason::none && progress) progress(++done, static_cast<int64_t>(prompts.size()));
    }
  }
  return out;
}

}  // namespace unillm::infer
