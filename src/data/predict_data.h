// The prompts of do_predict with predict_with_generate: LLaMA-Factory's UnsupervisedDatasetProcessor
// over eval_dataset (every dataset of the list, concatenated, as its loader merges them for
// prediction).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/pretrain.h"
#include "data/template.h"

namespace unillm::data {

struct PredictExample {
  std::vector<int32_t> prompt;  // everything before the response, ending in the assistant header
  std::vector<int32_t> label;   // the reference response's ids (+ EOS for efficient_eos templates)
  std::string source;           // "FILE line N"
};

struct PredictData {
  std::vector<PredictExample> examples;
  int64_t skipped_records = 0;  // skip_bad_records only
};

// Each record of o.eval_dataset (max_samples per dataset, bad records as the SFT reader reports
// them) rendered by t.encode_oneturn(messages, system, tools): prompt = its prompt part, label =
// the last (assistant) message's ids; then both cut to LLaMA-Factory's infer_seqlen(|prompt|,
// |label|, o.cutoff_len) at their ends.
PredictData load_predict_data(const DataOptions& o, const ChatTemplate& t, int32_t eos_id);

}  // namespace unillm::data
