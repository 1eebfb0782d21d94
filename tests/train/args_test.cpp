// Training config: defaults, overrides, every error kind, ignored-key warnings, the key table and
// docs/config-keys.md, hub-id resolution through a fake HF cache.
#include "train/args.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <fstream>

#include "core/error.h"
#include "io/json_file.h"
#include "train/key_table.h"

namespace unillm::train {
namespace {

namespace fs = std::filesystem;
const std::string kBase = "model_name_or_path: m\nstage: pt\nfinetuning_type: full\n";

TrainArgs parse(const std::string& yaml, const std::vector<std::string>& ov = {}) {
  return parse_train_args(yaml, "cfg.yaml", ov);
}

template <typename E>
std::string error_of(const std::string& yaml, const std::vector<std::string>& ov = {}) {
  try {
    parse(yaml, ov);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no error";
}

TEST(TrainArgs, DefaultsAreLlamaFactoryAndHfOnes) {
  TrainArgs a = parse(kBase);
  EXPECT_EQ(a.learning_rate, 5e-5);
  EXPECT_EQ(a.adam_beta1, 0.9);
  EXPECT_EQ(a.adam_beta2, 0.999);
  EXPECT_EQ(a.adam_epsilon, 1e-8);
  EXPECT_EQ(a.weight_decay, 0.0);
  EXPECT_EQ(a.max_grad_norm, 1.0);
  EXPECT_EQ(a.lr_scheduler_type, "linear");
  EXPECT_EQ(a.warmup_steps, 0);
  EXPECT_EQ(a.warmup_ratio, 0);
  EXPECT_EQ(a.num_train_epochs, 3.0);
  EXPECT_EQ(a.max_steps, -1);
  EXPECT_EQ(a.per_device_train_batch_size, 8);
  EXPECT_EQ(a.per_device_eval_batch_size, 8);
  EXPECT_EQ(a.gradient_accumulation_steps, 1);
  EXPECT_EQ(a.logging_steps, 500);
  EXPECT_EQ(a.save_steps, 500);
  EXPECT_FALSE(a.eval_steps.has_value());
  EXPECT_FALSE(a.save_total_limit.has_value());
  EXPECT_EQ(a.seed, 42);
  EXPECT_EQ(a.cutoff_len, 2048);
  EXPECT_EQ(a.dataset_dir, "data");
  EXPECT_TRUE(a.packing);  // pt
  EXPECT_EQ(a.data_cutoff_len(), 2048);
  EXPECT_FALSE(a.disable_gradient_checkpointing);
  EXPECT_EQ(a.resume_from_checkpoint.kind, ResumeFrom::Kind::kNone);
}

TEST(TrainArgs, ValuesListsAndOverrides) {
  TrainArgs a =
      parse(kBase +
                "learning_rate: 1e-4\ndataset: a, b\nval_size: 0.1\ndo_train: true\n"
                "eval_strategy: steps\nlogging_steps: 10\nlr_scheduler_type: cosine_with_min_lr\n"
                "lr_scheduler_kwargs: {min_lr_rate: 0.1}\nresume_from_checkpoint: true\n",
            {"learning_rate=3e-4", "per_device_train_batch_size=2", "dataset=c",
             "lr_scheduler_kwargs.min_lr_rate=0.2", "packing=true"});
  EXPECT_EQ(a.learning_rate, 3e-4);
  EXPECT_EQ(a.per_device_train_batch_size, 2);
  EXPECT_EQ(a.dataset, std::vector<std::string>{"c"});
  EXPECT_EQ(*a.lr_scheduler_kwargs.min_lr_rate, 0.2);
  EXPECT_TRUE(a.do_eval);        // eval_strategy steps
  EXPECT_EQ(*a.eval_steps, 10);  // eval_steps ← logging_steps
  EXPECT_EQ(a.resume_from_checkpoint.kind, ResumeFrom::Kind::kLatest);
  EXPECT_EQ(a.data_cutoff_len(), 2047);  // explicit packing: true → cutoff_len - 1
  EXPECT_EQ(parse(kBase + "dataset: [x, y]\n").dataset, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(parse(kBase + "resume_from_checkpoint: out/checkpoint-5\n").resume_from_checkpoint.path,
            "out/checkpoint-5");
  EXPECT_FALSE(parse(kBase + "packing: false\n").packing);
  EXPECT_FALSE(
      parse("model_name_or_path: m\nstage: pt\nfinetuning_type: full\n", {}).skip_bad_records);
  data::DataOptions d = data_options(a);
  EXPECT_EQ(d.cutoff_len, 2047);
  EXPECT_EQ(d.val_size, 0.1);
}

TEST(TrainArgs, IntervalAndWarmupHelpers) {
  TrainArgs a = parse(kBase + "warmup_ratio: 0.1\n");
  EXPECT_EQ(a.num_warmup_steps(25), 3);  // ceil(2.5)
  a = parse(kBase + "warmup_steps: 4\nwarmup_ratio: 0.5\n");
  EXPECT_EQ(a.num_warmup_steps(100), 4);
  EXPECT_EQ(resolve_interval(0.25, 10), 3);
  EXPECT_EQ(resolve_interval(7, 10), 7);
}

TEST(TrainArgs, UnknownKeySuggestsTheNearest) {
  EXPECT_EQ(error_of<ConfigError>(kBase + "learnig_rate: 1\n"),
            "[config] cfg.yaml line 4: unknown key 'learnig_rate' (did you mean 'learning_rate'?)");
  EXPECT_EQ(error_of<ConfigError>(kBase, {"per_device_batch_size=2"}),
            "[config] command line: unknown key 'per_device_batch_size' (did you mean "
            "'per_device_eval_batch_size'?)");
  EXPECT_EQ(error_of<ConfigError>(kBase + "zzzzzzzzzzzzzzzzzzzz: 1\n"),
            "[config] cfg.yaml line 4: unknown key 'zzzzzzzzzzzzzzzzzzzz'");
}

TEST(TrainArgs, WrongTypesAndRangesNameFileKeyAndExpectation) {
  EXPECT_EQ(error_of<ConfigError>(kBase + "learning_rate: abc\n"),
            "[config] cfg.yaml line 4: key 'learning_rate': expected a number >= 0, got 'abc'");
  EXPECT_EQ(error_of<ConfigError>(kBase + "per_device_train_batch_size: -1\n"),
            "[config] cfg.yaml line 4: key 'per_device_train_batch_size': expected an integer >= "
            "1, got '-1'");
  EXPECT_EQ(error_of<ConfigError>(kBase + "per_device_train_batch_size: 2.5\n"),
            "[config] cfg.yaml line 4: key 'per_device_train_batch_size': expected an integer >= "
            "1, got '2.5'");
  EXPECT_EQ(error_of<ConfigError>(kBase + "lr_scheduler_type: cosinee\n"),
            "[config] cfg.yaml line 4: key 'lr_scheduler_type': expected one of linear, cosine, "
            "cosine_with_restarts, polynomial, constant, constant_with_warmup, inverse_sqrt, "
            "reduce_lr_on_plateau, cosine_with_min_lr, cosine_warmup_with_min_lr, "
            "warmup_stable_decay (did you mean 'cosine'?), got 'cosinee'");
  EXPECT_EQ(error_of<ConfigError>(kBase + "val_size: 2.5\n"),
            "[config] cfg.yaml line 4: key 'val_size': expected a fraction in [0, 1) or a whole "
            "count >= 2, got '2.5'");
  EXPECT_NE(error_of<ConfigError>(kBase + "adam_beta2: 1.0\n").find("expected a number in [0, 1)"),
            std::string::npos);
  // 0 and 1 are booleans too (HF's parsers, PaddleNLP's files); 2 is not.
  EXPECT_TRUE(parse_train_args(kBase + "plot_loss: 1\n", "c.yaml").plot_loss);
  EXPECT_NE(error_of<ConfigError>(kBase + "plot_loss: 2\n").find("expected true or false"), std::string::npos);
  EXPECT_NE(error_of<ConfigError>(kBase + "do_train: maybe\n").find("expected true or false"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(kBase + "logging_steps: 0\n").find("'logging_steps'"),
            std::string::npos);
  EXPECT_EQ(error_of<ConfigError>(kBase, {"seed=-3"}),
            "[config] command line: key 'seed': expected an integer >= 0, got '-3'");
  EXPECT_EQ(error_of<ConfigError>(kBase, {"seed"}),
            "[config] command line: expected key=value, got 'seed'");
}

TEST(TrainArgs, CrossKeyRules) {
  EXPECT_NE(error_of<ConfigError>("stage: pt\nfinetuning_type: full\n")
                .find("model_name_or_path is required"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(kBase + "dataset: a\nval_size: 0.1\neval_dataset: b\n")
                .find("val_size cannot be used with eval_dataset"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(kBase + "dataset: a\ndo_eval: true\n")
                .find("needs eval_dataset or val_size"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(kBase + "do_train: true\n").find("needs a training 'dataset'"),
            std::string::npos);
  EXPECT_NE(
      error_of<ConfigError>(kBase + "lr_scheduler_type: cosine_with_min_lr\n").find("exactly one"),
      std::string::npos);
  EXPECT_NE(
      error_of<ConfigError>(kBase + "lr_scheduler_kwargs: '{\"min_lr\": 1e-6}'\n").find("only to"),
      std::string::npos);
}

TEST(TrainArgs, NotImplementedKeysAndValues) {
  EXPECT_EQ(error_of<NotImplemented>(kBase + "use_mca: true\n"),
            "[config] cfg.yaml line 4: key 'use_mca' is not implemented yet");
  // deepspeed and fsdp are read (args_parallel_test.cpp); an unreadable DeepSpeed file is named.
  EXPECT_NE(error_of<ConfigError>(kBase + "deepspeed: ds_z3.json\n").find("cannot read 'ds_z3.json'"),
            std::string::npos);
  // finetuning_type oft is implemented (train/args_oft.cpp); PEFT's rank/block rule is checked.
  EXPECT_NE(error_of<ConfigError>(kBase + "oft_rank: 4\n", {"finetuning_type=oft"}).find("exactly one of oft_rank"),
            std::string::npos);
  EXPECT_EQ(error_of<NotImplemented>("model_name_or_path: m\n", {"stage=ppo"}),
            "[config] cfg.yaml: stage 'ppo' is not implemented yet; implemented: pt | sft | rm | dpo | kto");

  // Every transformers scheduler type is implemented (lr_schedule.h).
  for (const std::string t : {"cosine_with_restarts", "polynomial", "inverse_sqrt", "warmup_stable_decay",
                              "cosine_warmup_with_min_lr"}) {
    const std::string kw = t == "warmup_stable_decay" ? "lr_scheduler_kwargs: {num_decay_steps: 2}\n"
                           : t == "cosine_warmup_with_min_lr" ? "lr_scheduler_kwargs: {min_lr_rate: 0.1}\n"
                                                              : "";
    EXPECT_EQ(parse(kBase + "lr_scheduler_type: " + t + "\n" + kw).lr_scheduler_type, t);
  }
  // Off values of not-implemented keys are accepted (LLaMA-Factory example configs carry them).
  EXPECT_NO_THROW(
      parse(kBase + "deepspeed: null\npure_bf16: false\nstreaming: false\nneat_packing: false\n"));
}

// The key table says what train does: a key refused when on is listed as not implemented, and a
// key listed as implemented is accepted when on (docs/config-keys.md once listed pure_bf16 as
// implemented while train refused it; now train accepts it and the table says so).
TEST(TrainArgs, KeysRefusedWhenOnAreListedNotImplemented) {
  for (const char* k : {"use_mca", "fp8"}) {
    const KeyInfo* info = find_key(k);
    ASSERT_NE(info, nullptr) << k;
    EXPECT_EQ(info->status, KeyStatus::kNotImplemented) << k;
  }
  // Some say why (the reason travels with the refusal).
  EXPECT_NE(error_of<NotImplemented>(kBase + "fp8: true\n").find("fp8 matrix units"), std::string::npos);
  const KeyInfo* pure = find_key("pure_bf16");
  ASSERT_NE(pure, nullptr);
  EXPECT_EQ(pure->status, KeyStatus::kImplemented);
  EXPECT_TRUE(parse(kBase + "pure_bf16: true\n").bf16);
  EXPECT_NO_THROW(parse(kBase + "pure_bf16: false\n"));
  // mixture_of_depths was refused once; now it is built (models/mixture_of_depths.h).
  const KeyInfo* mod = find_key("mixture_of_depths");
  ASSERT_NE(mod, nullptr);
  EXPECT_EQ(mod->status, KeyStatus::kImplemented);
  EXPECT_EQ(parse(kBase + "mixture_of_depths: convert\n").mixture_of_depths, "convert");
  EXPECT_NE(error_of<ConfigError>(kBase + "mixture_of_depths: yes\n").find("mixture_of_depths"), std::string::npos);
}

// transformers' AcceleratorConfig: inline, as a JSON string or a file; split_batches read (the
// trainer divides the batch), the rest accepted where unillm already does the same, refused where
// it would not, and an unknown entry named.
TEST(TrainArgs, AcceleratorConfigEntries) {
  EXPECT_TRUE(parse(kBase + "accelerator_config:\n  split_batches: true\n  even_batches: true\n").split_batches);
  EXPECT_TRUE(parse(kBase + "accelerator_config: '{\"split_batches\": true, \"non_blocking\": false}'\n").split_batches);
  const fs::path file = fs::temp_directory_path() / "unillm_accelerator_config.json";
  { std::ofstream(file) << R"({"split_batches": false, "dispatch_batches": null, "use_seedable_sampler": true})"; }
  EXPECT_FALSE(parse(kBase + "accelerator_config: " + file.string() + "\n").split_batches);
  fs::remove(file);
  const TrainArgs dep = parse(kBase + "split_batches: true\ndispatch_batches: true\n");
  EXPECT_TRUE(dep.split_batches);
  EXPECT_NE(dep.warnings[0].find("split_batches is deprecated in transformers"), std::string::npos) << dep.warnings[0];
  EXPECT_NE(dep.warnings[2].find("dispatch_batches: true"), std::string::npos) << dep.warnings[2];
  EXPECT_NE(error_of<ConfigError>(kBase + "accelerator_config: {split_batch: true}\n").find("unknown entry 'split_batch'"),
            std::string::npos);
  EXPECT_NE(error_of<NotImplemented>(kBase + "accelerator_config: {gradient_accumulation_kwargs: {num_steps: 2}}\n")
                .find("gradient_accumulation_kwargs is not implemented"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(kBase + "accelerator_config: {split_batches: 3}\n").find("expected true or false"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(kBase + "accelerator_config: /nonexistent/acc.json\n").find("cannot read"),
            std::string::npos);
}

TEST(TrainArgs, IgnoredKeysWarnOnceUnlessOff) {
  TrainArgs a = parse(kBase +
                      "report_to: wandb\nddp_timeout: 180000000\nrun_name: x\n"
                      "preprocessing_num_workers: 16\nflash_attn: auto\ntrust_remote_code: true\n");
  ASSERT_EQ(a.warnings.size(), 7u);  // six keys + "nothing to do"
  // In the file's line order.
  EXPECT_NE(a.warnings[0].find("cfg.yaml line 4: key 'report_to' is accepted and ignored"), std::string::npos)
      << a.warnings[0];
  EXPECT_NE(a.warnings[1].find("cfg.yaml line 5: key 'ddp_timeout' is accepted and ignored"), std::string::npos)
      << a.warnings[1];
  TrainArgs b = parse(kBase + "report_to: none\ndo_train: true\ndataset: d\n");
  EXPECT_TRUE(b.warnings.empty());
}

TEST(TrainArgs, YamlSyntaxErrorNamesFileAndLine) {
  EXPECT_EQ(error_of<ConfigError>(kBase + "dataset: [a, b\nseed: 1\n").substr(0, 28),
            "[config] cfg.yaml line 5, co");
  EXPECT_NE(error_of<ConfigError>("- a\n- b\n").find("expected a mapping"), std::string::npos);
  EXPECT_NE(error_of<ConfigError>(kBase + "seed: 1\nseed: 2\n").find("appears twice"),
            std::string::npos);
}

TEST(TrainArgs, LoadFromFile) {
  fs::path p = fs::temp_directory_path() / ("unillm_args_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(p) << kBase << "learning_rate: abc\n";
  try {
    load_train_args(p.string(), {});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).find("[config] " + p.string() + " line 4:"), 0u) << e.what();
  }
  fs::remove(p);
  EXPECT_THROW(load_train_args(p.string(), {}), ConfigError);
}

TEST(KeyTable, HoldsKeysFromEveryDataclassWithTheirStatus) {
  struct Want {
    const char* key;
    KeyStatus status;
    const char* source;
  };
  const Want wants[] = {
      {"model_name_or_path", KeyStatus::kImplemented, "model"},
      {"flash_attn", KeyStatus::kIgnored, "model"},
      {"quantization_bit", KeyStatus::kImplemented, "model"},  // QLoRA (docs/qlora.md)
      {"cutoff_len", KeyStatus::kImplemented, "data"},
      {"preprocessing_num_workers", KeyStatus::kIgnored, "data"},
      {"neat_packing", KeyStatus::kImplemented, "data"},
      {"interleave_probs", KeyStatus::kImplemented, "data"},
      {"eval_on_each_dataset", KeyStatus::kImplemented, "data"},
      {"stage", KeyStatus::kImplemented, "finetuning"},
      {"lora_rank", KeyStatus::kImplemented, "finetuning"},
      {"use_galore", KeyStatus::kImplemented, "finetuning"},
      {"src_length", KeyStatus::kImplemented, "paddlenlp"},
      {"top_p", KeyStatus::kImplemented, "generating"},
      {"learning_rate", KeyStatus::kImplemented, "training"},
      {"report_to", KeyStatus::kIgnored, "training"},
      {"torch_compile", KeyStatus::kIgnored, "training"},  // a speed switch of torch
      {"optim_target_modules", KeyStatus::kImplemented, "training"},  // HF's own GaLore
      {"deepspeed", KeyStatus::kImplemented, "training"},  // ZeRO (train/zero.h)
      {"skip_bad_records", KeyStatus::kImplemented, "unillm"},
  };
  for (const Want& w : wants) {
    const KeyInfo* k = find_key(w.key);
    ASSERT_NE(k, nullptr) << w.key;
    EXPECT_EQ(k->status, w.status) << w.key;
    EXPECT_EQ(k->source, w.source) << w.key;
  }
  EXPECT_GT(key_table().size(), 300u);
  EXPECT_EQ(find_key("no_such_key"), nullptr);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

// Every field of LLaMA-Factory's current argument classes (listed from its source by
// tools/lf_hparams_keys.py, commit id in the file) is a key the table knows: none falls through to
// "unknown key".
TEST(KeyTable, KnowsEveryLlamaFactoryArgument) {
  const std::string path = std::string(UNILLM_SOURCE_DIR) + "/tests/data/llamafactory_hparams/keys.txt";
  std::istringstream in(io::read_file_bytes(path));
  std::string line, missing;
  int count = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::string key = line.substr(line.find(' ') + 1);
    ++count;
    if (!find_key(key)) missing += " " + line;
  }
  EXPECT_GT(count, 250);
  EXPECT_EQ(missing, "") << "add these to src/train/key_table.cpp";
  for (const char* k : {"asft_alpha", "use_eaft_loss", "preserve_thinking", "tensor_model_parallel_size"})
    EXPECT_NE(find_key(k), nullptr) << k;
}

// One run reports every problem of a config, each with its line, in line order (issue 18: users
// fixed configs key by key).
TEST(TrainArgs, EveryProblemIsReportedAtOnce) {
  const std::string yaml =
      "model_name_or_path: m\n"   // 1
      "stage: sft\n"              // 2
      "lora_rank: -3\n"           // 3: bad value
      "use_mca: true\n"           // 4: not implemented
      "learnig_rate: 1e-4\n"      // 5: unknown (did you mean)
      "template: no_such_one\n"   // 6: unknown template
      "bf16: true\nfp16: true\n"  // 7-8: cross-key rule
      "lora_rank: 4\n";           // 9: duplicate
  const std::string e = error_of<ConfigError>(yaml);
  EXPECT_NE(e.find("[config] cfg.yaml: 6 problems"), std::string::npos) << e;
  const char* parts[] = {"cfg.yaml line 9: key 'lora_rank' appears twice (first at cfg.yaml line 3)",
                         "cfg.yaml line 3: key 'lora_rank': expected an integer",
                         "cfg.yaml line 4: key 'use_mca' is not implemented yet",
                         "cfg.yaml line 5: unknown key 'learnig_rate' (did you mean 'learning_rate'?)",
                         "cfg.yaml line 6: key 'template': expected a template name unillm has (",
                         "bf16 and fp16 are both true"};
  size_t at = 0;
  for (const char* p : parts) {
    const size_t found = e.find(p);
    EXPECT_NE(found, std::string::npos) << p << "\n" << e;
    if (found != std::string::npos) {
      EXPECT_GE(found, at) << "out of order: " << p;
      at = found;
    }
  }
  // Only not-implemented problems: the error says so by its type.
  EXPECT_NE(error_of<NotImplemented>(kBase + "use_mca: true\ndeepspeed: ds.json\n").find("2 problems"),
            std::string::npos);
  // One problem is reported as it always was.
  EXPECT_EQ(error_of<NotImplemented>(kBase + "use_mca: true\n"),
            "[config] cfg.yaml line 4: key 'use_mca' is not implemented yet");
}

// `template` is checked with the config, so export and chat (which read the same keys) refuse
// what train refuses (issue 18: export once accepted any template name).
TEST(TrainArgs, UnknownTemplateIsRefusedWithTheConfig) {
  const std::string e = error_of<ConfigError>(kBase + "template: qwen9\n");
  EXPECT_NE(e.find("cfg.yaml line 4: key 'template': expected a template name unillm has ("), std::string::npos) << e;
  EXPECT_NE(e.find("llama3"), std::string::npos) << e;
  EXPECT_EQ(parse(kBase + "template: llama3\n").template_name, "llama3");
}

// LLaMA-Factory's DataArguments for the template reach the template options of training (and
// are not "generation keys" there).
TEST(TrainArgs, TemplateDataArgumentsReachTheTemplateOptions) {
  TrainArgs a = parse(kBase + "enable_thinking: false\ndefault_system: Be brief.\ntool_format: qwen\n"
                              "preserve_thinking: true\ndo_train: true\ndataset: d\n");
  EXPECT_TRUE(a.warnings.empty()) << a.warnings[0];
  data::TemplateOptions base;
  base.default_system = "from the Jinja";
  const data::TemplateOptions o = template_options(a, base);
  EXPECT_EQ(o.enable_thinking, false);
  EXPECT_EQ(o.default_system, "Be brief.");
  EXPECT_EQ(o.tool_format, "qwen");
  EXPECT_TRUE(o.preserve_thinking);
  EXPECT_EQ(template_options(parse(kBase), base).default_system, "from the Jinja");
  EXPECT_NE(error_of<ConfigError>(kBase + "tool_format: nope\n").find("key 'tool_format': expected one of"),
            std::string::npos);
}

TEST(KeyTable, EveryImplementedKeyHasASetter) {
  for (const auto& k : key_table()) {
    if (k.status != KeyStatus::kImplemented) continue;
    // An implemented key given null either parses or fails with a ConfigError, never with the
    // internal "no setter" check.
    try {
      parse(kBase + std::string(k.name) + ": null\n");
    } catch (const ConfigError&) {
    } catch (const NotImplemented&) {
    }
  }
}

TEST(KeyTable, DocsPageMatchesTheTable) {
  const std::string path = std::string(UNILLM_SOURCE_DIR) + "/docs/config-keys.md";
  EXPECT_EQ(io::read_file_bytes(path), key_table_markdown())
      << "regenerate it: unillm train --print-keys > docs/config-keys.md";
}

TEST(ModelPath, LocalDirHubCacheAndClearError) {
  fs::path root = fs::temp_directory_path() / ("unillm_hf_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::path repo = root / "models--org--tiny";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots" / "abc123");
  std::ofstream(repo / "refs" / "main") << "abc123";
  EXPECT_EQ(resolve_model_path("org/tiny", root.string()),
            (repo / "snapshots" / "abc123").string());
  EXPECT_EQ(resolve_model_path(root.string(), "/nonexistent"), root.string());
  try {
    resolve_model_path("org/other", root.string());
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("never downloads"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("models--org--other"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_model_path("./missing/dir", root.string()), ConfigError);
  fs::remove_all(root);
}


TEST(TrainArgs, FinetuningKeys) {
  const std::string sft = "model_name_or_path: m\nstage: sft\ndataset: a\n";
  TrainArgs a = parse(sft, {"lora_rank=4", "lora_target=q_proj,v_proj"});
  EXPECT_EQ(a.finetuning_type, "lora");  // LLaMA-Factory's default
  EXPECT_DOUBLE_EQ(*a.lora_alpha, 8.0);  // 2 x rank
  EXPECT_EQ(a.lora_target, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_FALSE(a.packing);  // sft does not pack by default
  TrainArgs n = parse(sft + "neat_packing: true\ncutoff_len: 64\n");
  EXPECT_TRUE(n.packing);  // neat_packing implies packing, and then cutoff_len - 1
  EXPECT_EQ(n.data_cutoff_len(), 63);
  TrainArgs f = parse(sft + "finetuning_type: freeze\nfreeze_trainable_layers: -1\n"
                            "freeze_trainable_modules: mlp,self_attn\nfreeze_extra_modules: norm\n");
  EXPECT_EQ(f.freeze_trainable_layers, -1);
  EXPECT_EQ(f.freeze_trainable_modules, (std::vector<std::string>{"mlp", "self_attn"}));
  EXPECT_EQ(f.freeze_extra_modules, (std::vector<std::string>{"norm"}));
  EXPECT_NE(error_of<ConfigError>(sft + "mask_history: true\ntrain_on_prompt: true\n")
                .find("mask_history is incompatible with train_on_prompt"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(sft + "finetuning_type: full\nadapter_name_or_path: x\n")
                .find("adapter_name_or_path is only valid with finetuning_type: lora"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(sft + "freeze_trainable_layers: 0\n").find("non-zero"),
            std::string::npos);
}

TEST(TrainArgs, PaddleNlpDataKeys) {
  const std::string p = "model_name_or_path: m\nstage: sft\ndataset_name_or_path: d\n";
  TrainArgs a = parse(p + "src_length: 128\nmax_length: 256\nzero_padding: true\n");
  EXPECT_EQ(a.data_cutoff_len(), 256);  // rows of max_length
  EXPECT_TRUE(a.neat_packing);          // zero_padding keeps samples apart
  EXPECT_NE(error_of<ConfigError>(p + "src_length: 300\nmax_length: 256\n").find("src_length"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(p + "dataset: a\n").find("not both"), std::string::npos);
  EXPECT_NE(error_of<ConfigError>("model_name_or_path: m\nstage: sft\ndataset: a\nzero_padding: true\n")
                .find("use neat_packing"),
            std::string::npos);
}
TEST(TrainArgs, EveryExampleConfigParses) {
  int n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(UNILLM_SOURCE_DIR "/examples"))
    if (e.path().extension() == ".yaml" || e.path().parent_path().filename() == "paddlenlp") {
      EXPECT_NO_THROW(load_train_args(e.path().string(), {})) << e.path();
      ++n;
    }
  EXPECT_GE(n, 7);
}

TEST(TrainArgs, PaddleNlpJsonDialect) {
  const std::string j = R"({
    "model_name_or_path": "m", "dataset_name_or_path": "d", "output_dir": "o",
    "per_device_train_batch_size": 2, "learning_rate": 3e-04, "src_length": 64,
    "max_length": 128, "lora": true, "lora_rank": 4, "lora_alpha": -1, "recompute": true,
    "zero_padding": true, "use_flash_attention": true, "unified_checkpoint": true,
    "tensor_parallel_degree": 1, "evaluation_strategy": "no", "do_train": true})";
  TrainArgs a = parse_paddle_args(j, "args.json");
  EXPECT_EQ(a.stage, "sft");  // run_finetune.py
  EXPECT_EQ(a.finetuning_type, "lora");
  EXPECT_EQ(a.lora_rank, 4);
  EXPECT_DOUBLE_EQ(*a.lora_alpha, 8.0);  // -1 = unset → 2 x rank
  EXPECT_FALSE(a.disable_gradient_checkpointing);
  EXPECT_DOUBLE_EQ(a.learning_rate, 3e-4);
  EXPECT_EQ(a.data_cutoff_len(), 128);
  EXPECT_TRUE(a.neat_packing);
  ASSERT_EQ(a.warnings.size(), 2u);  // use_flash_attention, unified_checkpoint
  EXPECT_NE(a.warnings[0].find("args.json line 5: PaddleNLP key 'unified_checkpoint'"),
            std::string::npos) << a.warnings[0];
  // Defaults of run_finetune: full fine-tuning, no recompute.
  TrainArgs f = parse_paddle_args(R"({"model_name_or_path": "m", "dataset_name_or_path": "d"})", "a.json");
  EXPECT_EQ(f.finetuning_type, "full");
  EXPECT_TRUE(f.disable_gradient_checkpointing);
  // Overrides take either dialect's names.
  TrainArgs o = parse_paddle_args(R"({"model_name_or_path": "m", "dataset_name_or_path": "d"})",
                                  "a.json", {"lora=true", "max_steps=7"});
  EXPECT_EQ(o.finetuning_type, "lora");
  EXPECT_EQ(o.max_steps, 7);
  auto err = [](const std::string& text) {
    try {
      parse_paddle_args(text, "a.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(err(R"({"model_name_or_path": "m",
  "context_parallel_degree": "four"})").find("a.json line 2: key 'context_parallel_degree'"),
            std::string::npos);
  EXPECT_NE(err(R"({"model_name_or_path": "m", "lora_rnak": 8})").find("did you mean 'lora_rank'"),
            std::string::npos);
  EXPECT_NE(err(R"({"model_name_or_path": "m", "prefix_tuning": true})").find("not implemented yet"),
            std::string::npos);
  EXPECT_NE(err("{nope").find("invalid JSON"), std::string::npos);
}

}  // namespace
}  // namespace unillm::train
