// The unillm half of tests/reference/peft_check.py (run by it, not by ctest directly):
//   lora_peft_parity DIR
// For each case in DIR/cases.json: loads the adapter PEFT saved onto the base model and compares
// the logits with PEFT's (≤ atol); then creates a unillm adapter with the same config (random A
// and B), saves it as a PEFT dir and writes its logits and the merged model's logits for
// peft_check.py to compare with PEFT loading that dir. Exit status 1 when a comparison fails.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "models/adapter.h"
#include "models/causal_lm.h"
#include "support/expect.h"
#include "reference/parity_driver_io.h"

namespace {

using namespace unillm;
namespace fs = std::filesystem;
using nlohmann::json;

using reference::logits;
using reference::read_f32;
using reference::write_f32;

bool run_case(const fs::path& dir, const json& c) {
  const std::string name = c.at("name");
  const fs::path model_dir = dir / c.at("model_dir").get<std::string>();
  const auto ids = c.at("prompt_ids").get<std::vector<int32_t>>();
  const double atol = c.at("atol").get<double>();
  auto model = models::load_causal_lm(model_dir.string());
  // 1. PEFT wrote it, unillm loads it.
  models::load_adapter(*model, (dir / c.at("peft_adapter").get<std::string>()).string(), "peft");
  const Tensor ours = logits(*model, ids, {"peft"});
  const std::vector<float> got = ours.to_float_vector();
  const std::vector<float> want =
      read_f32(dir / c.at("peft_logits").get<std::string>(), got.size());
  double d = 0;
  for (size_t i = 0; i < got.size(); ++i) d = std::max(d, std::fabs(double(got[i]) - want[i]));
  const double effect = unillm::testing::max_abs_diff(ours, logits(*model, ids, {}));
  const bool ok = d <= atol && effect > 1e-2;
  std::printf(
      "[%s] %-18s PEFT-saved adapter in unillm: logits max |d| %.2e (adapter effect %.3f)\n",
      ok ? "ok" : "FAIL", name.c_str(), d, effect);
  model->delete_adapter("peft");
  // 2. unillm writes one for PEFT to load.
  nn::LoraConfig lc;
  lc.rank = c.at("r").get<int64_t>();
  lc.alpha = c.at("lora_alpha").get<double>();
  lc.use_rslora = c.at("use_rslora").get<bool>();
  if (c.at("targets").is_string())
    lc.target_modules = {c.at("targets").get<std::string>()};
  else
    lc.target_modules = c.at("targets").get<std::vector<std::string>>();
  Rng rng(c.at("seed").get<uint64_t>());
  model->add_lora("mine", lc, rng);
  for (auto& [pname, t] : model->module().named_adapter_parameters("mine"))
    if (pname.find("lora_B") != std::string::npos) {
      std::vector<float> v(static_cast<size_t>(t.numel()));
      for (auto& x : v) x = static_cast<float>(0.1 * rng.normal());
      Tensor dst = t.detach();
      dst.copy_from(Tensor::from_vector(v, t.shape()));
    }
  const fs::path out = dir / name;
  fs::create_directories(out);
  models::save_adapter(*model, "mine", (out / "unillm_adapter").string(), models::AdapterSaveOptions{model_dir.string(), {}, false, {}});
  write_f32(out / "unillm_logits.f32", logits(*model, ids, {"mine"}));
  model->merge_adapter("mine");
  write_f32(out / "unillm_merged_logits.f32", logits(*model, ids, {}));
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: lora_peft_parity DIR (made by tests/reference/peft_check.py)\n");
    return 2;
  }
  try {
    unillm::testing::init_cpu();
    const fs::path dir = argv[1];
    std::ifstream in(dir / "cases.json");
    const json cases = json::parse(in);
    bool ok = true;
    for (const json& c : cases) ok = run_case(dir, c) && ok;
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lora_peft_parity: error: %s\n", e.what());
    return 1;
  }
}
