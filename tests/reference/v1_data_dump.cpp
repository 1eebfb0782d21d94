// Test-only driver for v1_data_check.py: LLaMA-Factory v1 SFT data through data::load_v1_sft_data
// and load_v1_pair_data in one process. Input JSON (argv[1]): {"cases": [{"dataset", "model_dir",
// "cutoff_len", "seed", "pairs"}]} (pairs: v1's dpo data), paths relative to the working directory
// as v1 reads them; output JSON (stdout): one per case, {"ok": true, "rows": [{"ids", "labels"}],
// "skipped": N} (pairs: chosen, rejected, chosen, …) or {"ok": false, "error"}.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/v1_data.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: v1_data_dump CASES.json\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  const nlohmann::json cases = nlohmann::json::parse(in);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : cases["cases"]) {
    nlohmann::json r;
    try {
      const std::string dir = c["model_dir"].get<std::string>();
      auto tok = unillm::io::Tokenizer::load(dir);
      unillm::data::V1DataOptions o;
      o.train_dataset = c["dataset"].get<std::string>();
      o.where = "case";
      o.cutoff_len = c.value("cutoff_len", 2048);
      o.seed = c.value("seed", 42);
      o.pairs = c.value("pairs", false);
      const auto d = o.pairs ? unillm::data::load_v1_pair_data(o, *tok, dir) : unillm::data::load_v1_sft_data(o, *tok, dir);
      r["ok"] = true;
      r["rows"] = nlohmann::json::array();
      for (size_t i = 0; i < d.rows.size(); ++i) r["rows"].push_back({{"ids", d.rows[i]}, {"labels", d.labels[i]}});
      r["skipped"] = d.skipped_records;
    } catch (const unillm::Error& e) {
      r = {{"ok", false}, {"error", e.what()}};
    }
    out.push_back(r);
  }
  std::cout << out.dump() << "\n";
  return 0;
}
