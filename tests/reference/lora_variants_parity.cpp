// The unillm half of tests/reference/lora_variants_check.py (run by it, not by ctest directly):
//   lora_variants_parity DIR
// For each case in DIR/cases.json (kind dora or pissa): loads the adapter PEFT saved onto the base
// model (for PiSSA also PEFT's converted rank-2r one) and compares the logits with PEFT's (≤ atol);
// then creates a unillm adapter of that kind with the same config, trains it a few SGD steps (so
// B ≠ 0 and m ≠ ‖W‖, or A, B away from their PiSSA init), saves it as a PEFT dir (PiSSA: plus
// pissa_init/ and pissa_converted/) and writes its logits and the merged model's logits for
// lora_variants_check.py to compare with PEFT loading those dirs. Exit status 1 when a comparison
// fails.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/engine.h"
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
using reference::max_diff;
using reference::train_steps;
using reference::write_f32;


// Loads the PEFT-saved adapter at key `adapter` of c as "peft", compares the logits with PEFT's
// and removes it again (a PiSSA adapter gives the base its principal part back).
bool peft_adapter_matches(models::CausalLM& model, const fs::path& dir, const json& c,
                          const std::string& adapter, const std::string& what) {
  const auto ids = c.at("prompt_ids").get<std::vector<int32_t>>();
  models::load_adapter(model, (dir / c.at(adapter).get<std::string>()).string(), "peft");
  const Tensor ours = logits(model, ids, {"peft"});
  const std::vector<float> got = ours.to_float_vector();
  const double d =
      max_diff(got, read_f32(dir / c.at("peft_logits").get<std::string>(), got.size()));
  model.delete_adapter("peft");
  const double effect = unillm::testing::max_abs_diff(ours, logits(model, ids, {}));
  // A PiSSA adapter makes PEFT rebuild the residual with its float32 SVD: its logits carry that
  // noise (peft_noise, measured by the script against a float64 SVD) on top of the tolerance.
  const double noise = adapter == "peft_adapter" ? c.value("peft_noise", 0.0) : 0.0;
  bool ok = d <= c.at("atol").get<double>() + noise && effect > 1e-2;
  if (noise > 0) {  // and strictly against the float64-SVD residual
    const double de =
        max_diff(got, read_f32(dir / c.at("exact_logits").get<std::string>(), got.size()));
    ok = ok && de <= c.at("atol").get<double>();
    std::printf("     %-22s vs PEFT's adapter over a float64-SVD residual: max |d| %.2e\n",
                c.at("name").get<std::string>().c_str(), de);
  }
  std::printf("[%s] %-22s PEFT-saved %s in unillm: logits max |d| %.2e (PEFT's SVD noise %.2e, "
              "effect %.3f)\n",
              ok ? "ok" : "FAIL", c.at("name").get<std::string>().c_str(), what.c_str(), d, noise,
              effect);
  return ok;
}

bool run_case(const fs::path& dir, const json& c) {
  const std::string name = c.at("name"), kind = c.at("kind");
  const fs::path model_dir = dir / c.at("model_dir").get<std::string>();
  const auto ids = c.at("prompt_ids").get<std::vector<int32_t>>();
  auto model = models::load_causal_lm(model_dir.string());
  // 1. PEFT wrote it, unillm loads it.
  bool ok = peft_adapter_matches(*model, dir, c, "peft_adapter", kind + " adapter");
  if (kind == "pissa")
    ok = peft_adapter_matches(*model, dir, c, "peft_converted", "converted PiSSA adapter") && ok;
  // 2. unillm trains one for PEFT to load.
  nn::LoraConfig lc;
  lc.rank = c.at("r").get<int64_t>();
  lc.alpha = c.at("lora_alpha").get<double>();
  lc.use_rslora = c.at("use_rslora").get<bool>();
  lc.use_dora = kind == "dora";
  lc.init_lora_weights = c.value("unillm_init", std::string());
  if (c.at("targets").is_string())
    lc.target_modules = {c.at("targets").get<std::string>()};
  else
    lc.target_modules = c.at("targets").get<std::vector<std::string>>();
  Rng rng(c.at("seed").get<uint64_t>());
  model->add_lora("mine", lc, rng);
  train_steps(*model, "mine", ids, 3, kind == "pissa" ? 0.05 : 0.2);
  const fs::path out = dir / name / "unillm_adapter";
  models::save_adapter(*model, "mine", out.string(), models::AdapterSaveOptions{model_dir.string(), {}, false, {}});
  if (kind == "pissa") {
    models::save_pissa_adapter(*model, "mine", (out / "pissa_init").string(), models::PissaSave::kInitial);
    models::save_pissa_adapter(*model, "mine", (out / "pissa_converted").string(),
                               models::PissaSave::kConverted);
  }
  write_f32(dir / name / "unillm_logits.f32", logits(*model, ids, {"mine"}));
  model->merge_adapter("mine");
  write_f32(dir / name / "unillm_merged_logits.f32", logits(*model, ids, {}));
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: lora_variants_parity DIR (made by tests/reference/lora_variants_check.py)\n");
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
    std::fprintf(stderr, "lora_variants_parity: error: %s\n", e.what());
    return 1;
  }
}
