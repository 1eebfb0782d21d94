// Data parallelism's gradient buckets (src/train/grad_buckets.h) in real runs under mpirun -np 2:
// one bucket per layer and torch's 25 MB default give the same run bit for bit (the arena's sums
// element for element), both one process's with accumulation ×2 within 1e-5, full and LoRA (whose
// first layer is never reported and starts in finish); the run says how many buckets it cut, and
// its communication line how long they were in flight and how much of that backward computed.
#include <gtest/gtest.h>

#include <cmath>

#include "run_compare_util.h"

namespace unillm {
namespace {

using testing::max_weight_diff;
using testing::number_after;

const std::string kSft = "examples/train_lora/stories260K_lora_sft.yaml";
// 57 train rows in 15 micro-batches: step 8 takes the epoch's last one alone, so process 1 has none
// and starts its buckets only in finish() — in the same order as process 0, whose hooks started some.
const std::string kShort = " max_steps=9 logging_steps=1 save_strategy=no eval_steps=3 max_samples=64"
                           " per_device_train_batch_size=4 --quiet";

testing::CliResult train(int np, const std::string& args) { return testing::train_processes(np, args); }

using testing::expect_runs_close;

TEST(GradBucketsRun, PerLayerBucketsGiveTheSameRun) {
  const std::string dir = testing::temp_dir("buckets_run");
  for (const std::string method : {"full", "lora"}) {
    const std::string base = kSft + " finetuning_type=" + method + kShort + " output_dir=" + dir + "/" + method;
    auto one = train(1, base + "_one gradient_accumulation_steps=2");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    auto each = train(2, base + "_each ddp_bucket_cap_mb=0.01");
    ASSERT_EQ(each.exit_code, 0) << each.err;
    auto whole = train(2, base + "_whole");
    ASSERT_EQ(whole.exit_code, 0) << whole.err;
    // stories260K: 5 layers, the final norm and the (tied) embedding; LoRA trains only in layers.
    const bool full = method == "full";
    EXPECT_NE(each.err.find(full ? "gradients summed in 7 buckets (5 over decoder layers, up to 0 MB each)"
                                 : "gradients summed in 5 buckets (5 over decoder layers"),
              std::string::npos)
        << each.err;
    EXPECT_NE(whole.err.find(full ? "gradients summed in 3 buckets (1 over decoder layers, up to 25 MB each)"
                                  : "gradients summed in 1 bucket (1 over decoder layers"),
              std::string::npos)
        << whole.err;
    // Per step: one collective per bucket, one for the loss, two for the logged metrics (the
    // step's log line merges them: sizes, then the texts).
    EXPECT_EQ(number_after(each.err, "(process 0 of 2): "), full ? 10 : 8) << each.err;
    EXPECT_EQ(number_after(whole.err, "(process 0 of 2): "), full ? 6 : 4) << whole.err;
    EXPECT_NE(each.err.find("ms of it pending while backward computed"), std::string::npos) << each.err;
    EXPECT_EQ(testing::logged_figures(dir + "/" + method + "_each"), testing::logged_figures(dir + "/" + method + "_whole"));
    const std::string file = full ? "/model.safetensors" : "/adapter_model.safetensors";
    EXPECT_LE(max_weight_diff(dir + "/" + method + "_each" + file, dir + "/" + method + "_whole" + file), 0.0);
    expect_runs_close(dir + "/" + method + "_one", dir + "/" + method + "_each", method);
    EXPECT_LE(max_weight_diff(dir + "/" + method + "_one" + file, dir + "/" + method + "_each" + file), testing::layout_tol(1e-5));
  }
}

}  // namespace
}  // namespace unillm
