// deepspeed, fsdp, sharding, sharding_parallel_degree, tp_size and parallelism_config as the config reads them
// (src/train/args_parallel.cpp): the ZeRO stage and offload they give, DeepSpeed's "auto" and
// mismatch rules, and the values refused with the file and key named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "args_test_util.h"
#include "train/args.h"

namespace unillm::train {
namespace {

const std::string kBase = "model_name_or_path: m\nstage: sft\nfinetuning_type: full\n";

using testing_args::error_of;
using testing_args::parse;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string lf(const std::string& name) {
  return testing::source_path("tests/data/llamafactory_examples/deepspeed/" + name);
}

TEST(ParallelArgs, LlamaFactoryDeepSpeedConfigsGiveTheirStage) {
  EXPECT_EQ(parse(kBase).zero_stage, 0);
  for (const auto& [file, stage, offload] :
       std::vector<std::tuple<std::string, int64_t, bool>>{{"ds_z0_config.json", 0, false},
                                                           {"ds_z2_config.json", 2, false},
                                                           {"ds_z2_offload_config.json", 2, true},
                                                           {"ds_z3_config.json", 3, false},
                                                           {"ds_z3_offload_config.json", 3, true},
                                                           {"ds_z3_fp8_config.json", 3, true}}) {
    const TrainArgs a = parse(kBase + "deepspeed: " + lf(file) + "\n");
    EXPECT_EQ(a.zero_stage, stage) << file;
    EXPECT_EQ(a.zero_offload, offload) << file;
    EXPECT_TRUE(has(a.zero_from, "cfg.yaml line 4")) << a.zero_from;
    EXPECT_TRUE(has(a.zero_from, file)) << a.zero_from;
  }
  // An inline dict, as HF also takes.
  EXPECT_EQ(parse(kBase + "deepspeed: {zero_optimization: {stage: 1}}\n").zero_stage, 1);
}

TEST(ParallelArgs, DeepSpeedValuesMustAgreeWithTheTrainingKeys) {
  const std::string dir = testing::temp_dir("ds_args");
  std::ofstream(dir + "/ds.json") << R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": "auto",
    "gradient_clipping": 0.5, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2}})";
  const std::string e = error_of(kBase + "deepspeed: " + dir + "/ds.json\nper_device_train_batch_size: 2\n");
  EXPECT_TRUE(has(e, "3 problems")) << e;  // every mismatch at once
  EXPECT_TRUE(has(e, "'train_micro_batch_size_per_gpu' is 4 but per_device_train_batch_size is 2")) << e;
  EXPECT_TRUE(has(e, "'gradient_clipping' is 0.5 but max_grad_norm is 1")) << e;
  EXPECT_TRUE(has(e, "'bf16.enabled' is true but bf16 is false")) << e;
  // The same values given to both agree.
  const TrainArgs ok = parse(kBase + "deepspeed: " + dir + "/ds.json\nper_device_train_batch_size: 4\n"
                                     "max_grad_norm: 0.5\nbf16: true\n");
  EXPECT_EQ(ok.zero_stage, 2);
}

TEST(ParallelArgs, BadDeepSpeedFilesAreNamed) {
  const std::string dir = testing::temp_dir("ds_bad");
  std::string e = error_of(kBase + "deepspeed: " + dir + "/missing.json\n");
  EXPECT_TRUE(has(e, "cfg.yaml line 4")) << e;
  EXPECT_TRUE(has(e, "missing.json")) << e;
  std::ofstream(dir + "/bad.json") << "{\"zero_optimization\": {\"stage\": 4}}";
  e = error_of(kBase + "deepspeed: " + dir + "/bad.json\n");
  EXPECT_TRUE(has(e, "zero_optimization.stage is 4")) << e;
  std::ofstream(dir + "/broken.json") << "{\"zero_optimization\": ";
  e = error_of(kBase + "deepspeed: " + dir + "/broken.json\n");
  EXPECT_TRUE(has(e, "not valid JSON")) << e;
  std::ofstream(dir + "/nvme.json") << R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})";
  e = error_of<NotImplemented>(kBase + "deepspeed: " + dir + "/nvme.json\n");
  EXPECT_TRUE(has(e, "only cpu offload")) << e;
  e = error_of<NotImplemented>(kBase + "deepspeed: " + lf("ds_z2_autotp_config.json") + "\n");
  EXPECT_TRUE(has(e, "autotp_size 2")) << e;
  std::ofstream(dir + "/opt.json") << R"({"optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 2}})";
  e = error_of<NotImplemented>(kBase + "deepspeed: " + dir + "/opt.json\n");
  EXPECT_TRUE(has(e, "'optimizer' section")) << e;
}

TEST(ParallelArgs, FsdpAndPaddleShardingMapOntoTheSameStages) {
  EXPECT_EQ(parse(kBase + "fsdp: full_shard auto_wrap\n").zero_stage, 3);
  EXPECT_EQ(parse(kBase + "fsdp: shard_grad_op\n").zero_stage, 2);
  const TrainArgs off = parse(kBase + "fsdp: [shard_grad_op, offload]\nfsdp_config: {min_num_params: 0}\n");
  EXPECT_EQ(off.zero_stage, 2);
  EXPECT_TRUE(off.zero_offload);
  EXPECT_EQ(parse(kBase + "fsdp: no_shard\n").zero_stage, 0);
  EXPECT_EQ(parse(kBase + "fsdp: \"\"\n").zero_stage, 0);
  EXPECT_TRUE(has(error_of(kBase + "fsdp: full_sharded\n"), "'full_sharded'"));
  // hybrid_shard: full_shard within each host (the run finds how many processes that is).
  const TrainArgs hybrid = parse(kBase + "fsdp: hybrid_shard\n");
  EXPECT_EQ(hybrid.zero_stage, 3);
  EXPECT_TRUE(hybrid.sharding_per_host);
  EXPECT_EQ(parse(kBase + "fsdp: hybrid_shard_zero2 offload\n").zero_stage, 2);
  EXPECT_FALSE(parse(kBase + "fsdp: full_shard\n").sharding_per_host);
  EXPECT_TRUE(has(error_of(kBase + "fsdp: hybrid_shard\nsharding_parallel_degree: 2\n"),
                  "shards within each host; sharding degree 2"));
  EXPECT_EQ(parse(kBase + "sharding: stage1\n").zero_stage, 1);
  const TrainArgs p = parse(kBase + "sharding: stage2 offload\nsharding_parallel_degree: 2\n");
  EXPECT_EQ(p.zero_stage, 2);
  EXPECT_TRUE(p.zero_offload);
  EXPECT_EQ(p.sharding_degree, 2);
  EXPECT_TRUE(has(error_of(kBase + "sharding: stage4\n"), "stage1, stage2 or stage3"));
  EXPECT_TRUE(has(error_of(kBase + "sharding_parallel_degree: 0\n"), "sharding_parallel_degree"));
}

// transformers' tp_size is unillm's tensor parallelism of that degree; with PaddleNLP's
// tensor_parallel_degree too, the two must agree.
TEST(ParallelArgs, HfTpSizeIsTheTensorParallelDegree) {
  EXPECT_EQ(parse(kBase).tensor_degree, 1);
  EXPECT_EQ(parse(kBase + "tp_size: 2\n").tensor_degree, 2);
  EXPECT_EQ(parse(kBase + "tp_size: 1\n").tensor_degree, 1);
  EXPECT_EQ(parse(kBase + "tp_size: 2\ntensor_parallel_degree: 2\n").tensor_degree, 2);
  EXPECT_TRUE(has(error_of(kBase + "tp_size: 2\ntensor_parallel_degree: 4\n"),
                  "tp_size 2 and tensor_parallel_degree 4 ask for two tensor-parallel degrees"));
}

// accelerate's ParallelismConfig (HF's parallelism_config): tp_size is the tensor-parallel
// degree, dp_shard_size the sharding degree (FSDP's full shard unless a ZeRO key says otherwise,
// in either order), cp_size the context-parallel degree; the sizes multiply to the process count
// the trainer checks.
TEST(ParallelArgs, ParallelismConfigMapsOntoTheMesh) {
  const TrainArgs tp = parse(kBase + "parallelism_config: {tp_size: 2, dp_replicate_size: 2}\n");
  EXPECT_EQ(tp.tensor_degree, 2);
  EXPECT_EQ(tp.zero_stage, 0);
  ASSERT_TRUE(tp.parallelism);
  EXPECT_EQ(tp.parallelism->processes(), 4);
  const TrainArgs shard = parse(kBase + "parallelism_config:\n  dp_shard_size: 2\n  tp_handler: {enable_async_tp: false}\n");
  EXPECT_EQ(shard.zero_stage, 3);
  EXPECT_EQ(shard.sharding_degree, 2);
  EXPECT_TRUE(has(shard.zero_from, "parallelism_config: dp_shard_size 2")) << shard.zero_from;
  EXPECT_EQ(parse(kBase + "parallelism_config: {dp_shard_size: 2}\nfsdp: shard_grad_op\n").zero_stage, 2);
  EXPECT_EQ(parse(kBase + "fsdp: shard_grad_op\nparallelism_config: {dp_shard_size: 2}\n").zero_stage, 2);
  EXPECT_EQ(parse(kBase + "parallelism_config: {tp_size: 2}\ntensor_parallel_degree: 2\n").tensor_degree, 2);
  EXPECT_TRUE(has(error_of(kBase + "parallelism_config: {tp_size: 2}\ntensor_parallel_degree: 4\n"),
                  "parallelism_config.tp_size 2 and tensor degree 4"));
  EXPECT_TRUE(has(error_of(kBase + "parallelism_config: {dp_shard_size: 2}\nsharding_parallel_degree: 4\n"),
                  "ask for two sharding degrees"));
  EXPECT_TRUE(has(error_of(kBase + "parallelism_config: {tp_size: 0}\n"), "parallelism_config.tp_size is '0'"));
  EXPECT_TRUE(has(error_of(kBase + "parallelism_config: {pp_size: 2}\n"), "unknown key 'pp_size'"));
  EXPECT_TRUE(has(error_of(kBase + "parallelism_config: 2\n"), "a map of dp_replicate_size"));
  const TrainArgs cp = parse(kBase + "parallelism_config: {cp_size: 2, dp_replicate_size: 2}\n");
  EXPECT_EQ(cp.context_degree, 2);
  EXPECT_EQ(cp.parallelism->processes(), 4);
  EXPECT_TRUE(has(error_of(kBase + "parallelism_config: {cp_size: 2}\ncontext_parallel_degree: 4\n"),
                  "parallelism_config.cp_size 2 and context_parallel_degree 4 ask for two context-parallel degrees"));
  EXPECT_FALSE(parse(kBase + "parallelism_config: null\n").parallelism);
}

}  // namespace
}  // namespace unillm::train
