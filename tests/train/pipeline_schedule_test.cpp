// Pipeline schedules (src/train/pipeline_schedule.h): 1F1B's published order, the interleaved
// order's shape, and a simulation of every rank running its schedule against the others (the
// trainer's blocking receives and non-blocking sends) that finishes for every layout the trainer
// can run and catches one that would hang.
#include "train/pipeline.h"
#include "train/pipeline_schedule.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace unillm::train {
namespace {

TEST(PipelineSchedule, OneForwardOneBackward) {
  // PipeDream-flush with 2 stages and 4 micro-batches: stage 0 runs one forward ahead.
  EXPECT_EQ(schedule_text(pipeline_schedule(2, 1, 4, 0), 1), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(schedule_text(pipeline_schedule(2, 1, 4, 1), 1), "F0 B0 F1 B1 F2 B2 F3 B3");
  // 4 stages: stage r warms up with 3 - r forwards; fewer micro-batches than stages is fine.
  EXPECT_EQ(schedule_text(pipeline_schedule(4, 1, 6, 0), 1), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(schedule_text(pipeline_schedule(4, 1, 2, 1), 1), "F0 F1 B0 B1");
  // A replica left without micro-batches (a short last step) runs nothing.
  EXPECT_TRUE(pipeline_schedule(2, 2, 0, 1).empty());
}

TEST(PipelineSchedule, InterleavedVisitsEveryChunkOfEveryMicroBatchOnce) {
  // 2 stages × 2 chunks, 4 micro-batches: forwards take rounds of pp micro-batches per chunk.
  const auto ops = pipeline_schedule(2, 2, 4, 0);
  EXPECT_EQ(schedule_text(ops, 2),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  for (int m : {1, 2, 3, 4, 5, 8})
    for (int r = 0; r < 2; ++r) {
      int f[8][2] = {}, b[8][2] = {};
      for (const PipeOp& o : pipeline_schedule(2, 2, m, r)) (o.forward ? f : b)[o.micro][o.chunk]++;
      for (int i = 0; i < m; ++i)
        for (int c = 0; c < 2; ++c)
          EXPECT_TRUE(f[i][c] == 1 && b[i][c] == 1) << m << " " << r << " " << i << " " << c;
    }
}

TEST(PipelineSchedule, EveryLayoutFinishesWithoutWaitingForever) {
  for (int pp : {2, 3, 4, 8})
    for (int v : {1, 2, 3})
      for (int m : {1, 2, 3, 4, 5, 8, 12, 16})
        EXPECT_EQ(simulate_schedule(pp, v, m), "") << "pp " << pp << " v " << v << " m " << m;
}

TEST(PipelineSchedule, TheSimulationCatchesAHangAndAnOutOfOrderChannel) {
  // Stage 0 asking for micro-batch 0's gradient before sending micro-batch 0 on waits forever.
  std::vector<std::vector<PipeOp>> ops = {{{false, 0, 0}, {true, 0, 0}},
                                          {{true, 0, 0}, {false, 0, 0}}};
  EXPECT_NE(simulate_ops(2, 1, 1, ops).find("before its forward"), std::string::npos);
  // Stage 0 waiting for micro-batch 0's gradient before sending micro-batch 1, while stage 1
  // waits for micro-batch 1 before running micro-batch 0's backward: a hang.
  ops = {{{true, 0, 0}, {false, 0, 0}, {true, 1, 0}, {false, 1, 0}},
         {{true, 0, 0}, {true, 1, 0}, {false, 0, 0}, {false, 1, 0}}};
  EXPECT_EQ(simulate_ops(2, 1, 2, ops), "rank 0 waits at B0.0; rank 1 waits at F1.0");
  // Stage 1 taking micro-batch 1 first: the messages of one channel would be mixed up.
  ops = {{{true, 0, 0}, {true, 1, 0}, {false, 0, 0}, {false, 1, 0}},
         {{true, 1, 0}, {false, 1, 0}, {true, 0, 0}, {false, 0, 0}}};
  EXPECT_NE(simulate_ops(2, 1, 2, ops).find("out of order"), std::string::npos)
      << simulate_ops(2, 1, 2, ops);
}

TEST(PipelineSchedule, ActivationsInFlightPerLayer) {
  using V = std::vector<int64_t>;
  // 1F1B, 5 layers over 2 stages, 4 micro-batches: stage 0 holds 2 of its 3 layers' micro-batches.
  EXPECT_EQ(pipeline_live_per_layer(5, 2, 1, 4, 0), (V{2, 2, 2, 0, 0}));
  EXPECT_EQ(pipeline_live_per_layer(5, 2, 1, 4, 1), (V{0, 0, 0, 1, 1}));
  EXPECT_EQ(pipeline_live_per_layer(8, 4, 1, 2, 0), (V{2, 2, 0, 0, 0, 0, 0, 0}));  // at most m
  // Interleaved (2 × 2 chunks of [0,2) [2,3) [3,4) [4,5)), stage 0's order F0.0 F1.0 F0.1 F1.1 F2.0
  // B0.1 F3.0: there it holds 4 micro-batches of chunk 0 and 1 of chunk 1, 9 layer-micro-batches —
  // more than one process's 5.
  EXPECT_EQ(pipeline_live_per_layer(5, 2, 2, 4, 0), (V{4, 4, 0, 1, 0}));
}

TEST(PipelineSchedule, LayersSplitEvenlyEarlierStagesTakingTheExtra) {
  using P = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(pipeline_layers(5, 2, 1), (P{{0, 3}, {3, 5}}));
  EXPECT_EQ(pipeline_layers(5, 2, 2), (P{{0, 2}, {2, 3}, {3, 4}, {4, 5}}));
  EXPECT_EQ(pipeline_layers(8, 4, 1), (P{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  // The loss head weighs on the last stage (Megatron's account_for_loss_in_pipeline_split):
  // stories15M's lm_head is 9 layers' worth, so its first stage takes 5 of 6 layers; stories260K's
  // 0.72 changes nothing; Llama-2-7B's 0.6 over 4 stages keeps 8 each.
  EXPECT_EQ(pipeline_layers(6, 2, 1, 9.2), (P{{0, 5}, {5, 6}}));
  EXPECT_EQ(pipeline_layers(5, 2, 1, 0.72), (P{{0, 3}, {3, 5}}));
  EXPECT_EQ(pipeline_layers(32, 4, 1, 0.6), (P{{0, 8}, {8, 16}, {16, 24}, {24, 32}}));
  EXPECT_EQ(pipeline_layers(8, 2, 2, 2.5), (P{{0, 3}, {3, 5}, {5, 7}, {7, 8}}));
  models::ModelConfig c;  // stories260K: V 512, C 64, 8 heads of 8, 4 kv heads, F 172
  c.vocab_size = 512, c.hidden_size = 64, c.num_heads = 8, c.num_kv_heads = 4, c.head_dim = 8;
  c.intermediate_size = 172;
  EXPECT_NEAR(loss_head_layers(c), 512.0 * 64 / (64 * (2 * 64 + 2 * 32 + 3 * 172)), 1e-12);
  try {
    pipeline_layers(5, 4, 2);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("5 decoder layers cannot be split into 8 pipeline stages"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace unillm::train
