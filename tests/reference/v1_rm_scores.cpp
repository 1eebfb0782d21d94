// Test-only driver for tests/reference/v1_rm_check.py: the scores LLaMA-Factory v1's reward model
// gives rows of token ids, as unillm computes them (the stage's score head on each row's last
// token), for a *ForTokenClassification dir or a base model with a TOKEN_CLS adapter.
//   v1_rm_scores MODEL_DIR [--adapter DIR] ROWS.json   (ROWS.json: [[id, ...], ...], an even number)
// Prints {"scores": [...]} (one per row); exit status 1 with the error otherwise.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "backends/cpu/register.h"
#include "core/error.h"
#include "models/adapter.h"
#include "models/causal_lm.h"
#include "models/value_head.h"
#include "train/stages/reward.h"

int main(int argc, char** argv) {
  using namespace unillm;
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string adapter;
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--adapter") adapter = args[i + 1], args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
  if (args.size() != 2) {
    std::fprintf(stderr, "usage: v1_rm_scores MODEL_DIR [--adapter DIR] ROWS.json\n");
    return 2;
  }
  try {
    cpu::register_cpu_backend();
    auto model = models::load_causal_lm(args[0]);
    if (!adapter.empty()) {
      models::load_adapter(*model, adapter, "rm");
      model->set_active_adapters({"rm"});
    }
    Rng rng(0);
    models::ValueHead head(model->config().hidden_size, rng, {}, models::ValueHead::Kind::kScore);
    const std::string head_dir = adapter.empty() ? args[0] : adapter;
    if (!head.load(head_dir)) throw ConfigError("no score head in " + head_dir);
    const auto rows = nlohmann::json::parse(std::ifstream(args[1])).get<std::vector<std::vector<int32_t>>>();
    // One batch laid out as the stage's pairs (rows 0..n−1, then n..2n−1), padded with id 0.
    if (rows.empty() || rows.size() % 2) throw ConfigError(args[1] + ": give an even number of rows");
    const std::vector<std::vector<int32_t>>& even = rows;
    data::Batch b;
    b.rows = static_cast<int64_t>(even.size());
    b.group = 2;
    for (const auto& r : even) b.seq_len = std::max<int64_t>(b.seq_len, static_cast<int64_t>(r.size()));
    for (int64_t i = 0; i < b.rows; ++i) {
      std::vector<int32_t> ids = even[static_cast<size_t>(i)];
      b.lengths.push_back(static_cast<int32_t>(ids.size()));
      ids.resize(static_cast<size_t>(b.seq_len), 0);
      b.input_ids.insert(b.input_ids.end(), ids.begin(), ids.end());
      b.labels.insert(b.labels.end(), static_cast<size_t>(b.seq_len), data::kIgnoreIndex);
      b.row_indices.push_back(i);
    }
    autograd::NoGradGuard no_grad;
    const std::vector<float> s = train::reward_scores(*model, head, b, false, nullptr).to(Device{}).contiguous().to_float_vector();
    nlohmann::json out;
    out["scores"] = std::vector<float>(s.begin(), s.begin() + static_cast<long>(rows.size()));
    std::printf("%s\n", out.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "v1_rm_scores: %s\n", e.what());
    return 1;
  }
}
