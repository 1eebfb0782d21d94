// One request through the serving engine: what `unillm generate` and `chat` run. Same contract
// as infer::generate (generator.h), which stays as the single-sequence oracle the engine's tests
// compare against.
#pragma once

#include <functional>
#include <vector>

#include "infer/generator.h"

namespace unillm::infer {

// A fresh engine with a cache just large enough for the request (prompt + max_new_tokens);
// prompt chunks of options.prefill_chunk tokens. on_token(id) as in generate().
GenerateResult engine_generate(models::CausalLM& model, const std::vector<int32_t>& prompt,
                               const GenerateOptions& options,
                               const std::function<bool(int32_t)>& on_token);

}  // namespace unillm::infer
