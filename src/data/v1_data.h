// LLaMA-Factory v1's SFT data (docs/ARCHITECTURE.md, "LLaMA-Factory's v1 configs"): the
// `train_dataset` of a v1 config — a dataset YAML of named entries (path, source, converter,
// size, weight, split) or one local file or directory of its native `messages` rows — read,
// converted, split into one sample per supervised assistant turn and rendered through the
// model's own chat template (ChatML when it has none), as v1's DataEngine and Renderer do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/pretrain.h"
#include "io/tokenizer.h"

namespace unillm::data {

struct V1DataOptions {
  std::string train_dataset;  // as the config gives it
  std::string where;          // where the config names it ("cfg.yaml line 12"), for messages
  int64_t cutoff_len = 2048;
  uint64_t seed = 42;  // random.seed(seed) before the index is resampled by size / weight
  bool pairs = false;  // v1's dpo: every sample a chosen / rejected pair (the pair converter)
};

// One message as v1 holds it after conversion: role system | user | assistant | tool, its text
// blocks joined, its reasoning blocks joined, its tool calls ({name, arguments} objects) and
// its loss_weight.
struct V1Message {
  std::string role, text, reasoning;
  std::vector<nlohmann::ordered_json> tool_calls;
  double loss_weight = 0;
};

struct V1Sample {
  std::vector<V1Message> messages;  // a pair's chosen conversation
  std::vector<V1Message> rejected;  // a pair's rejected conversation (pair samples only)
  bool pair = false;                // pair converter or chosen_messages / rejected_messages rows
  std::string tools;                // a JSON list as text, or ""
  std::string source;               // "FILE line N"
};

// The data index as v1 builds it: every entry's records converted, one (sample, prefix length)
// per assistant message with loss_weight > 1e-6 (the whole sample when none), each entry's index
// resampled by size then weight with Python's random.choices after random.seed(seed), entries
// in the YAML's order. Throws ConfigError for the spec (unknown keys' values, a hub source, a
// missing file) and DataError naming the file and line for a bad record.
struct V1Index {
  std::vector<V1Sample> samples;
  std::vector<std::pair<int64_t, int64_t>> entries;  // (sample, prefix length)
};
V1Index read_v1_index(const V1DataOptions& o);

// Renders entry (sample, cut) as v1's Renderer does for training: full = render(messages[:cut]),
// prompt = render(messages[:cut - 1], add_generation_prompt), enable_thinking = whether the last
// message has reasoning; labels = the full ids after the prompt's (which must be a prefix) when
// the last message's loss_weight > 1e-6. Special-token strings in text are broken with U+200B.
struct V1Row {
  std::vector<int32_t> ids, labels;
};
class V1Renderer {
 public:
  // model_dir: where tokenizer_config.json's chat_template is read from.
  V1Renderer(const std::string& model_dir, const io::Tokenizer& tok);
  ~V1Renderer();
  V1Row render(const V1Sample& s, int64_t cut) const;
  // The same for a whole conversation (a pair's chosen or rejected one).
  V1Row render_messages(const std::vector<V1Message>& messages, const std::string& tools,
                        const std::string& source) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The rows v1 trains on, in index order: rendered, truncated to their first cutoff_len tokens, a
// row longer than that whose supervised tokens all fall beyond it dropped (counted in
// skipped_records, said in skip_messages).
TokenizedDataset load_v1_sft_data(const V1DataOptions& o, const io::Tokenizer& tok, const std::string& model_dir);

// v1's dpo rows (o.pairs): each pair's chosen and rejected conversations rendered apart as
// above (v1 concatenates them with a block-diagonal mask and positions restarting at the
// rejected half, which is two rows here); the concatenation truncated to cutoff_len — the
// chosen row keeps its first cutoff_len tokens, the rejected row what is left — and dropped when
// none of its kept tokens is scored (v1's rule) or its rejected row has none (v1 trains that with
// the rejected log-prob 0; the pair losses here need both sides). rows 2e / 2e + 1 (group 2), as
// data/pairwise.h lays them out.
TokenizedDataset load_v1_pair_data(const V1DataOptions& o, const io::Tokenizer& tok, const std::string& model_dir);

}  // namespace unillm::data
