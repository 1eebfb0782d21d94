// Issue 18's acceptance run (label `slow`: minutes): every example config of LLaMA-Factory
// (tests/data/llamafactory_examples, vendored with its commit id) given to the command it is
// written for with only its paths changed and max_steps 2, on a tiny random Qwen2 model with the
// real Qwen2 tokenizer (its chat templates need <|im_start|>/<|im_end|>), or for the llama3
// template a tiny Llama with the Llama 3 tokenizer, for the Qwen3-MoE configs a tiny Qwen3-MoE
// (examples/init/qwen3_moe_tiny_config.json). Each either runs (exit
// 0) or is refused with every problem of the file in one error (exit 1) — never a crash — and the
// outcomes must equal OUTCOMES.txt (UNILLM_RECORD_OUTCOMES=1 rewrites it; review the diff).
// Two files are not configs of a command: extras/multi_tokens/tokens_cfg.yaml is a
// new_special_tokens_config (token → description) and runs as that key of an SFT config with
// desc_init; extras/llama_pro's config trains the model its expand.sh makes (`unillm
// expand-layers`, here 8 → 16 layers, as 32 → 40 there). accelerate's launch configs
// (accelerate/, ktransformers/accelerate/) go to `unillm launch --config_file` with an SFT config;
// the Megatron configs to `unillm launch --nproc N` with N their tensor × pipeline × expert sizes,
// v1's expert-parallel fsdpturbo config with its ep_size (16 processes, a tiny MoE of 16 experts),
// its context-parallel one with its cp_size. Three
// configs name data no machine here has (a Hub set, two of the user's own): their dataset becomes a
// bundled one (rewrite below).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_shell;
using testing::run_unillm;
using testing::shell_quote;
using testing::slurp;
using testing::source_path;

const std::string kExamples = "tests/data/llamafactory_examples";

std::string command_for(const std::string& rel) {
  if (rel.rfind("inference/", 0) == 0) return "chat";
  if (rel.rfind("accelerate/", 0) == 0 || rel.find("/accelerate/") != std::string::npos) return "launch";
  if (rel.rfind("merge_lora/", 0) == 0 || rel == "v1/train_lora/export_lora.yaml") return "export";
  return "train";
}

// The config with only its paths changed (and max_steps 2 for training).
std::string rewrite(const std::string& path, const std::string& cmd, const std::string& model,
                    const std::string& adapter, const std::string& out) {
  YAML::Node n = YAML::LoadFile(path);
  if (!n.IsMap()) return slurp(path);
  if (n["model_name_or_path"]) n["model_name_or_path"] = model;
  if (n["adapter_name_or_path"]) n["adapter_name_or_path"] = adapter;
  if (n["output_dir"]) n["output_dir"] = out;
  if (n["export_dir"]) n["export_dir"] = out;
  if (n["tokenized_path"]) n["tokenized_path"] = out + "/tokenized";
  // Three configs name data this machine cannot have: `alpaca_zh` is a Hub set (its local sample
  // alpaca_zh_demo is bundled), `math` and `med` are the user's own (not even LLaMA-Factory's
  // dataset_info.json defines them). Their data path changes to a bundled set.
  if (n["dataset"] && n["dataset"].IsScalar()) {
    static const std::map<std::string, std::string> local = {
        {"alpaca_zh", "alpaca_zh_demo"}, {"math", "alpaca_en_demo"}, {"med", "alpaca_en_demo"}};
    if (auto it = local.find(n["dataset"].as<std::string>()); it != local.end()) n["dataset"] = it->second;
  }
  if (n["deepspeed"])  // examples/deepspeed/*.json, vendored beside the examples
    n["deepspeed"] = source_path(kExamples + "/deepspeed/" + fs::path(n["deepspeed"].as<std::string>()).filename().string());
  if (n["export_quantization_dataset"])
    n["export_quantization_dataset"] = source_path("data/" + fs::path(n["export_quantization_dataset"].as<std::string>()).filename().string());
  // A LLaMA-Factory v1 config (docs/llamafactory-v1.md): `model`, its dataset YAML (bundled in
  // data/ with the files it names) and dist_config's DeepSpeed file.
  if (n["model"] && !n["model_name_or_path"]) n["model"] = model;
  if (n["model"] && n["peft_config"] && n["peft_config"].IsMap()) {  // v1's export (merge) config
    if (n["peft_config"]["adapter_name_or_path"]) n["peft_config"]["adapter_name_or_path"] = adapter;
    if (n["peft_config"]["export_dir"]) n["peft_config"]["export_dir"] = out;
  }
  if (n["train_dataset"] && n["model"]) {
    // (v1's DPO example names a Hub set, HuggingFaceH4/orca_dpo_pairs; its local sample is the
    // bundled v1_dpo_demo.jsonl.)
    const std::string spec = fs::path(n["train_dataset"].as<std::string>()).filename().string();
    n["train_dataset"] = source_path("data/" + (spec == "v1_dpo_demo.yaml" ? std::string("v1_dpo_demo.jsonl") : spec));
    if (n["dist_config"] && n["dist_config"].IsMap() && n["dist_config"]["config_file"])
      n["dist_config"]["config_file"] = source_path(
          kExamples + "/deepspeed/" + fs::path(n["dist_config"]["config_file"].as<std::string>()).filename().string());
    n["max_steps"] = 2;
  }
  if (cmd == "train" && n["model_name_or_path"]) {
    n["dataset_dir"] = source_path("data");
    n["max_steps"] = 2;
    // Prediction has no steps: its counterpart of "max_steps lowered" is fewer prompts (a random
    // model rarely stops, so each runs to max_new_tokens).
    if (n["do_predict"] && n["do_predict"].as<std::string>() == "true") n["max_samples"] = 2;
  }
  YAML::Emitter e;
  e << n;
  return e.c_str();
}

// "ran", "refused N" (N problems reported at once), or "crashed CODE".
std::string outcome(const testing::CliResult& r) {
  if (r.exit_code == 0) return "ran";
  if (r.exit_code != 1) return "crashed " + std::to_string(r.exit_code);
  std::smatch m;
  static const std::regex many(": (\\d+) problems");
  if (std::regex_search(r.err, m, many)) return "refused " + m[1].str();
  return "refused 1";
}

TEST(LlamaFactoryExamples, EachRunsOrIsRefusedWithEveryReason) {
  const std::string dir = testing::temp_dir("lfexamples");
  const std::string model = dir + "/qwen2-tiny";
  auto init = run_unillm("init --config " + source_path("examples/init/qwen2_tiny_config.json") + " --tokenizer " +
                         source_path("tests/data/qwen2-tokenizer") + " --out " + model);
  ASSERT_EQ(init.exit_code, 0) << init.err;
  // The Qwen3-MoE configs (Qwen3-30B-A3B, Qwen3-235B-A22B) get a tiny random Qwen3-MoE.
  const std::string moe = dir + "/qwen3-moe-tiny";
  init = run_unillm("init --config " + source_path("examples/init/qwen3_moe_tiny_config.json") + " --tokenizer " +
                    source_path("tests/data/qwen2-tokenizer") + " --out " + moe);
  ASSERT_EQ(init.exit_code, 0) << init.err;
  // v1's expert-parallel config (Qwen3.5-35B-A3B, ep_size 16) gets one with 16 experts.
  const std::string moe16 = dir + "/qwen3-moe-tiny-16";
  {
    std::string cfg = slurp(source_path("examples/init/qwen3_moe_tiny_config.json"));
    cfg.replace(cfg.find("\"num_experts\": 8"), 16, "\"num_experts\": 16");
    std::ofstream(dir + "/qwen3_moe_16.json") << cfg;
  }
  init = run_unillm("init --config " + dir + "/qwen3_moe_16.json --tokenizer " + source_path("tests/data/qwen2-tokenizer") +
                    " --out " + moe16);
  ASSERT_EQ(init.exit_code, 0) << init.err;
  // The llama3 template's configs get a tiny Llama with the Llama 3 tokenizer (its <|eot_id|>).
  const std::string llama3 = dir + "/llama3-tiny";
  std::ofstream(dir + "/llama3.json")
      << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
            "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 128256, "max_position_embeddings": 1024,
            "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": true,
            "hidden_act": "silu", "initializer_range": 0.02, "bos_token_id": 128000,
            "eos_token_id": 128009, "torch_dtype": "float32"})";
  init = run_unillm("init --config " + dir + "/llama3.json --tokenizer " + source_path("tests/data/llama3-tokenizer") +
                    " --out " + llama3);
  ASSERT_EQ(init.exit_code, 0) << init.err;
  // An adapter for the configs that load one (what their train_lora counterparts would write).
  std::ofstream(dir + "/adapter.yaml") << "model_name_or_path: " << model << "\nstage: sft\ndo_train: true\n"
                                       << "finetuning_type: lora\ndataset: alpaca_en_demo\ndataset_dir: "
                                       << source_path("data") << "\ntemplate: qwen\nmax_samples: 8\nmax_steps: 1\n"
                                       << "output_dir: " << dir << "/adapter\nsave_strategy: \"no\"\n";
  auto a = run_unillm("train " + dir + "/adapter.yaml --quiet");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  std::ofstream(dir + "/adapter3.yaml") << "model_name_or_path: " << llama3 << "\nstage: sft\ndo_train: true\n"
                                        << "finetuning_type: lora\ndataset: alpaca_en_demo\ndataset_dir: "
                                        << source_path("data") << "\ntemplate: llama3\nmax_samples: 8\nmax_steps: 1\n"
                                        << "output_dir: " << dir << "/adapter3\nsave_strategy: \"no\"\n";
  a = run_unillm("train " + dir + "/adapter3.yaml --quiet");
  ASSERT_EQ(a.exit_code, 0) << a.err;

  // LLaMA-Pro's model: expand.sh's scripts/llama_pro.py, num_expand 8, on an 8-layer tiny Llama 3.
  const std::string llama3_8 = dir + "/llama3-8l", pro = dir + "/llama3-pro";
  {
    std::string cfg = slurp(dir + "/llama3.json");
    cfg.replace(cfg.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 8");
    std::ofstream(dir + "/llama3_8l.json") << cfg;
  }
  init = run_unillm("init --config " + dir + "/llama3_8l.json --tokenizer " + source_path("tests/data/llama3-tokenizer") +
                    " --out " + llama3_8);
  ASSERT_EQ(init.exit_code, 0) << init.err;
  auto expand = run_unillm("expand-layers --model " + llama3_8 + " --output " + pro + " --num-expand 8");
  ASSERT_EQ(expand.exit_code, 0) << expand.err;

  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(source_path(kExamples)))
    if (e.path().extension() == ".yaml") files.push_back(fs::relative(e.path(), source_path(kExamples)).string());
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 95u);
  std::string table;
  int ran = 0, refused = 0;
  for (const auto& rel : files) {
    const std::string cmd = command_for(rel);
    const std::string out = dir + "/out/" + fs::path(rel).replace_extension().string();
    const std::string cfg = dir + "/cfg/" + rel;
    fs::create_directories(fs::path(cfg).parent_path());
    const YAML::Node raw = YAML::LoadFile(source_path(kExamples + "/" + rel));
    const bool l3 = raw.IsMap() && raw["template"] && raw["template"].as<std::string>() == "llama3";
    const bool is_pro = raw.IsMap() && raw["use_llama_pro"];
    const std::string named = raw.IsMap() && raw["model_name_or_path"] ? raw["model_name_or_path"].as<std::string>() : "";
    const bool is_moe = named.rfind("Qwen/Qwen3-30B-A3B", 0) == 0 || named.rfind("Qwen/Qwen3-235B-A22B", 0) == 0;
    const bool is_moe16 = raw.IsMap() && raw["model"] && raw["model"].as<std::string>() == "Qwen/Qwen3.5-35B-A3B";
    if (cmd == "launch") {
      // An accelerate launch config (`accelerate launch --config_file F src/train.py CONFIG`): as
      // is, launching train_lora/qwen3_lora_sft.yaml with only its paths changed.
      std::ofstream(cfg) << rewrite(source_path(kExamples + "/train_lora/qwen3_lora_sft.yaml"), "train", model,
                                    dir + "/adapter", out);
      auto r = run_shell("cd " + source_path("") + " && timeout -k 5 600 " + std::string(UNILLM_BINARY_DIR) +
                         "/unillm launch --config_file " + shell_quote(source_path(kExamples + "/" + rel)) +
                         " -- train " + shell_quote(cfg) + " --quiet");
      const std::string o = outcome(r);
      EXPECT_EQ(o.rfind("crashed", 0), std::string::npos) << rel << "\n" << r.err;
      (o == "ran" ? ran : refused) += 1;
      table += rel + " " + cmd + " " + o + "\n";
      std::fprintf(stderr, "%-60s %-6s %s\n", rel.c_str(), cmd.c_str(), o.c_str());
      continue;
    }
    if (rel == "extras/multi_tokens/tokens_cfg.yaml") {
      std::ofstream(cfg) << "model_name_or_path: " << model << "\nstage: sft\ndo_train: true\nfinetuning_type: full\n"
                         << "new_special_tokens_config: " << source_path(kExamples + "/" + rel)
                         << "\ninit_special_tokens: desc_init\ndataset: alpaca_en_demo\ndataset_dir: " << source_path("data")
                         << "\ntemplate: qwen\nmax_samples: 8\nmax_steps: 2\noutput_dir: " << out << "\n";
    } else {
      std::ofstream(cfg) << rewrite(source_path(kExamples + "/" + rel), cmd,
                                    is_pro ? pro : l3 ? llama3 : is_moe ? moe : is_moe16 ? moe16 : model,
                                    dir + (l3 ? "/adapter3" : "/adapter"), out);
    }
    // v1 takes the trainer from its sub-command (`llamafactory-cli dpo`): stage=dpo here.
    const std::string stage = rel == "v1/train_lora/train_lora_dpo.yaml" ? " stage=dpo" : "";
    // LLaMA-Factory's Megatron configs (megatron/, megatron_bridge/) size their model parallelism:
    // they run under `unillm launch` with tensor × pipeline × expert processes (the fewest whose
    // data-parallel count the expert groups divide), as torchrun starts them; v1's fsdpturbo
    // with ep_size processes, its Ulysses config with cp_size.
    int64_t nproc = 1;
    for (const char* k : {"tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
                          "context_parallel_size", "cp_size"})
      if (raw.IsMap() && raw[k]) nproc *= raw[k].as<int64_t>();
    if (raw.IsMap() && raw["dist_config"] && raw["dist_config"].IsMap() && raw["dist_config"]["ep_size"])
      nproc *= raw["dist_config"]["ep_size"].as<int64_t>();
    auto r = nproc > 1 ? run_shell("cd " + source_path("") + " && timeout -k 5 600 " + std::string(UNILLM_BINARY_DIR) +
                                   "/unillm launch --nproc " + std::to_string(nproc) + " -- train " + shell_quote(cfg) +
                                   " --quiet")
                       : run_unillm(cmd + " " + shell_quote(cfg) + stage + (cmd == "train" ? " --quiet" : ""));
    const std::string o = outcome(r);
    EXPECT_EQ(o.rfind("crashed", 0), std::string::npos) << rel << "\n" << r.err;
    (o == "ran" ? ran : refused) += 1;
    table += rel + " " + cmd + " " + o + "\n";
    std::string first = r.err.substr(r.err.find("unillm: error:") == std::string::npos ? r.err.size() : r.err.find("unillm: error:"));
    std::fprintf(stderr, "%-60s %-6s %s %s\n", rel.c_str(), cmd.c_str(), o.c_str(),
                 first.substr(0, std::min<size_t>(first.size(), 200)).c_str());
  }
  std::fprintf(stderr, "LLaMA-Factory examples: %d ran, %d refused (of %zu)\n", ran, refused, files.size());
  const std::string expected_path = source_path(kExamples + "/OUTCOMES.txt");
  if (const char* rec = std::getenv("UNILLM_RECORD_OUTCOMES"); rec && std::string(rec) == "1") {
    std::ofstream(expected_path) << table;
    return;
  }
  EXPECT_EQ(slurp(expected_path), table) << "UNILLM_RECORD_OUTCOMES=1 rewrites " << expected_path;
}

}  // namespace
}  // namespace unillm
