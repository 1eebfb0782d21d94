// The PaddleNLP dialect on PaddleNLP's official llm/config/llama files (tests/cli/paddlenlp_llama/)
// and the keys whose meaning depends on the script: run_pretrain.py (input_dir) or run_finetune.py.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/json_file.h"
#include "train/args.h"

namespace unillm::train {
namespace {

std::string official(const std::string& name) {
  return std::string(UNILLM_SOURCE_DIR) + "/tests/cli/paddlenlp_llama/" + name;
}

template <typename E = ConfigError>
std::string error_of(const std::string& json, const std::vector<std::string>& ov = {}) {
  try {
    parse_paddle_args(json, "a.json", ov);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no error";
}

bool has_warning(const TrainArgs& a, const std::string& needle) {
  for (const auto& w : a.warnings)
    if (w.find(needle) != std::string::npos) return true;
  return false;
}

const std::string kPre = R"({"model_name_or_path": "m", "input_dir": "d", )";
const std::string kSft = R"({"model_name_or_path": "m", "dataset_name_or_path": "d", )";

TEST(PaddleArgs, OfficialPretrainArguments) {
  TrainArgs a = load_train_args(official("pretrain_argument.json"), {});
  EXPECT_EQ(a.tensor_degree, 2);  // run under two processes (tests/cli/paddlenlp_test.cpp)
  EXPECT_EQ(a.zero_stage, 2);
  EXPECT_EQ(a.stage, "pt");
  EXPECT_EQ(a.cutoff_len, 4096);
  EXPECT_TRUE(a.pretrain_annealing);  // lr_scheduler_type linear (the default)
  EXPECT_DOUBLE_EQ(a.min_learning_rate, 3e-6);
  EXPECT_FALSE(a.decay_steps);  // max_steps
  EXPECT_TRUE(a.do_predict);
  EXPECT_EQ(a.tokenizer_name_or_path, "assets/stories260K");
  EXPECT_TRUE(has_warning(a, "'distributed_dataloader' is accepted and ignored"));
  EXPECT_FALSE(has_warning(a, "continue_training"));  // 1: from the pretrained weights, as here
  EXPECT_TRUE(a.disable_gradient_checkpointing);      // recompute: false
}

TEST(PaddleArgs, PretrainScheduleKeys) {
  TrainArgs d = parse_paddle_args(kPre + R"("max_steps": 10})", "a.json");
  EXPECT_TRUE(d.pretrain_annealing);
  EXPECT_DOUBLE_EQ(d.min_learning_rate, 1e-5);  // PreTrainingArguments' default
  TrainArgs c =
      parse_paddle_args(kPre + R"("lr_scheduler_type": "cosine", "decay_steps": 8})", "a.json");
  EXPECT_TRUE(c.pretrain_annealing);
  EXPECT_DOUBLE_EQ(*c.decay_steps, 8.0);
  // Other types keep HF's schedule (PaddleNLP's Trainer builds it); the annealing keys then do
  // nothing, which is said.
  TrainArgs k = parse_paddle_args(
      kPre + R"("lr_scheduler_type": "constant", "min_learning_rate": 0.1})", "a.json");
  EXPECT_FALSE(k.pretrain_annealing);
  EXPECT_TRUE(
      has_warning(k, "'min_learning_rate' applies only to lr_scheduler_type linear or cosine"));
  // A run_finetune.py file: TrainingArguments has no min_learning_rate (PaddleNLP refuses it) and
  // an unused decay_steps.
  EXPECT_NE(error_of(kSft + R"("min_learning_rate": 1e-6})").find("belongs to llm/run_pretrain.py"),
            std::string::npos);
  EXPECT_TRUE(has_warning(parse_paddle_args(kSft + R"("decay_steps": 5})", "a.json"),
                          "'decay_steps' is accepted and ignored"));
  // HF's own linear schedule in YAML, whatever input_dir says.
  EXPECT_FALSE(parse_train_args("model_name_or_path: m\nstage: pt\ninput_dir: d\n", "c.yaml")
                   .pretrain_annealing);
}

TEST(PaddleArgs, ParallelismAndPredictKeys) {
  EXPECT_TRUE(parse_paddle_args(kPre + R"("sequence_parallel": true})", "a.json").sequence_parallel);
  // Segment (sep) and context parallelism are context parallelism here (heads split, Ulysses's layout).
  EXPECT_EQ(parse_paddle_args(kPre + R"("sep_parallel_degree": 2})", "a.json").context_degree, 2);
  EXPECT_EQ(parse_paddle_args(kPre + R"("context_parallel_degree": -1})", "a.json").context_degree, 1);
  // Tensor and pipeline parallelism are built: the degrees reach the trainer's arguments.
  EXPECT_EQ(parse_paddle_args(kPre + R"("tensor_parallel_degree": 2, "tensor_parallel_output": true})", "a.json")
                .tensor_degree,
            2);
  EXPECT_EQ(error_of(kPre + R"("sequence_parallel": 0, "virtual_pp_degree": 1})"), "no error");
  EXPECT_EQ(error_of(kPre + R"("pipeline_parallel_degree": 2, "virtual_pp_degree": 2})"), "no error");
  EXPECT_NE(error_of<NotImplemented>(kSft + R"("do_predict": true})").find("test.json"),
            std::string::npos);
  EXPECT_NE(
      error_of(kPre + R"("do_predict": true, "split": "1,1,0"})").find("test weight in split"),
      std::string::npos);
  // The YAML key: input_dir corpora (loss), or LLaMA-Factory data with predict_with_generate.
  EXPECT_TRUE(parse_train_args("model_name_or_path: m\nstage: pt\ninput_dir: d\ndo_predict: true\n",
                               "c.yaml")
                  .do_predict);
  try {
    parse_train_args("model_name_or_path: m\nstage: sft\ndataset: a\ndo_predict: true\n", "c.yaml");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs predict_with_generate: true"), std::string::npos) << e.what();
  }
  TrainArgs g = parse_train_args("model_name_or_path: m\nstage: sft\neval_dataset: a\ndo_predict: true\n"
                                 "predict_with_generate: true\ndo_sample: false\nmax_new_tokens: 16\n", "c.yaml");
  EXPECT_TRUE(g.predict_with_generate);
  EXPECT_EQ(g.generating.do_sample, false);
  EXPECT_EQ(g.generating.max_new_tokens, 16);
  EXPECT_TRUE(g.warnings.empty() || g.warnings[0].find("generation key") == std::string::npos);
  // Generation keys without predict_with_generate: accepted and said to be unused.
  TrainArgs w = parse_train_args("model_name_or_path: m\nstage: sft\ndataset: a\ndo_train: true\ntemperature: 0.3\n",
                                 "c.yaml");
  ASSERT_FALSE(w.warnings.empty());
  EXPECT_NE(w.warnings[0].find("c.yaml line 5: key 'temperature' is a generation key"), std::string::npos)
      << w.warnings[0];
  // run_finetune.py loads the tokenizer of model_name_or_path: the key is said to be ignored.
  TrainArgs f = parse_paddle_args(kSft + R"("tokenizer_name_or_path": "t"})", "a.json");
  EXPECT_EQ(f.tokenizer_name_or_path, "");
  EXPECT_TRUE(has_warning(f, "loads the tokenizer from model_name_or_path"));
  EXPECT_EQ(parse_paddle_args(kPre + R"("tokenizer_name_or_path": "t"})", "a.json")
                .tokenizer_name_or_path,
            "t");
}

TEST(PaddleArgs, OfficialSftAndLoraArguments) {
  for (const char* name : {"sft_argument.json", "lora_argument.json"}) {
    TrainArgs a = load_train_args(official(name), {});
    EXPECT_EQ(a.stage, "sft") << name;
    EXPECT_EQ(a.eval_strategy, "epoch") << name;
    EXPECT_EQ(a.save_strategy, "epoch") << name;
    EXPECT_TRUE(a.load_best_model_at_end) << name;
    EXPECT_EQ(a.metric_for_best_model, "accuracy") << name;
    EXPECT_TRUE(*a.greater_is_better) << name;  // HF: true for anything but loss
  }
  EXPECT_EQ(load_train_args(official("lora_argument.json"), {}).finetuning_type, "lora");
}

// run_finetune.py's LoRA variants: lora_plus_scale is lora_B's learning-rate multiplier (LoRA+'s
// ratio); an unset lora_alpha is 4 with rslora (2 x rank otherwise); rslora_plus means rslora,
// lora_plus_scale 4 and lora_alpha 4; pissa takes the full SVD with scaling 1 (alpha = rank, no
// rslora), whatever alpha says.
TEST(PaddleArgs, LoraVariantsAsRunFinetuneSetsThemUp) {
  const std::string lora = kSft + R"("lora": true, "lora_rank": 16, )";
  TrainArgs plus = parse_paddle_args(lora + R"("lora_plus_scale": 8.0})", "a.json");
  EXPECT_EQ(*plus.loraplus_lr_ratio, 8.0);
  EXPECT_EQ(*plus.lora_alpha, 32.0);  // 2 x rank
  EXPECT_FALSE(parse_paddle_args(lora + R"("lora_plus_scale": 1.0})", "a.json").loraplus_lr_ratio);
  TrainArgs rs = parse_paddle_args(lora + R"("rslora": true})", "a.json");
  EXPECT_TRUE(rs.use_rslora);
  EXPECT_EQ(*rs.lora_alpha, 4.0);
  EXPECT_EQ(*parse_paddle_args(lora + R"("rslora": true, "lora_alpha": 32})", "a.json").lora_alpha, 32.0);
  TrainArgs rp = parse_paddle_args(lora + R"("rslora_plus": true, "lora_alpha": 32})", "a.json");
  EXPECT_TRUE(rp.use_rslora);
  EXPECT_EQ(*rp.lora_alpha, 4.0);
  EXPECT_EQ(*rp.loraplus_lr_ratio, 4.0);
  TrainArgs pissa = parse_paddle_args(lora + R"("pissa": true, "rslora": true, "lora_alpha": 32})", "a.json");
  EXPECT_TRUE(pissa.pissa_init);
  EXPECT_EQ(pissa.pissa_iter, -1);
  EXPECT_FALSE(pissa.use_rslora);
  EXPECT_EQ(*pissa.lora_alpha, 16.0);  // alpha / rank = 1
  EXPECT_NE(error_of(lora + R"("pissa": "maybe"})").find("pissa"), std::string::npos);
}

// HF TrainingArguments.__post_init__: load_best_model_at_end needs matching strategies and, by
// steps, save_steps a multiple of eval_steps; the metric defaults to loss (lower is better).
TEST(PaddleArgs, BestModelRules) {
  const std::string b = kSft + R"("do_eval": true, "load_best_model_at_end": true, )";
  TrainArgs a = parse_paddle_args(b + R"("eval_steps": 2, "save_steps": 4})", "a.json");
  EXPECT_EQ(a.metric_for_best_model, "loss");
  EXPECT_FALSE(*a.greater_is_better);
  EXPECT_EQ(parse_paddle_args(
                b + R"("metric_for_best_model": "eval_loss", "eval_steps": 2, "save_steps": 4})",
                "a.json")
                .metric_for_best_model,
            "loss");
  EXPECT_NE(
      error_of(b + R"("eval_steps": 2, "save_steps": 3})").find("round multiple of eval_steps"),
      std::string::npos);
  EXPECT_NE(error_of(b + R"("evaluation_strategy": "epoch", "save_strategy": "steps"})")
                .find("needs save_strategy and eval_strategy to match"),
            std::string::npos);
  // Neither saving nor evaluating: the strategies match and nothing is reloaded (as HF).
  EXPECT_EQ(error_of(kSft + R"("load_best_model_at_end": true, "save_strategy": "no"})"),
            "no error");
  EXPECT_NE(error_of(b + R"("metric_for_best_model": "bleu4"})")
                .find("one of loss, perplexity, accuracy"),
            std::string::npos);
  EXPECT_FALSE(
      *parse_paddle_args(b + R"("metric_for_best_model": "accuracy", "greater_is_better": false})",
                         "a.json")
           .greater_is_better);
  // The YAML dialect: eval/save by epoch, and the same best-model rules.
  const std::string y = "model_name_or_path: m\nstage: pt\ndataset: a\nval_size: 0.1\n";
  EXPECT_EQ(
      parse_train_args(y + "eval_strategy: epoch\nsave_strategy: epoch\n", "c.yaml").save_strategy,
      "epoch");
  EXPECT_THROW(parse_train_args(y + "load_best_model_at_end: true\n", "c.yaml"), ConfigError);
  EXPECT_TRUE(parse_train_args(y + "eval_strategy: epoch\nsave_strategy: epoch\n"
                                   "load_best_model_at_end: true\n", "c.yaml")
                  .load_best_model_at_end);
}

// PaddleNLP's `neftune` switch with its `neftune_noise_alpha` (default 5.0): NEFTune only when
// the switch is on; the alpha alone is accepted with a warning and changes nothing, as there.
TEST(PaddleArgs, NeftuneSwitchAndAlpha) {
  EXPECT_EQ(parse_paddle_args(kSft + R"("neftune": true})", "a.json").neftune_noise_alpha, 5.0);
  EXPECT_EQ(parse_paddle_args(kSft + R"("neftune": true, "neftune_noise_alpha": 10})", "a.json").neftune_noise_alpha,
            10.0);
  EXPECT_EQ(parse_paddle_args(kSft + R"("neftune": true})", "a.json", {"neftune_noise_alpha=15"}).neftune_noise_alpha,
            15.0);
  const TrainArgs off = parse_paddle_args(kSft + R"("neftune_noise_alpha": 10})", "a.json");
  EXPECT_EQ(off.neftune_noise_alpha, 0.0);
  EXPECT_TRUE(has_warning(off, "NEFTune needs 'neftune': true")) << off.warnings.size();
  EXPECT_EQ(parse_paddle_args(kSft + R"("neftune": false})", "a.json").neftune_noise_alpha, 0.0);
  EXPECT_NE(error_of(kSft + R"("neftune": "maybe"})").find("PaddleNLP key 'neftune' must be true or false"),
            std::string::npos);
  EXPECT_NE(error_of(kSft + R"("neftune": true, "neftune_noise_alpha": -1})").find("neftune_noise_alpha"),
            std::string::npos);
}

}  // namespace
}  // namespace unillm::train
