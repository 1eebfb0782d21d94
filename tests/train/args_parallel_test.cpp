// deepspeed, fsdp, sharding and sharding_parallel_degree as the config reads them
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
  EXPECT_TRUE(has(error_of<NotImplemented>(kBase + "fsdp: hybrid_shard\n"), "hybrid_shard"));
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

}  // namespace
}  // namespace unillm::train
