// Token accuracy of an evaluation batch (PaddleNLP's compute_metrics / LLaMA-Factory's
// ComputeAccuracy) against hand-counted values, on a fake model whose logits are chosen by hand.
#include <gtest/gtest.h>

#include "support/expect.h"
#include "train/trainer_run.h"

namespace unillm::train {
namespace {

constexpr int64_t kV = 4;

// Position t predicts (id + 1) % 4; id 3 gives a tie between 0 and 2 (the first maximum wins).
class FakeLM : public models::CausalLM {
 public:
  const models::ModelConfig& config() const override { return cfg; }
  Device device() const override { return {}; }
  Tensor forward(const models::ForwardBatch& b, models::KvCaches&) override {
    const int64_t n = b.ids.shape()[0];
    lengths.push_back(n);
    std::vector<float> logits(static_cast<size_t>(n * kV), 0.0f);  // [n, V]
    for (int64_t t = 0; t < n; ++t) {
      const auto id = static_cast<int64_t>(b.ids.item_flat(t));
      logits[t * kV + (id + 1) % kV] = 1.0f;
      if (id == 3) logits[t * kV + 2] = 1.0f;
    }
    return Tensor::from_vector(logits, {n, kV});
  }
  nn::NamedTensors named_parameters() const override { return {}; }
  nn::Module& module() override { return module_; }
  models::LossResult loss(const models::TrainBatch&, bool, double) override { return {}; }
  std::vector<int64_t> lengths;  // of each forward call
  models::ModelConfig cfg;       // no layers: an empty cache; vocab_size sets the chunk

 private:
  nn::Module module_;
};

data::Batch two_rows() {
  data::Batch b;
  b.rows = 2;
  b.seq_len = 5;
  b.input_ids = {1, 2, 3, 0, 1, /**/ 3, 1, 2, 0, 0};
  b.labels = {1, 2, 3, 0, 2, /**/ 3, data::kIgnoreIndex, 3, data::kIgnoreIndex, data::kIgnoreIndex};
  b.lengths = {5, 3};
  return b;
}

// Row 0: ids 1 2 3 0 1, labels 1 2 3 0 2: t=0..3 predict 2, 3, 0 (tie 0/2), 1 against labels
// 2, 3, 0, 2 → 3 of 4. Row 1 (length 3, then padding): labels 3 -100 3: t=0 is not scored, t=1
// predicts 2 against 3 → 0 of 1. Total 3 of 5; padding never reaches the model.
TEST(TrainerEval, TokenAccuracyCountsShiftedScoredLabels) {
  testing::init_cpu();
  FakeLM model;
  const auto [right, scored] = detail::token_accuracy_counts(model, two_rows());
  EXPECT_EQ(right, 3);
  EXPECT_EQ(scored, 5);
  EXPECT_EQ(model.lengths, (std::vector<int64_t>{5, 3}));
}

// A large vocabulary scores a row in chunks of 16 Mi / V positions (here 2): same counts.
TEST(TrainerEval, TokenAccuracyInChunksOfPositions) {
  testing::init_cpu();
  FakeLM model;
  model.cfg.vocab_size = int64_t{8} << 20;
  const auto [right, scored] = detail::token_accuracy_counts(model, two_rows());
  EXPECT_EQ(right, 3);
  EXPECT_EQ(scored, 5);
  EXPECT_EQ(model.lengths, (std::vector<int64_t>{2, 2, 1, 2, 1}));
}

// token_accuracy_forwards counts token_accuracy_counts's forward calls (rows, then chunks), and
// the stand-ins are that many one-token forwards: what keeps processes whose forwards
// communicate in step.
TEST(TrainerEval, TokenAccuracyForwardsCountsItsCallsAndStandInsRunThem) {
  testing::init_cpu();
  for (const int64_t vocab : {int64_t{0}, int64_t{8} << 20}) {
    FakeLM model;
    model.cfg.vocab_size = vocab;
    detail::token_accuracy_counts(model, two_rows());
    EXPECT_EQ(detail::token_accuracy_forwards(model.cfg, two_rows()), static_cast<int64_t>(model.lengths.size()));
    model.lengths.clear();
    detail::token_accuracy_stand_ins(model, 3);
    EXPECT_EQ(model.lengths, (std::vector<int64_t>{1, 1, 1}));
  }
}

}  // namespace
}  // namespace unillm::train
