// The keys of LLaMA-Factory's Megatron paths (USE_MCA / USE_MEGATRON_BRIDGE; args_megatron.cpp)
// as the config reads them: the sizes onto unillm's tensor and pipeline degrees (and their clash
// with the PaddleNLP degree), the distributed optimizer onto ZeRO-1, recompute, packing, mixed
// precision, the loss normalisation and expert parallelism; context parallelism, fp8 recipes, Megatron
// checkpoints and extra_config refused, every one at once with its line.
#include <gtest/gtest.h>

#include "args_test_util.h"
#include "core/error.h"
#include "train/args.h"

namespace unillm::train {
namespace {

const std::string kBase = "model_name_or_path: m\nstage: sft\nfinetuning_type: full\n";

using testing_args::error_of;
using testing_args::parse;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(MegatronArgs, SizesBecomeTheTensorAndPipelineDegrees) {
  const TrainArgs a = parse(kBase +
                            "tensor_model_parallel_size: 2\npipeline_model_parallel_size: 4\n"
                            "virtual_pipeline_model_parallel_size: 2\nsequence_parallel: true\n"
                            "context_parallel_size: 1\nexpert_model_parallel_size: 1\n");
  EXPECT_EQ(a.tensor_degree, 2);
  EXPECT_EQ(a.pipeline_degree, 4);
  EXPECT_EQ(a.virtual_pp_degree, 2);
  EXPECT_EQ(a.expert_degree, 1);
  EXPECT_EQ(a.context_degree, 1);
  // context_parallel_size is context parallelism (PaddleNLP's context_parallel_degree).
  EXPECT_EQ(parse(kBase + "context_parallel_size: 2\n").context_degree, 2);
  EXPECT_TRUE(a.sequence_parallel);
  // expert_model_parallel_size is expert parallelism (PaddleNLP's expert_parallel_degree).
  EXPECT_EQ(parse(kBase + "pipeline_model_parallel_size: 4\nexpert_model_parallel_size: 2\n").expert_degree, 2);
  EXPECT_EQ(parse(kBase + "expert_model_parallel_size: 2\nexpert_parallel_degree: 2\n").expert_degree, 2);
  EXPECT_TRUE(has(error_of(kBase + "expert_model_parallel_size: 2\nexpert_parallel_degree: 4\n"),
                  "expert_model_parallel_size 2 and expert_parallel_degree 4 ask for two sizes"));
  // The defaults: no model parallelism, token-weighted loss, no ZeRO.
  const TrainArgs d = parse(kBase + "tensor_model_parallel_size: 1\nvirtual_pipeline_model_parallel_size: null\n");
  EXPECT_EQ(d.tensor_degree, 1);
  EXPECT_EQ(d.pipeline_degree, 1);
  EXPECT_EQ(d.virtual_pp_degree, 1);
  EXPECT_FALSE(d.micro_batch_mean_loss);
  EXPECT_EQ(d.zero_stage, 0);
  // The same size under both names is one request; two sizes are refused.
  EXPECT_EQ(parse(kBase + "tensor_model_parallel_size: 2\ntensor_parallel_degree: 2\n").tensor_degree, 2);
  const std::string e = error_of(kBase + "tensor_model_parallel_size: 2\ntensor_parallel_degree: 4\n");
  EXPECT_TRUE(has(e, "tensor_model_parallel_size 2 and tensor_parallel_degree 4 ask for two sizes")) << e;
  EXPECT_TRUE(has(error_of(kBase + "pipeline_model_parallel_size: 0\n"), "line 4")) << "0 is not a size";
}

TEST(MegatronArgs, OptimizerRecomputePackingAndPrecision) {
  const TrainArgs a = parse(kBase +
                            "use_distributed_optimizer: true\nrecompute_granularity: selective\n"
                            "recompute_method: uniform\nrecompute_num_layers: 1\ndisable_gradient_checkpointing: true\n"
                            "use_packed_sequences: true\nmixed_precision: bf16_mixed\ncalculate_per_token_loss: false\n"
                            "export_hf_on_finish: false\noverlap_grad_reduce: true\napply_rope_fusion: true\n");
  EXPECT_EQ(a.zero_stage, 1);
  EXPECT_TRUE(has(a.zero_from, "use_distributed_optimizer")) << a.zero_from;
  // Keys apply in line order: recompute_granularity (line 5) before disable_gradient_checkpointing (line 8).
  EXPECT_TRUE(a.disable_gradient_checkpointing);
  EXPECT_FALSE(parse(kBase + "disable_gradient_checkpointing: true\nrecompute_granularity: full\n")
                   .disable_gradient_checkpointing);
  EXPECT_TRUE(a.neat_packing);
  EXPECT_TRUE(a.packing);
  EXPECT_TRUE(a.bf16);
  EXPECT_TRUE(a.micro_batch_mean_loss);
  EXPECT_FALSE(parse(kBase + "calculate_per_token_loss: true\n").micro_batch_mean_loss);
  EXPECT_TRUE(parse(kBase + "mixed_precision: fp16_mixed\n").fp16);
  // The speed-only keys are accepted with a warning.
  bool warned = false;
  for (const auto& w : a.warnings) warned |= has(w, "'apply_rope_fusion' is accepted and ignored");
  EXPECT_TRUE(warned);
  // A DeepSpeed/FSDP key says which ZeRO stage; the distributed optimizer does not lower it.
  EXPECT_EQ(parse(kBase + "fsdp: full_shard\nuse_distributed_optimizer: true\n").zero_stage, 3);
  EXPECT_EQ(parse(kBase + "use_distributed_optimizer: false\n").zero_stage, 0);
}

TEST(MegatronArgs, WhatUnillmLacksIsRefusedAllAtOnce) {
  const std::string e = error_of<NotImplemented>(kBase +
                                                 "context_parallel_size: 2\nexpert_model_parallel_size: 2\n"
                                                 "mixed_precision: bf16_with_fp8_delayed_scaling_mixed\n"
                                                 "megatron_pretrained_checkpoint: /ckpt\nextra_config: '{\"a\": 1}'\n");
  // (context_parallel_size 2 and expert_model_parallel_size 2 are built.)
  EXPECT_TRUE(has(e, "3 problems")) << e;
  EXPECT_TRUE(has(e, "line 6: key 'mixed_precision'")) << e;
  EXPECT_TRUE(has(e, "line 7: key 'megatron_pretrained_checkpoint'")) << e;
  EXPECT_TRUE(has(e, "line 8: key 'extra_config'")) << e;
  EXPECT_TRUE(has(error_of(kBase + "recompute_granularity: some\n"), "line 4")) << "not a granularity";
  EXPECT_TRUE(has(error_of(kBase + "mixed_precision: bf8\n"), "bf16_mixed, fp16_mixed or fp32"));
}

TEST(MegatronArgs, UseKtTrainsOnUnillmsKernelsWithANote) {
  const TrainArgs a = parse(kBase + "use_kt: true\n");
  bool noted = false;
  for (const auto& w : a.warnings) noted |= has(w, "line 4: use_kt: KTransformers");
  EXPECT_TRUE(noted);
  for (const auto& w : parse(kBase + "use_kt: false\n").warnings) EXPECT_FALSE(has(w, "use_kt")) << w;
}

}  // namespace
}  // namespace unillm::train
