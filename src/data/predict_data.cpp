// do_predict prompts (predict_data.h).
#include "data/predict_data.h"

#include "data/dataset_info.h"
#include "data/num_samples.h"
#include "data/sft_encode.h"
#include "data/sft_reader.h"

namespace unillm::data {

PredictData load_predict_data(const DataOptions& o, const ChatTemplate& t, int32_t eos_id) {
  PredictData out;
  // LLaMA-Factory loads the train datasets before the eval ones: their num_samples draws come first.
  NumpyRandomState rng(o.seed);
  ReadOptions ro{o.max_samples, o.skip_bad_records, &rng};
  for (const auto& attr : resolve_datasets(o.dataset, o.dataset_dir, "sft"))
    if (attr.num_samples) read_conversations(attr, ro);
  for (const auto& attr : resolve_datasets(o.eval_dataset, o.dataset_dir, "sft")) {
    ConversationSet s = read_conversations(attr, ro);
    out.skipped_records += s.skipped_records;
    for (const Conversation& c : s.conversations) {
      EncodedTurn turn = t.encode_oneturn(c.messages, c.system, c.tools);
      PredictExample e;
      e.prompt = std::move(turn.prompt);
      e.label = std::move(turn.response);
      if (t.efficient_eos()) e.label.push_back(eos_id);  // the processor appends it there
      const auto [source_len, target_len] =
          infer_seqlen(static_cast<int64_t>(e.prompt.size()), static_cast<int64_t>(e.label.size()), o.cutoff_len);
      e.prompt.resize(static_cast<size_t>(source_len));
      e.label.resize(static_cast<size_t>(target_len));
      e.source = c.source;
      out.examples.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace unillm::data
