// Calibration text for GPTQ (LLaMA-Factory's export_quantization_dataset, _nsamples, _maxlen).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/tokenizer.h"

namespace unillm::data {

// `source` is a dataset name in dataset_dir/dataset_info.json, or a .txt/.json/.jsonl file whose
// records have a "text" field (LLaMA-Factory's example uses data/c4_demo.jsonl). Its documents
// are tokenised and packed as pretraining packs them (EOS after each, blocks of maxlen tokens,
// BOS first when the tokenizer adds one); nsamples blocks evenly spaced over all of them are
// returned (all, when there are fewer). LLaMA-Factory instead draws random maxlen windows from
// documents longer than maxlen; packing also uses short documents and needs no random draw.
// ConfigError when the source names nothing, or holds fewer than maxlen tokens.
std::vector<std::vector<int32_t>> calibration_samples(const std::string& source, const std::string& dataset_dir,
                                                      int64_t nsamples, int64_t maxlen, const io::Tokenizer& tok);

}  // namespace unillm::data
