// Fuzz target for dataset_info.json (data::resolve_datasets, src/data/dataset_info.cpp): each of
// its first 16 names must resolve for stage pt and sft to sane attributes or throw unillm::Error.
// See docs/fuzzing.md.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/dataset_info.h"
#include "fuzz_support.h"

namespace {

using namespace unillm;
namespace fs = std::filesystem;

// dataset_dir with the files the seeds name (empty: resolving never reads them).
const std::string& dataset_dir() {
  static const std::string dir = [] {
    const std::string d = fuzz::scratch().file("data");
    for (const char* sub : {"", "/texts", "/mixed", "/empty_dir"}) fs::create_directories(d + sub);
    for (const char* f :
         {"docs.txt", "docs.json", "docs.jsonl", "alpaca_history.jsonl", "sharegpt_lf.json",
          "openai_messages.jsonl", "identity.json", "alpaca_en_demo.json", "c4_demo.jsonl",
          "wiki_demo.txt", "dpo_en_demo.json", "kto_en_demo.json", "mllm_demo.json",
          "glaive_toolcall_en_demo.json", "table.csv", "texts/a.txt", "texts/b.txt", "mixed/a.json",
          "mixed/b.txt"})
      fuzz::write_bytes(d + "/" + f, "");
    return d;
  }();
  return dir;
}

void check_attr(const data::DatasetAttr& a, const std::string& name, const std::string& stage) {
  fuzz::require(a.name == name, "attr named as asked");
  fuzz::require(!a.files.empty(), "at least one file");
  for (const auto& f : a.files) fuzz::require(fs::is_regular_file(f), "files exist");
  fuzz::require(a.file_type == "txt" || a.file_type == "json", "file type txt or json");
  fuzz::require(a.formatting == "alpaca" || a.formatting == "sharegpt" || a.formatting == "openai",
                "alpaca, sharegpt or openai");
  fuzz::require(!a.num_samples || *a.num_samples >= 1, "num_samples positive");
  if (stage == "pt") {
    fuzz::require(a.formatting == "alpaca", "stage pt reads alpaca-style columns");
    return;
  }
  fuzz::require(a.file_type == "json", "stage sft reads json");
  if (a.formatting == "alpaca") fuzz::require(a.columns.response.has_value(), "a response column");
  if (a.formatting != "alpaca")
    fuzz::require(a.columns.messages && a.tags.role_tag && a.tags.content_tag,
                  "sharegpt/openai messages, role and content");
}

constexpr const char* kUndefined = "no_such_dataset";

// The names to resolve: the input's first 16 keys, then kUndefined unless the input defines it
// (*undefined says whether it was added).
std::vector<std::string> names_of(std::string_view bytes, bool* undefined) {
  std::vector<std::string> names;
  nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_object())
    for (const auto& [key, v] : j.items()) {
      if (names.size() == 16) break;
      names.push_back(key);
    }
  *undefined = !j.is_object() || !j.contains(kUndefined);
  if (*undefined) names.push_back(kUndefined);
  return names;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;  // LLaMA-Factory's own dataset_info.json is 18 KB
  const std::string& dir = dataset_dir();
  fuzz::write_bytes(dir + "/dataset_info.json", fuzz::bytes_of(data, size));
  bool added_undefined = false;
  const std::vector<std::string> names = names_of(fuzz::bytes_of(data, size), &added_undefined);
  for (size_t i = 0; i < names.size(); ++i) {
    const bool undefined = added_undefined && i + 1 == names.size();
    for (const char* stage : {"pt", "sft"}) {
      const std::string& name = names[i];
      try {
        std::vector<data::DatasetAttr> attrs = data::resolve_datasets({name}, dir, stage);
        fuzz::require(attrs.size() == 1, "one attr per name");
        fuzz::require(!undefined, "an undefined name is refused");
        check_attr(attrs[0], name, stage);
      } catch (const Error& e) {
        fuzz::expect_input_error(e);
      }
    }
  }
  return 0;
}
