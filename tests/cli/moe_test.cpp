// Mixture-of-experts models (qwen3_moe, qwen2_moe) through the binary: `unillm init` of a tiny
// random model, LoRA SFT whose adapter reaches the experts, `export` merging it (the merged model
// generates what base + adapter generates), full training under ZeRO-3 on two processes equal to
// one process, the router load-balancing loss from LLaMA-Factory's moe_aux_loss_coef, GGUF export
// and import, and the refusals that name what is not built.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "run_compare_util.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::shell_quote;
using testing::source_path;

// hidden 64, 3 layers with the middle one dense, 8 experts of width 32 (2 per token), stories260K's
// tokenizer; qwen2_moe with a shared expert of width 48.
std::string tiny_moe(const std::string& work, const std::string& type, bool router_logits = false,
                     bool all_sparse = false) {
  const nlohmann::json c = {{"architectures", {type == "qwen2_moe" ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM"}},
                            {"model_type", type},
                            {"hidden_size", 64},
                            {"intermediate_size", 96},
                            {"num_hidden_layers", 3},
                            {"num_attention_heads", 4},
                            {"num_key_value_heads", 2},
                            {"head_dim", 16},
                            {"num_experts", 8},
                            {"num_experts_per_tok", 2},
                            {"moe_intermediate_size", 32},
                            {"shared_expert_intermediate_size", type == "qwen2_moe" ? 48 : 0},
                            {"norm_topk_prob", type == "qwen3_moe"},
                            {"mlp_only_layers", all_sparse ? nlohmann::json::array() : nlohmann::json::array({1})},
                            {"output_router_logits", router_logits},
                            {"vocab_size", 520},
                            {"max_position_embeddings", 256},
                            {"rms_norm_eps", 1e-6},
                            {"rope_theta", 1000000.0},
                            {"tie_word_embeddings", false},
                            {"bos_token_id", 1},
                            {"eos_token_id", 2},
                            {"initializer_range", 0.2}};
  const std::string name = type + (router_logits ? "_router" : "") + (all_sparse ? "_sparse" : "");
  const std::string cfg = work + "/" + name + ".json", dir = work + "/" + name;
  std::ofstream(cfg) << c.dump();
  auto r = run_unillm("init --config " + cfg + " --out " + dir + " --tokenizer " + shell_quote(source_path("assets/stories260K")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir;
}

const std::string kSft = "examples/train_lora/stories260K_lora_sft.yaml";
const std::string kShort = " max_steps=6 logging_steps=1 save_strategy=no max_samples=48 per_device_train_batch_size=4 "
                           "learning_rate=5e-3 --quiet";

TEST(Moe, LoraOnTheExpertsTrainsAndTheMergedModelGeneratesTheSame) {
  const std::string dir = testing::temp_dir("moe_lora");
  for (const std::string type : {"qwen3_moe", "qwen2_moe"}) {
    SCOPED_TRACE(type);
    const std::string model = tiny_moe(dir, type), out = dir + "/" + type + "_lora";
    auto t = testing::train_processes(1, kSft + kShort + " model_name_or_path=" + model + " output_dir=" + out);
    ASSERT_EQ(t.exit_code, 0) << t.err;
    std::vector<double> losses;
    for (const auto& j : testing::log_lines(out))
      if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
    ASSERT_EQ(losses.size(), 6u);
    EXPECT_LT(losses.back(), losses.front());
    auto f = io::SafetensorsFile::open(out + "/adapter_model.safetensors");
    EXPECT_TRUE(f->has("base_model.model.model.layers.0.mlp.experts.7.down_proj.lora_B.weight"));
    EXPECT_TRUE(f->has("base_model.model.model.layers.1.mlp.gate_proj.lora_A.weight"));  // the dense layer
    EXPECT_EQ(f->has("base_model.model.model.layers.2.mlp.shared_expert.up_proj.lora_A.weight"), type == "qwen2_moe");
    // The routers too, as PEFT's and LLaMA-Factory's "all" (every nn.Linear but the lm_head).
    EXPECT_TRUE(f->has("base_model.model.model.layers.0.mlp.gate.lora_B.weight"));
    EXPECT_EQ(f->has("base_model.model.model.layers.2.mlp.shared_expert_gate.lora_A.weight"), type == "qwen2_moe");
    const auto targets = nlohmann::json::parse(testing::slurp(out + "/adapter_config.json"))["target_modules"];
    EXPECT_EQ(std::count(targets.begin(), targets.end(), "gate"), 1) << targets.dump();
    EXPECT_EQ(std::count(targets.begin(), targets.end(), "shared_expert_gate"), type == "qwen2_moe" ? 1 : 0)
        << targets.dump();

    std::ofstream(dir + "/merge.yaml") << "model_name_or_path: " << model << "\nadapter_name_or_path: " << out
                                       << "\ntemplate: alpaca\nfinetuning_type: lora\nexport_dir: " << out << "_merged\n";
    auto ex = run_unillm("export " + dir + "/merge.yaml");
    ASSERT_EQ(ex.exit_code, 0) << ex.err;
    const auto merged_cfg = nlohmann::json::parse(testing::slurp(out + "_merged/config.json"));
    EXPECT_EQ(merged_cfg["num_experts"], 8);
    EXPECT_EQ(merged_cfg["mlp_only_layers"], nlohmann::json::array({1}));
    const std::string gen = " --prompt " + shell_quote("Once upon a time") + " --temperature 0 --max-new-tokens 16 --output-ids --quiet";
    auto merged = run_unillm("generate --model " + out + "_merged" + gen);
    auto adapted = run_unillm("generate --model " + model + " --adapter " + out + gen);
    auto base = run_unillm("generate --model " + model + gen);
    ASSERT_EQ(merged.exit_code, 0) << merged.err;
    ASSERT_EQ(adapted.exit_code, 0) << adapted.err;
    EXPECT_EQ(merged.out, adapted.out);
    EXPECT_NE(base.out, adapted.out) << "the adapter changed nothing";
  }
}

// Every expert (with or without tokens on a rank), the router and the dense layer in ZeRO-3's
// per-layer units: two processes give one process's losses and weights — with the router
// load-balancing loss too.
TEST(Moe, FullTrainingUnderZero3EqualsOneProcess) {
  const std::string dir = testing::temp_dir("moe_zero3");
  const std::string model = tiny_moe(dir, "qwen3_moe");
  // With the router load-balancing loss, summed over the step's micro-batches on every process.
  const std::string args =
      kSft + kShort + " finetuning_type=full learning_rate=1e-3 moe_aux_loss_coef=0.1 model_name_or_path=" + model;
  auto one = testing::train_processes(1, args + " output_dir=" + dir + "/one gradient_accumulation_steps=2");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto z3 = testing::train_processes(
      2, args + " output_dir=" + dir + "/z3 deepspeed=tests/data/llamafactory_examples/deepspeed/ds_z3_config.json");
  ASSERT_EQ(z3.exit_code, 0) << z3.err;
  testing::expect_runs_close(dir + "/one", dir + "/z3", "qwen3_moe");
  EXPECT_LE(testing::max_weight_diff(dir + "/one/model.safetensors", dir + "/z3/model.safetensors"), testing::layout_tol(1e-5));
}

// The quantize_weights pass reaches every expert and leaves the routers dense; int8 weights keep
// the perplexity of the held-out story within 1 % (the model is random: the bound is loose in
// absolute terms but the routing must survive quantisation).
TEST(Moe, Int8WeightsQuantiseTheExpertsAndKeepThePerplexity) {
  const std::string dir = testing::temp_dir("moe_quant");
  const std::string model = tiny_moe(dir, "qwen3_moe");
  auto ppl = [&](const std::string& flags, std::string* log) {
    auto r = run_unillm("eval ppl --model " + model + " --file " + source_path("tests/data/heldout/story.txt") +
                        " --json --threads 1 " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (log) *log = r.err;
    return nlohmann::json::parse(r.out).at("ppl").get<double>();
  };
  const double f32 = ppl("", nullptr);
  std::string log;
  const double int8 = ppl("--quant_type weight_only_int8", &log);
  // 2 sparse layers × (8 experts × 2 + q/k/v and o) + the dense layer's 4; the 2 routers stay dense.
  EXPECT_NE(log.find("[pass] quantize_weights: 40 linear layers to weight_only_int8"), std::string::npos) << log;
  EXPECT_LE(std::abs(int8 / f32 - 1), 0.01) << f32 << " vs " << int8;
}

// The first logged loss of a run (step 1 runs the initial weights).
double first_loss(const std::string& out) {
  for (const auto& j : testing::log_lines(out))
    if (j.contains("loss")) return j["loss"].get<double>();
  ADD_FAILURE() << "no loss logged in " << out;
  return NAN;
}

// The router load-balancing loss (its values and gradients are checked against the torch reference
// in tests/reference; here the path from the keys): LLaMA-Factory's moe_aux_loss_coef adds
// coef × aux to the logged loss — step 1 runs the same weights with and without it, so the
// difference / coef is the aux, which lies between 1 and E for 2 of 8 experts — and the saved
// config.json says it, as LLaMA-Factory's does; config.json's own output_router_logits adds its
// router_aux_loss_coef (HF's 0.001); stage dpo (which trains without it, as LLaMA-Factory's) and
// dense models are told.
TEST(Moe, RouterLoadBalancingLossFromMoeAuxLossCoefOrTheConfig) {
  const std::string dir = testing::temp_dir("moe_aux");
  const std::string model = tiny_moe(dir, "qwen3_moe"), router = tiny_moe(dir, "qwen3_moe", true);
  const std::string args = kSft + kShort + " max_steps=2 finetuning_type=full learning_rate=1e-3";
  auto plain = testing::train_processes(1, args + " model_name_or_path=" + model + " output_dir=" + dir + "/plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto aux = testing::train_processes(
      1, args + " model_name_or_path=" + model + " output_dir=" + dir + "/aux moe_aux_loss_coef=0.5");
  ASSERT_EQ(aux.exit_code, 0) << aux.err;
  EXPECT_NE(aux.err.find("router load-balancing loss: router_aux_loss_coef 0.5"), std::string::npos) << aux.err;
  const double a = (first_loss(dir + "/aux") - first_loss(dir + "/plain")) / 0.5;
  EXPECT_GE(a, 1.0);
  EXPECT_LE(a, 8.0);
  // Summed over a step's micro-batches (transformers' Trainer with these models): with 2 accumulated
  // micro-batches, the first being the batch above, step 1 adds coef · (aux_1 + aux_2) — about
  // twice the single batch's, where an average would add about as much.
  const std::string ga = " gradient_accumulation_steps=2 model_name_or_path=" + model;
  auto plain2 = testing::train_processes(1, args + ga + " output_dir=" + dir + "/plain2");
  auto aux2 = testing::train_processes(1, args + ga + " output_dir=" + dir + "/aux2 moe_aux_loss_coef=0.5");
  ASSERT_EQ(plain2.exit_code, 0) << plain2.err;
  ASSERT_EQ(aux2.exit_code, 0) << aux2.err;
  const double second = (first_loss(dir + "/aux2") - first_loss(dir + "/plain2")) / 0.5 - a;
  EXPECT_GE(second, 0.6 * a) << "the second micro-batch's aux (the first's is " << a << ")";
  EXPECT_LE(second, 1.6 * a);
  const auto cfg = nlohmann::json::parse(std::ifstream(dir + "/aux/config.json"));
  EXPECT_EQ(cfg.at("output_router_logits"), true);
  EXPECT_EQ(cfg.at("router_aux_loss_coef"), 0.5);

  auto own = testing::train_processes(1, args + " model_name_or_path=" + router + " output_dir=" + dir + "/own");
  ASSERT_EQ(own.exit_code, 0) << own.err;
  // 0.001 × aux, with the logged losses' 4 decimals.
  const double b = (first_loss(dir + "/own") - first_loss(dir + "/plain")) / 0.001;
  EXPECT_NEAR(b, a, 0.2) << "the same aux at the same weights";

  auto dpo = testing::train_processes(1, "examples/train_lora/stories260K_lora_dpo.yaml max_steps=1 --quiet "
                                         "moe_aux_loss_coef=0.5 model_name_or_path=" + model + " output_dir=" + dir + "/dpo");
  EXPECT_EQ(dpo.exit_code, 0) << dpo.err;
  EXPECT_NE(dpo.err.find("router load-balancing loss: not added in stage dpo, as in LLaMA-Factory"), std::string::npos)
      << dpo.err;
  auto dense = testing::train_processes(1, kSft + " max_steps=1 max_samples=8 save_strategy=no moe_aux_loss_coef=0.5 "
                                           "output_dir=" + dir + "/dense");
  EXPECT_EQ(dense.exit_code, 0) << dense.err;
  EXPECT_NE(dense.err.find("moe_aux_loss_coef: ignored"), std::string::npos) << dense.err;
}

// Under pipeline parallelism the load-balancing loss couples sparse layers on both processes (the
// 3 layers split [0, 2) and [2, 3): sparse layers 0 and 2): its totals travel with the
// activations and back, and the run is one process's with the same micro-batches — losses as
// logged (aux included), gradient norms within 1e-5, final weights within 1e-5.
TEST(Moe, LoadBalancingLossUnderPipelineStagesIsOneProcesses) {
  const std::string dir = testing::temp_dir("moe_aux_pp");
  for (const std::string type : {"qwen3_moe", "qwen2_moe"}) {
    const std::string args = kSft + kShort + " finetuning_type=full learning_rate=1e-3 moe_aux_loss_coef=0.5"
                             " gradient_accumulation_steps=2 model_name_or_path=" + tiny_moe(dir, type) +
                             " output_dir=" + dir + "/" + type;
    auto one = testing::train_processes(1, args + "_one");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    auto pp = testing::train_processes(2, args + "_pp pipeline_parallel_degree=2");
    ASSERT_EQ(pp.exit_code, 0) << pp.err;
    EXPECT_NE(pp.err.find("router load-balancing loss: router_aux_loss_coef 0.5"), std::string::npos) << pp.err;
    testing::expect_runs_close(dir + "/" + type + "_one", dir + "/" + type + "_pp", type);
    EXPECT_LE(testing::max_weight_diff(dir + "/" + type + "_one/model.safetensors",
                                       dir + "/" + type + "_pp/model.safetensors"),
              testing::layout_tol(1e-5));
  }
}

// Expert parallelism (nn/expert_parallel.h): each of two processes routes its own micro-batch and
// runs half of the experts on both processes' tokens. Full training with the load-balancing loss
// over two epochs of 11 batches (each epoch's last step has one micro-batch, so one process runs a
// stand-in) and evaluations of one batch (a stand-in again) gives one process's losses, gradient
// norms and weights with the same 2 micro-batches per step; LoRA on a qwen2_moe (shared expert)
// gives plain data parallelism's, and pipeline stages × expert groups on four processes
// (LLaMA-Factory's Megatron layout) one process's.
TEST(Moe, ExpertParallelismEqualsOneProcess) {
  const std::string dir = testing::temp_dir("moe_ep");
  const std::string full = kSft + " finetuning_type=full learning_rate=1e-3 moe_aux_loss_coef=0.1 max_samples=46 "
                           "per_device_train_batch_size=4 num_train_epochs=2 logging_steps=1 eval_steps=3 "
                           "save_strategy=no --quiet model_name_or_path=" + tiny_moe(dir, "qwen3_moe");
  auto one = testing::train_processes(1, full + " output_dir=" + dir + "/one gradient_accumulation_steps=2");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto ep = testing::train_processes(2, full + " output_dir=" + dir + "/ep expert_parallel_degree=2");
  ASSERT_EQ(ep.exit_code, 0) << ep.err;
  EXPECT_NE(ep.err.find("expert parallel: groups of 2 data-parallel processes"), std::string::npos) << ep.err;
  EXPECT_EQ(testing::logged_figures(dir + "/one").size(), 15u);  // 10 steps (the 6th of one micro-batch), 5 evaluations
  testing::expect_runs_close(dir + "/one", dir + "/ep", "qwen3_moe ep2");
  EXPECT_LE(testing::max_weight_diff(dir + "/one/model.safetensors", dir + "/ep/model.safetensors"),
            testing::layout_tol(1e-5));

  // LoRA at 5e-3 amplifies last-bit differences (Adam's first updates are ±lr for a gradient near
  // zero: two processes and one part by 3e-3 in the gradient norm of step 5), so it is checked
  // against plain data parallelism over the same two processes; its 6th step has one
  // micro-batch and no load-balancing loss (the stand-in's backward must still run).
  const std::string lora = kSft + kShort + " model_name_or_path=" + tiny_moe(dir, "qwen2_moe");
  auto ldp = testing::train_processes(2, lora + " output_dir=" + dir + "/lora_dp");
  ASSERT_EQ(ldp.exit_code, 0) << ldp.err;
  auto lep = testing::train_processes(2, lora + " output_dir=" + dir + "/lora_ep expert_parallel_degree=2");
  ASSERT_EQ(lep.exit_code, 0) << lep.err;
  // The frozen experts' base: each process holds its own 4 experts' of each sparse layer's 8, the
  // others' let go as each is read (Run::cut_on_load), so no process ever holds them all.
  EXPECT_NE(lep.err.find("holds only its own experts' frozen weights"), std::string::npos) << lep.err;
  EXPECT_NE(lep.err.find("(the others' let go as the model was read;"), std::string::npos) << lep.err;
  testing::expect_runs_close(dir + "/lora_dp", dir + "/lora_ep", "qwen2_moe LoRA ep2");
  EXPECT_LE(testing::max_weight_diff(dir + "/lora_dp/adapter_model.safetensors", dir + "/lora_ep/adapter_model.safetensors"),
            testing::layout_tol(1e-5));

  // Megatron's keys: pipeline stages 2 × expert groups of 2 (4 processes, 2 data-parallel pipelines;
  // the 3rd step has 3 micro-batches, so one pipeline runs a stand-in).
  const std::string pp = kSft + kShort + " finetuning_type=full learning_rate=1e-3 model_name_or_path=" +
                         tiny_moe(dir, "qwen3_moe", false, true);
  auto pone = testing::train_processes(1, pp + " output_dir=" + dir + "/pp_one gradient_accumulation_steps=4");
  ASSERT_EQ(pone.exit_code, 0) << pone.err;
  auto ppep = testing::train_processes(4, pp + " output_dir=" + dir + "/pp_ep gradient_accumulation_steps=2 "
                                       "pipeline_model_parallel_size=2 expert_model_parallel_size=2");
  ASSERT_EQ(ppep.exit_code, 0) << ppep.err;
  testing::expect_runs_close(dir + "/pp_one", dir + "/pp_ep", "qwen3_moe pp2 × ep2");
  EXPECT_LE(testing::max_weight_diff(dir + "/pp_one/model.safetensors", dir + "/pp_ep/model.safetensors"),
            testing::layout_tol(1e-5));
}

// Expert parallelism holds only its own experts' frozen weights (train/expert_shares.h): under
// freeze tuning (the first two layers frozen: the first is sparse) each of two processes keeps
// its experts' weights of that layer's, and the evaluations, checkpoints and final model, which
// have the others broadcast by their runners, are plain data parallelism's. (LLaMA-Factory's name
// rule trains layer 2 as every name holding ".2.", so layer 0's expert 2 trains too: 7 frozen
// experts, 3 of them run by process 0.)
TEST(Moe, ExpertParallelismHoldsOnlyItsOwnFrozenExperts) {
  const std::string dir = testing::temp_dir("moe_ep_frozen");
  const std::string freeze = kSft + kShort + " save_strategy=steps save_steps=3 eval_steps=3 finetuning_type=freeze "
                             "freeze_trainable_layers=1 model_name_or_path=" + tiny_moe(dir, "qwen3_moe");
  auto dp = testing::train_processes(2, freeze + " output_dir=" + dir + "/dp");
  ASSERT_EQ(dp.exit_code, 0) << dp.err;
  auto ep = testing::train_processes(2, freeze + " expert_parallel_degree=2 output_dir=" + dir + "/ep");
  ASSERT_EQ(ep.exit_code, 0) << ep.err;
  // Layer 0's frozen experts: 7 × (gate/up 64 × 64 + down 64 × 32) f32 = 0.16 MiB, 3 of them 0.07.
  // Freeze tuning's rules are names, so the others' frozen experts are let go as the model is read
  // (the trainable expert 2 of layer 0 is read and kept whole).
  EXPECT_NE(ep.err.find("holds only its own experts' frozen weights: 0.07 of 0.16 MiB (the others' let go as the model "
                        "was read;"),
            std::string::npos)
      << ep.err;
  testing::expect_runs_close(dir + "/dp", dir + "/ep", "qwen3_moe freeze ep2");
  for (const std::string sub : {"", "/checkpoint-3"})
    EXPECT_LE(testing::max_weight_diff(dir + "/dp" + sub + "/model.safetensors", dir + "/ep" + sub + "/model.safetensors"),
              testing::layout_tol(1e-5))
        << sub;
}

// Context parallelism (tests/cli/context_parallel_test.cpp): the sparse layers run whole on each
// process's tokens — one process's run; the load-balancing loss, which couples every token of a
// micro-batch, is refused.
TEST(Moe, ContextParallelismEqualsOneProcess) {
  const std::string dir = testing::temp_dir("moe_cp");
  const std::string model = tiny_moe(dir, "qwen3_moe");
  const std::string base = kSft + kShort + " finetuning_type=full learning_rate=1e-3 model_name_or_path=" + model +
                           " output_dir=" + dir;
  const std::string args = kSft + kShort + " finetuning_type=full learning_rate=1e-3 gradient_accumulation_steps=2 "
                           "model_name_or_path=" + model + " output_dir=" + dir;
  auto one = testing::train_processes(1, args + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto cp = testing::train_processes(2, args + "/cp context_parallel_degree=2");
  ASSERT_EQ(cp.exit_code, 0) << cp.err;
  testing::expect_runs_close(dir + "/one", dir + "/cp", "qwen3_moe cp2");
  EXPECT_LE(testing::max_weight_diff(dir + "/one/model.safetensors", dir + "/cp/model.safetensors"),
            testing::layout_tol(1e-5));
  // Beside expert parallelism (4 processes: 2 data-parallel replicas of a cp2 pair, each sparse
  // layer's experts split over the replicas): the same run.
  auto epcp = testing::train_processes(4, base + "/epcp context_parallel_degree=2 expert_parallel_degree=2");
  ASSERT_EQ(epcp.exit_code, 0) << epcp.err;
  testing::expect_runs_close(dir + "/one", dir + "/epcp", "qwen3_moe cp2 × ep2");
  EXPECT_LE(testing::max_weight_diff(dir + "/one/model.safetensors", dir + "/epcp/model.safetensors"),
            testing::layout_tol(1e-5));
  testing::expect_refused(args + "/aux context_parallel_degree=2",
                          {{2, " moe_aux_loss_coef=0.1", "with the router load-balancing loss (router_aux_loss_coef 0.1)"}});
}

TEST(Moe, ExpertParallelismRefusesWhatCannotSplit) {
  const std::string dir = testing::temp_dir("moe_ep_refusals");
  const std::string model = tiny_moe(dir, "qwen3_moe");
  const std::string base = kSft + kShort + " output_dir=" + dir + "/out";
  testing::expect_refused(
      base + " model_name_or_path=" + model,
      {{1, " expert_parallel_degree=2", "expert_parallel_degree 2 splits the experts over processes; run it under mpirun"},
       {2, " expert_parallel_degree=4", "expert_parallel_degree 4 must divide the data-parallel processes (2 of 2)"},
       {2, " expert_parallel_degree=2 pipeline_parallel_degree=2",
        "expert_parallel_degree 2 must divide the data-parallel processes (1 of 2)"},
       {2, " expert_parallel_degree=2 expert_model_parallel_size=4",
        "expert_model_parallel_size 4 and expert_parallel_degree 2 ask for two sizes"}});
  testing::expect_refused(base + " model_name_or_path=assets/stories260K",
                          {{2, " expert_parallel_degree=2", "expert parallelism needs a mixture-of-experts model"}});
}

TEST(Moe, WhatIsNotBuiltIsRefusedWithItsReason) {
  const std::string dir = testing::temp_dir("moe_refusals");
  // Inference is unaffected by output_router_logits.
  const std::string router = tiny_moe(dir, "qwen3_moe", true);
  auto g = run_unillm("generate --model " + router + " --prompt Hi --max-new-tokens 4 --temperature 0 --quiet");
  EXPECT_EQ(g.exit_code, 0) << g.err;

  const std::string model = tiny_moe(dir, "qwen3_moe");
  auto tp = testing::train_processes(2, kSft + kShort + " model_name_or_path=" + model + " output_dir=" + dir +
                                            "/tp tensor_parallel_degree=2");
  EXPECT_NE(tp.exit_code, 0);
  EXPECT_NE(tp.err.find("tensor parallelism over a mixture-of-experts layer is not implemented"), std::string::npos)
      << tp.err;
  // llama.cpp's qwen3moe has a sparse block in every layer: a dense layer between is refused.
  auto gguf = run_unillm("export --format gguf --model " + model + " --output " + dir + "/m.gguf");
  EXPECT_NE(gguf.exit_code, 0);
  EXPECT_NE(gguf.err.find("this model's layers 1 are dense"), std::string::npos) << gguf.err;
  EXPECT_FALSE(fs::exists(dir + "/m.gguf"));
}

// GGUF both ways (the files' names, types and metadata are checked against gguf-py in
// tests/reference/gguf_check.py; llama.cpp's own logits in gguf_llama_cpp_check.py): an f32
// export converts back to the same weights bit for bit and generates the same tokens; a q8_0
// export converts back within 1 % of the perplexity.
TEST(Moe, GgufExportConvertsBackToTheSameModel) {
  const std::string dir = testing::temp_dir("moe_gguf");
  for (const std::string type : {"qwen3_moe", "qwen2_moe"}) {
    SCOPED_TRACE(type);
    const std::string model = tiny_moe(dir, type, false, true);
    auto gen = [](const std::string& m) {
      auto r = run_unillm("generate --model " + m + " --prompt-ids 1,45,300,7 --max-new-tokens 12 --temperature 0 --quiet");
      EXPECT_EQ(r.exit_code, 0) << r.err;
      return r.out;
    };
    auto ppl = [](const std::string& m) {
      auto r = run_unillm("eval ppl --model " + m + " --file " + source_path("tests/data/heldout/story.txt") + " --json --threads 1");
      EXPECT_EQ(r.exit_code, 0) << r.err;
      return nlohmann::json::parse(r.out).at("ppl").get<double>();
    };
    for (const std::string q : {"f32", "q8_0"}) {
      const std::string file = dir + "/" + type + "-" + q + ".gguf", back = dir + "/" + type + "-" + q;
      auto e = run_unillm("export --format gguf --model " + model + " --output " + file + " --quant_type " + q);
      ASSERT_EQ(e.exit_code, 0) << e.err;
      auto c = run_unillm("convert gguf --input " + file + " --out " + back);
      ASSERT_EQ(c.exit_code, 0) << c.err;
      if (q == "f32") {
        EXPECT_EQ(testing::max_weight_diff(model + "/model.safetensors", back + "/model.safetensors"), 0.0);
        EXPECT_EQ(gen(back), gen(model));
      } else {
        EXPECT_LE(std::abs(ppl(back) / ppl(model) - 1), 0.01);
      }
    }
  }
}

}  // namespace
}  // namespace unillm
