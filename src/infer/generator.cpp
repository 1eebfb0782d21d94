// Prefill + decode loop for one sequence.
#include "infer/generator.h"

#include <algorithm>
#include <chrono>

#include "autograd/grad_mode.h"
#include "core/thread_team.h"

namespace unillm::infer {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs tokens [from, to) of seq through the model and returns the last row's logits.
std::vector<float> run_tokens(models::CausalLM& model, models::KvCaches& caches,
                              const std::vector<int32_t>& seq, int64_t from, int64_t to,
                              const std::vector<int32_t>& blocks, int64_t block_size) {
  std::vector<int32_t> ids(seq.begin() + from, seq.begin() + to);
  auto batch = models::single_sequence_batch(ids, from, blocks, block_size, true);
  Tensor logits = model.forward(batch, caches);  // [1, V]
  return logits.to_float_vector();
}
// sample_token, with a NaN/inf row named by its position: the logits of position seq.size() - 1
// predict the next token.
int32_t sample_or_explain(const std::vector<float>& logits, const SamplingParams& params,
                          const std::vector<int32_t>& seq, Rng& rng, int64_t prompt_tokens) {
  try {
    return sample_token(logits, params, seq, rng, static_cast<size_t>(prompt_tokens));
  } catch (const NumericError&) {
    const auto pos = static_cast<int64_t>(seq.size()) - 1;
    UNILLM_THROW(NumericError, "[generate] the logits at position ", pos,
                 pos + 1 == prompt_tokens ? " (the prompt's last token)" : "",
                 " are NaN or inf: the model's weights or config (rms_norm_eps, rope_theta) give "
                 "non-finite values; nothing more is generated");
  }
}
}  // namespace

GenerateResult generate(models::CausalLM& model, const std::vector<int32_t>& prompt,
                        const GenerateOptions& o, const std::function<bool(int32_t)>& on_token) {
  UNILLM_CHECK(!prompt.empty(), "[generate] empty prompt");
  autograd::NoGradGuard no_grad;
  GenerateResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  const int64_t total = r.prompt_tokens + std::max<int64_t>(o.max_new_tokens, 0);
  const int64_t nblocks = (total + o.block_size - 1) / o.block_size;
  BlockPool pool(nblocks);
  std::vector<int32_t> blocks;
  for (int64_t i = 0; i < nblocks; ++i) blocks.push_back(pool.allocate());
  models::KvCaches caches = models::KvCaches::allocate(model.config(), nblocks, o.block_size, o.kv_dtype, model.device());
  Rng rng(o.seed);
  std::vector<int32_t> seq = prompt;

  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  for (int64_t from = 0; from < r.prompt_tokens; from += o.prefill_chunk) {
    int64_t to = std::min(r.prompt_tokens, from + o.prefill_chunk);
    logits = run_tokens(model, caches, seq, from, to, blocks, o.block_size);
  }
  r.prefill_seconds = seconds_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    int32_t next = sample_or_explain(logits, o.sampling, seq, rng, r.prompt_tokens);
    r.tokens.push_back(next);
    seq.push_back(next);
    bool is_eos = std::find(o.eos_ids.begin(), o.eos_ids.end(), next) != o.eos_ids.end();
    bool keep = on_token(next);
    if (is_eos && !o.ignore_eos) {
      r.reason = StopReason::eos;
      break;
    }
    if (!keep) {
      r.reason = StopReason::callback;
      break;
    }
    if (step + 1 < o.max_new_tokens) {
      // One token: GEMV-sized kernels, a held thread team saves a wake-up per kernel.
      int64_t n = static_cast<int64_t>(seq.size());
      run_with_team([&] { logits = run_tokens(model, caches, seq, n - 1, n, blocks, o.block_size); });
    }
  }
  r.decode_seconds = seconds_since(t1);
  return r;
}

}  // namespace unillm::infer
