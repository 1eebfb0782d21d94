// LLaMA-Factory v1 configs (train/args_v1.cpp): recognised by their keys, mapped onto unillm's
// with v1's fixed trainer semantics, every refused key listed at once with its line. The
// vendored examples (tests/data/llamafactory_examples/v1) are read as they are.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/args.h"

namespace unillm::train {
namespace {

std::string example(const std::string& name) {
  return std::string(UNILLM_SOURCE_DIR) + "/tests/data/llamafactory_examples/v1/" + name;
}

bool has_warning(const TrainArgs& a, const std::string& needle) {
  for (const auto& w : a.warnings)
    if (w.find(needle) != std::string::npos) return true;
  return false;
}

template <typename E = ConfigError>
std::string error_of(const std::string& yaml, const std::vector<std::string>& ov = {}) {
  try {
    parse_train_args(yaml, "v1.yaml", ov);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no error";
}

TEST(V1Args, LoraExampleMapsOntoUnillmKeysWithV1Semantics) {
  TrainArgs a = load_train_args(example("train_lora/train_lora_sft.yaml"), {});
  EXPECT_EQ(a.model_name_or_path, "Qwen/Qwen3-4B");
  EXPECT_EQ(a.stage, "sft");
  EXPECT_TRUE(a.do_train);
  EXPECT_EQ(a.v1_train_dataset, "data/v1_sft_demo.yaml");
  EXPECT_EQ(a.finetuning_type, "lora");
  EXPECT_EQ(a.lora_rank, 16);
  EXPECT_DOUBLE_EQ(*a.lora_alpha, 32);
  EXPECT_DOUBLE_EQ(a.lora_dropout, 0.05);
  EXPECT_EQ(a.lora_target, std::vector<std::string>{"all"});
  EXPECT_EQ(a.zero_stage, 3);  // dist_config fsdp2: FSDP full sharding
  EXPECT_EQ(a.per_device_train_batch_size, 1);
  EXPECT_EQ(a.gradient_accumulation_steps, 1);
  EXPECT_FALSE(a.v1_global_batch_size);
  EXPECT_EQ(a.cutoff_len, 2048);
  EXPECT_DOUBLE_EQ(a.learning_rate, 1e-4);
  EXPECT_EQ(a.max_steps, 10);
  // v1's trainer: torch AdamW defaults on one group, a constant rate, bf16, checkpointing on.
  EXPECT_DOUBLE_EQ(a.weight_decay, 0.01);
  EXPECT_TRUE(a.decay_all_params);
  EXPECT_DOUBLE_EQ(a.adam_beta2, 0.999);
  EXPECT_EQ(a.lr_scheduler_type, "constant");
  EXPECT_TRUE(a.bf16);
  EXPECT_FALSE(a.disable_gradient_checkpointing);
  EXPECT_DOUBLE_EQ(a.max_grad_norm, 1.0);
  EXPECT_EQ(a.save_strategy, "no");
  EXPECT_FALSE(a.save_final_step);
  EXPECT_EQ(a.logging_steps, 1);
  EXPECT_TRUE(has_warning(a, "'kernel_config' is accepted and ignored"));
  EXPECT_TRUE(has_warning(a, "'max_new_tokens' is accepted and ignored"));
}

TEST(V1Args, FreezeDeepspeedAndMuonExamples) {
  TrainArgs f = load_train_args(example("train_freeze/train_freeze_sft.yaml"), {});
  EXPECT_EQ(f.finetuning_type, "freeze");
  EXPECT_EQ(f.freeze_trainable_layers, 2);
  EXPECT_EQ(f.freeze_trainable_modules, std::vector<std::string>{"all"});
  EXPECT_TRUE(f.freeze_extra_modules.empty());
  // Its config_file (examples/deepspeed/ds_z3_config.json from LLaMA-Factory's root) vendored here.
  TrainArgs d = load_train_args(example("train_full/train_full_deepspeed.yaml"),
                                {"dist_config.config_file=" + std::string(UNILLM_SOURCE_DIR) +
                                 "/tests/data/llamafactory_examples/deepspeed/ds_z3_config.json"});
  EXPECT_EQ(d.finetuning_type, "full");
  EXPECT_EQ(d.zero_stage, 3);  // its config_file is examples/deepspeed/ds_z3_config.json
  TrainArgs m = load_train_args(example("train_full/train_full_muon.yaml"), {});
  EXPECT_TRUE(m.use_muon);
  EXPECT_DOUBLE_EQ(m.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(m.adam_beta1, 0.9);
  EXPECT_DOUBLE_EQ(m.adam_beta2, 0.95);
  EXPECT_DOUBLE_EQ(m.adam_epsilon, 1e-8);
}

TEST(V1Args, DefaultsAndBatchKeys) {
  TrainArgs a = parse_train_args(
      "model: m\ntrain_dataset: d.yaml\nmicro_batch_size: 2\nglobal_batch_size: 8\nsave_steps: 5\n"
      "enable_activation_checkpointing: false\nbf16: false\n",
      "v1.yaml");
  EXPECT_EQ(a.finetuning_type, "full");
  EXPECT_EQ(a.per_device_train_batch_size, 2);
  EXPECT_EQ(*a.v1_global_batch_size, 8);  // accumulation once the process count is known
  EXPECT_EQ(a.num_train_epochs, 3);
  EXPECT_EQ(a.save_strategy, "steps");
  EXPECT_EQ(a.save_steps, 5);
  EXPECT_TRUE(a.disable_gradient_checkpointing);
  EXPECT_FALSE(a.bf16);
  EXPECT_EQ(a.seed, 42u);
  // LoraParams' own defaults when peft_config names only the plugin.
  TrainArgs l = parse_train_args("model: m\ntrain_dataset: d.yaml\npeft_config:\n  name: lora\n", "v1.yaml");
  EXPECT_EQ(l.lora_rank, 8);
  EXPECT_DOUBLE_EQ(*l.lora_alpha, 16);
  EXPECT_DOUBLE_EQ(l.lora_dropout, 0.05);
  // A v0 file is not read as v1, and v0 cannot name the internal fields.
  EXPECT_NE(error_of("model_name_or_path: m\nv1_train_dataset: d\n").find("unknown key 'v1_train_dataset'"),
            std::string::npos);
}

// fsdpturbo is FSDP2 with the experts split over ep_size processes: ZeRO-3 and expert
// parallelism; its dispatcher and wrapping switches are accepted with a warning.
TEST(V1Args, CpSizeIsContextParallelism) {
  TrainArgs a = load_train_args(example("train_full/train_full_ulysses_cp.yaml"), {});
  EXPECT_EQ(a.context_degree, 2);
  EXPECT_EQ(a.zero_stage, 3);  // its dist_config fsdp2
}

TEST(V1Args, FsdpturboIsFullShardingWithExpertParallelism) {
  TrainArgs a = load_train_args(example("train_full/train_full_qwen3_moe_fsdpturbo_ep_fsdp.yaml"), {});
  EXPECT_EQ(a.zero_stage, 3);
  EXPECT_EQ(a.expert_degree, 16);
  bool warned = false;
  for (const auto& w : a.warnings) warned |= w.find("dist_config.ep_dispatcher") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST(V1Args, EveryUnsupportedKeyIsReportedAtOnce) {
  const std::string e = error_of(
      "model: m\nmodel_class: vlm\ntrain_dataset: d.yaml\nbatching_strategy: dynamic_batching\ncp_mode: ring\n"
      "quant_config:\n  name: gptq\ninit_config:\n  name: init_on_mars\n"
      "dist_config:\n  name: fsdpturbo\n  dcp_path: /x\nsurprise: 1\n",
      {"stage=ppo"});
  EXPECT_NE(e.find("8 problems"), std::string::npos) << e;  // (cp_size 2 is context parallelism)
  for (const char* needle : {"v1.yaml line 2: LLaMA-Factory v1 model_class", "line 4: batching_strategy dynamic_batching needs max_steps",
                             "line 5: unknown cp_mode 'ring'", "line 6: unknown quant_config 'gptq'",
                             "line 8: unknown init_config 'init_on_mars'", "line 12: LLaMA-Factory v1 dist_config.dcp_path",
                             "line 13: unknown LLaMA-Factory v1 key 'surprise'",
                             "command line: stage 'ppo': LLaMA-Factory v1's trainers are sft, dpo and rm"})
    EXPECT_NE(e.find(needle), std::string::npos) << needle << "\n" << e;
  EXPECT_NE(error_of("model: m\nmicro_batch_size: 1\n").find("needs train_dataset"), std::string::npos);
  EXPECT_NE(error_of("model: m\ntrain_dataset: d\nbatching_strategy: greedy\n")
                .find("line 3: unknown batching_strategy 'greedy' (normal, padding_free, dynamic_batching, "
                      "dynamic_padding_free)"),
            std::string::npos);
  EXPECT_NE(error_of("model: m\ntrain_dataset: d\noptim_config:\n  name: muon\n  momentum: 0.9\n")
                .find("line 5: LLaMA-Factory v1 optim_config.momentum"),
            std::string::npos);
  EXPECT_NE(error_of("model: m\ntrain_dataset: d\nlr_scheduler_config:\n  name: cosine\n")
                .find("registers no learning-rate scheduler"),
            std::string::npos);
  EXPECT_NE(error_of("model: m\ntrain_dataset: d\npeft_config:\n  name: lora\n  rank: 4\n")
                .find("line 5: unknown LoRA key 'rank'"),
            std::string::npos);
}

TEST(V1Args, QuantAndInitExamples) {
  // quant_config bnb 4-bit: bitsandbytes' nf4 with double quantisation under LoRA (v0's QLoRA).
  TrainArgs q = load_train_args(example("train_qlora/quantization.yaml"), {});
  EXPECT_EQ(q.finetuning_type, "lora");
  EXPECT_EQ(q.quantization_bit, 4);
  EXPECT_EQ(q.quantization_type, "nf4");
  EXPECT_TRUE(q.double_quantization);
  TrainArgs e = parse_train_args(
      "model: m\ntrain_dataset: d\npeft_config: lora\nquant_config:\n  name: auto\n", "v1.yaml");
  EXPECT_EQ(e.quantization_bit, 0);  // auto without a bit: no quantisation, as v1
  TrainArgs p = load_train_args(example("train_batching_strategy/train_full_fsdp2_padding_free.yaml"), {});
  EXPECT_TRUE(has_warning(p, "padding_free trains the same micro-batches as normal"));
  TrainArgs r = load_train_args(example("train_lora/train_lora_sft_rank0.yaml"), {});
  EXPECT_TRUE(has_warning(r, "'init_config' is accepted and ignored"));
}

TEST(V1Args, ExportExampleMergesTheAdapter) {
  TrainArgs a = load_train_args(example("train_lora/export_lora.yaml"), {}, ConfigUse::kExport);
  EXPECT_EQ(a.model_name_or_path, "Qwen/Qwen3-4B");
  EXPECT_EQ(a.adapter_name_or_path, std::vector<std::string>{"./outputs/test_lora"});
  EXPECT_EQ(a.export_dir, "./merge_lora_model");
  EXPECT_EQ(a.export_size, 5);
  try {
    parse_train_args("model: m\npeft_config:\n  name: lora\n  export_dir: o\n  infer_dtype: bfloat16\n", "v1.yaml",
                     {}, ConfigUse::kExport);
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("needs peft_config.adapter_name_or_path"), std::string::npos) << m;
    EXPECT_NE(m.find("line 5: LLaMA-Factory v1 peft_config.infer_dtype"), std::string::npos) << m;
  }
}

// `llamafactory-cli dpo CFG` is `unillm train CFG stage=dpo`: the preference keys then mean what
// v0's do; under sft they are ignored with a warning.
TEST(V1Args, StageDpoTakesThePreferenceKeys) {
  TrainArgs d = load_train_args(example("train_lora/train_lora_dpo.yaml"),
                                {"stage=dpo", "pref_beta=0.2", "pref_loss=simpo", "simpo_gamma=0.3", "ld_alpha=0.5"});
  EXPECT_EQ(d.stage, "dpo");
  EXPECT_EQ(d.finetuning_type, "lora");
  EXPECT_EQ(d.pref_loss, "simpo");
  EXPECT_DOUBLE_EQ(d.pref_beta, 0.2);
  EXPECT_DOUBLE_EQ(d.simpo_gamma, 0.3);
  EXPECT_DOUBLE_EQ(*d.ld_alpha, 0.5);
  EXPECT_DOUBLE_EQ(d.learning_rate, 1e-5);
  TrainArgs s = parse_train_args("model: m\ntrain_dataset: d\npref_beta: 0.3\n", "v1.yaml");
  EXPECT_EQ(s.stage, "sft");
  EXPECT_TRUE(has_warning(s, "'pref_beta' is accepted and ignored (a preference key; v1's sft"));
  EXPECT_NE(error_of("model: m\ntrain_dataset: d\npref_loss: kto_pair\n", {"stage=dpo"})
                .find("line 3: pref_loss 'kto_pair': LLaMA-Factory v1's dpo has sigmoid, orpo and simpo"),
            std::string::npos);
  // stage=rm is `llamafactory-cli rm`: v1's reward model, which reads no preference key.
  TrainArgs rm = parse_train_args("model: m\ntrain_dataset: d\npref_beta: 0.3\n", "v1.yaml", {"stage=rm"});
  EXPECT_EQ(rm.stage, "rm");
  EXPECT_EQ(rm.v1_train_dataset, "d");
  EXPECT_TRUE(has_warning(rm, "'pref_beta' is accepted and ignored (a preference key; v1's rm does not read it"));
}

TEST(V1Args, CommandLineOverridesReplaceTheFilesValues) {
  TrainArgs a = load_train_args(example("train_lora/train_lora_sft.yaml"),
                                {"model=/tmp/tiny", "max_steps=2", "learning_rate=3e-4"});
  EXPECT_EQ(a.model_name_or_path, "/tmp/tiny");
  EXPECT_EQ(a.max_steps, 2);
  EXPECT_DOUBLE_EQ(a.learning_rate, 3e-4);
}

}  // namespace
}  // namespace unillm::train
