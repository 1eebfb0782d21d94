// The unillm half of tests/reference/oft_check.py (run by it, not by ctest directly):
//   oft_parity DIR
// For each case in DIR/cases.json: loads the OFT adapter PEFT 0.17 saved (random oft_R) onto the
// base and compares the logits with PEFT's, before and after merging (≤ atol); then creates a
// unillm OFT adapter with the same config, trains it a few SGD steps (so every rotation moves
// away from I), saves it as a PEFT dir and writes its logits and the merged model's for
// oft_check.py to compare with PEFT loading that dir. Exit status 1 when a comparison fails.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/engine.h"
#include "models/adapter.h"
#include "models/causal_lm.h"
#include "reference/parity_driver_io.h"
#include "support/expect.h"

namespace {

using namespace unillm;
namespace fs = std::filesystem;
using nlohmann::json;

using reference::logits;
using reference::read_f32;
using reference::max_diff;
using reference::train_steps;
using reference::write_f32;


nn::LoraConfig oft_config(const json& c) {
  nn::LoraConfig lc;
  lc.is_oft = true;
  lc.oft.rank = c.at("r").get<int64_t>();
  lc.oft.block_size = c.at("oft_block_size").get<int64_t>();
  lc.oft.use_cayley_neumann = c.at("use_cayley_neumann").get<bool>();
  lc.oft.num_cayley_neumann_terms = c.at("num_cayley_neumann_terms").get<int64_t>();
  if (c.at("targets").is_string())
    lc.target_modules = {c.at("targets").get<std::string>()};
  else
    lc.target_modules = c.at("targets").get<std::vector<std::string>>();
  return lc;
}

bool run_case(const fs::path& dir, const json& c) {
  const std::string name = c.at("name");
  const fs::path model_dir = dir / c.at("model_dir").get<std::string>();
  const auto ids = c.at("prompt_ids").get<std::vector<int32_t>>();
  const double atol = c.at("atol").get<double>();
  auto model = models::load_causal_lm(model_dir.string());
  const Tensor base = logits(*model, ids, {});
  // 1. PEFT wrote it, unillm loads it (and merges it).
  models::load_adapter(*model, (dir / c.at("peft_adapter").get<std::string>()).string(), "peft");
  const Tensor ours = logits(*model, ids, {"peft"});
  const std::vector<float> theirs = read_f32(dir / c.at("peft_logits").get<std::string>(), ours.numel());
  const double d = max_diff(ours.to_float_vector(), theirs);
  const double effect = unillm::testing::max_abs_diff(ours, base);
  model->merge_adapter("peft");
  const double dm = max_diff(logits(*model, ids, {}).to_float_vector(), theirs);
  bool ok = d <= atol && dm <= atol && effect > 1e-2;
  std::printf("[%s] %-26s PEFT-saved OFT adapter in unillm: logits max |d| %.2e, merged %.2e (effect %.3f)\n",
              ok ? "ok" : "FAIL", name.c_str(), d, dm, effect);
  // 2. unillm trains one for PEFT to load.
  model = models::load_causal_lm(model_dir.string());
  Rng unused(0);
  model->add_lora("mine", oft_config(c), unused);
  train_steps(*model, "mine", ids, 3, c.at("lr").get<double>());
  const fs::path out = dir / name / "unillm_adapter";
  models::save_adapter(*model, "mine", out.string(), models::AdapterSaveOptions{model_dir.string(), {}, false, {}});
  const Tensor trained = logits(*model, ids, {"mine"});
  write_f32(dir / name / "unillm_logits.f32", trained);
  const double moved = unillm::testing::max_abs_diff(trained, base);
  model->merge_adapter("mine");
  write_f32(dir / name / "unillm_merged_logits.f32", logits(*model, ids, {}));
  std::printf("     %-26s unillm-trained adapter moved the logits by %.3f\n", name.c_str(), moved);
  return ok && moved > 1e-3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: oft_parity DIR (made by tests/reference/oft_check.py)\n");
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
    std::fprintf(stderr, "oft_parity: error: %s\n", e.what());
    return 1;
  }
}
