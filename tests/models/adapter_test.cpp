// PEFT adapter directories: save → load round trip (logits equal), adapter_config.json fields and
// safetensors keys as PEFT writes them, keys with an adapter name, and the load errors (missing
// files, pickles, shape mismatch naming the key, unexpected tensors, unsupported options).
#include "models/adapter.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "lora_test_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using lora_test::logits_with;
using lora_test::tiny_model;

using testing::expect_throw_with;

class Adapter : public ::testing::Test {
 protected:
  void SetUp() override { testing::init_cpu(); }
  // A saved adapter of a llama model: r 4, alpha 8, q/v (or all).
  std::string saved(models::CausalLM& model, bool all = false) {
    nn::LoraConfig c;
    c.rank = 4;
    c.alpha = 8;
    c.target_modules =
        all ? std::vector<std::string>{"all"} : std::vector<std::string>{"v_proj", "q_proj"};
    Rng rng(3);
    model.add_lora("default", c, rng);
    lora_test::randomize_b(model, "default", 4);
    std::string dir = testing::temp_dir("adapter");
    models::save_adapter(model, "default", dir, models::AdapterSaveOptions{"/models/tiny", {}, false, {}});
    return dir;
  }
};

TEST_F(Adapter, RoundTripGivesTheSameLogits) {
  for (bool all : {false, true}) {
    auto model = tiny_model("qwen2");
    const std::string dir = saved(*model, all);
    const Tensor want = logits_with(*model, std::vector<std::string>{"default"});
    auto fresh = tiny_model("qwen2");
    nn::LoraConfig c = models::load_adapter(*fresh, dir, "sft");
    EXPECT_EQ(c.rank, 4);
    EXPECT_DOUBLE_EQ(c.alpha, 8);
    EXPECT_EQ(testing::max_abs_diff(logits_with(*fresh, std::vector<std::string>{"sft"}), want),
              0.0);
    EXPECT_TRUE(fresh->active_adapters().empty());  // loading does not activate
  }
}

TEST_F(Adapter, ConfigAndKeysAsPeftWritesThem) {
  auto model = tiny_model("llama");
  const std::string dir = saved(*model);
  std::ifstream in(fs::path(dir) / "adapter_config.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("peft_type"), "LORA");
  EXPECT_EQ(j.at("task_type"), "CAUSAL_LM");
  EXPECT_EQ(j.at("r"), 4);
  EXPECT_TRUE(j.at("lora_alpha").is_number_integer());
  EXPECT_EQ(j.at("lora_alpha"), 8);
  EXPECT_EQ(j.at("target_modules"), nlohmann::json::array({"q_proj", "v_proj"}));
  EXPECT_EQ(j.at("bias"), "none");
  EXPECT_EQ(j.at("base_model_name_or_path"), "/models/tiny");
  EXPECT_EQ(j.at("use_rslora"), false);
  EXPECT_EQ(j.at("fan_in_fan_out"), false);
  EXPECT_EQ(j.at("inference_mode"), true);
  EXPECT_TRUE(j.at("modules_to_save").is_null());
  auto f = io::SafetensorsFile::open((fs::path(dir) / "adapter_model.safetensors").string());
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->tensors().size(), 8u);
  EXPECT_TRUE(f->has("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"));
  EXPECT_EQ(
      shape_str(f->info("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight").shape),
      shape_str({16, 4}));
}

TEST_F(Adapter, AcceptsKeysWithAnAdapterName) {
  auto model = tiny_model("llama");
  const std::string dir = saved(*model);
  auto f = io::SafetensorsFile::open((fs::path(dir) / "adapter_model.safetensors").string());
  io::NamedTensors renamed;
  for (auto& info : f->tensors()) {
    std::string k = info.name;
    k.replace(k.rfind(".weight"), 7, ".default.weight");
    renamed.emplace_back(k, f->tensor(info.name).clone());
  }
  f.reset();
  io::save_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), renamed);
  auto fresh = tiny_model("llama");
  models::load_adapter(*fresh, dir, "x");
  EXPECT_EQ(testing::max_abs_diff(logits_with(*fresh, std::vector<std::string>{"x"}),
                                  logits_with(*model, std::vector<std::string>{"default"})),
            0.0);
}

void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& fn) {
  const fs::path p = fs::path(dir) / "adapter_config.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(p));
  fn(j);
  std::ofstream(p) << j.dump(2);
}

TEST_F(Adapter, LoadErrors) {
  auto model = tiny_model("llama");
  const std::string dir = saved(*model);
  auto fresh = tiny_model("llama");
  // Rank in the config disagrees with the tensors: the message names the key and both shapes.
  edit_config(dir, [](nlohmann::json& j) { j["r"] = 8; });
  expect_throw_with<IoError>(
      [&] { models::load_adapter(*fresh, dir, "x"); },
      "tensor 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' has shape [4, 32], "
      "expected [8, 32]");
  EXPECT_FALSE(fresh->has_adapter("x"));  // nothing left behind
  EXPECT_EQ(fresh->module().named_adapter_parameters("x").size(), 0u);
  // The file has tensors for a module the config does not target.
  edit_config(dir, [](nlohmann::json& j) {
    j["r"] = 4;
    j["target_modules"] = {"q_proj"};
  });
  expect_throw_with<IoError>([&] { models::load_adapter(*fresh, dir, "x"); },
                             "v_proj.lora_A.weight' is not a LoRA weight");
  edit_config(dir, [](nlohmann::json& j) {
    j["target_modules"] = {"q_proj", "v_proj", "lm_head"};
  });
  expect_throw_with<ConfigError>([&] { models::load_adapter(*fresh, dir, "x"); },
                                 "unknown target module 'lm_head'");
  edit_config(dir, [](nlohmann::json& j) {
    j["target_modules"] = {"q_proj", "v_proj"};
    j["init_lora_weights"] = "olora";  // changes the base in PEFT; DoRA and PiSSA load
  });
  expect_throw_with<NotImplemented>([&] { models::load_adapter(*fresh, dir, "x"); },
                                    "init_lora_weights olora");
  edit_config(dir, [](nlohmann::json& j) {
    j["init_lora_weights"] = true;
    j["modules_to_save"] = {"q_proj"};  // a linear layer: only embeddings and norms train in full
  });
  expect_throw_with<NotImplemented>([&] { models::load_adapter(*fresh, dir, "x"); },
                                    "modules_to_save 'q_proj'");
  edit_config(dir, [](nlohmann::json& j) {
    j["modules_to_save"] = nullptr;
    j["peft_type"] = "IA3";
  });
  expect_throw_with<NotImplemented>([&] { models::load_adapter(*fresh, dir, "x"); }, "only LORA");
  edit_config(dir, [](nlohmann::json& j) { j["peft_type"] = "LORA"; });
  // A pickled adapter is refused; no files at all is a clear IoError.
  fs::rename(fs::path(dir) / "adapter_model.safetensors", fs::path(dir) / "adapter_model.bin");
  expect_throw_with<IoError>([&] { models::load_adapter(*fresh, dir, "x"); }, "pickled adapter");
  fs::remove(fs::path(dir) / "adapter_model.bin");
  expect_throw_with<IoError>([&] { models::load_adapter(*fresh, dir, "x"); },
                             "no adapter_model.safetensors");
  expect_throw_with<IoError>([&] { models::load_adapter(*fresh, testing::temp_dir("empty"), "x"); },
                             "no adapter_config.json");
}

TEST_F(Adapter, RegexTargetsAndAllLinear) {
  auto model = tiny_model("llama");
  const std::string dir = saved(*model, true);
  edit_config(dir, [](nlohmann::json& j) { j["target_modules"] = "all-linear"; });
  auto a = tiny_model("llama");
  models::load_adapter(*a, dir, "x");
  EXPECT_EQ(a->module().named_adapter_parameters("x").size(), 28u);  // 2 layers × 7 × (A, B)
  edit_config(dir, [](nlohmann::json& j) { j["target_modules"] = ".*\\.(q_proj|v_proj)"; });
  auto b = tiny_model("llama");
  expect_throw_with<IoError>([&] { models::load_adapter(*b, dir, "x"); }, "is not a LoRA weight");
  EXPECT_EQ(models::read_adapter_config(dir).target_regex, ".*\\.(q_proj|v_proj)");
}

}  // namespace
}  // namespace unillm
