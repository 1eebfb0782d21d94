// Resolves dataset names through dataset_info.json (LLaMA-Factory's parser.py semantics).
#include "data/dataset_info.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"

namespace unillm::data {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Stages whose datasets are pairwise (ranking: true).
bool ranking_stage(const std::string& stage) { return stage == "rm" || stage == "dpo"; }

// LLaMA-Factory's FILEEXT2TYPE, restricted to the types we read; "" for the others.
std::string file_type_of(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  if (!ext.empty()) ext = ext.substr(1);
  if (ext == "txt") return "txt";
  if (ext == "json" || ext == "jsonl") return "json";
  return "";
}

std::string string_field(const json& entry, const char* key, const std::string& where) {
  const json& v = entry.at(key);
  if (!v.is_string()) UNILLM_THROW(ConfigError, "[data] ", where, ": '", key, "' must be a string");
  return v.get<std::string>();
}

// The error_code forms: a name the OS refuses (too long, a loop of links) is a missing file with
// the OS's reason, not a std::filesystem_error.
std::vector<std::string> local_files(const std::string& local_path, const std::string& where) {
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(local_path, ec)) {
    for (fs::directory_iterator it(local_path, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file(ec)) files.push_back(it->path().string());
    if (ec)
      UNILLM_THROW(ConfigError, "[data] ", where, ": cannot list directory ", local_path, ": ",
                   ec.message());
    std::sort(files.begin(), files.end());  // os.listdir order is arbitrary; we fix one
    if (files.empty())
      UNILLM_THROW(ConfigError, "[data] ", where, ": directory ", local_path, " is empty");
  } else if (fs::is_regular_file(local_path, ec)) {
    files.push_back(local_path);
  } else {
    const bool plain = !ec || ec == std::errc::no_such_file_or_directory ||
                       ec == std::errc::not_a_directory;
    UNILLM_THROW(ConfigError, "[data] ", where, ": file ", local_path, " not found",
                 plain ? "" : " (" + ec.message() + ")");
  }
  return files;
}

std::optional<std::string> optional_string(const json& obj, const char* key,
                                           const std::string& where, const char* table) {
  if (!obj.contains(key) || obj[key].is_null()) return std::nullopt;
  if (!obj[key].is_string())
    UNILLM_THROW(ConfigError, "[data] ", where, ": '", table, ".", key, "' must be a string");
  return obj[key].get<std::string>();
}

// Stage pt: the text column (`columns.prompt`, default "text") and `columns.query`.
void read_pt_columns(const json& entry, DatasetAttr& attr, const std::string& where) {
  if (!entry.contains("columns")) return;  // default: the "text" column
  const json& cols = entry["columns"];
  if (!cols.is_object())
    UNILLM_THROW(ConfigError, "[data] ", where, ": 'columns' must be an object");
  // As LLaMA-Factory's set_attr: with a `columns` map, an absent key means "no such column".
  if (!cols.contains("prompt") || cols["prompt"].is_null())
    UNILLM_THROW(ConfigError, "[data] ", where, ": 'columns' has no 'prompt' (the text column)");
  attr.prompt_column = string_field(cols, "prompt", where);
  attr.query_column = optional_string(cols, "query", where, "columns");
}

// Stages sft, rm, dpo, kto: LLaMA-Factory's parser. A `columns` map sets every column its
// formatting names (alpaca: prompt, query, response, history; sharegpt and openai: messages; all: system,
// tools, chosen, rejected, kto_tag), absent ones to "none"; a `tags` map (sharegpt, openai) sets
// every tag the same way.
void read_sft_columns(const json& entry, DatasetAttr& attr, const std::string& where,
                      const std::string& stage) {
  if (entry.contains("columns")) {
    const json& cols = entry["columns"];
    if (!cols.is_object())
      UNILLM_THROW(ConfigError, "[data] ", where, ": 'columns' must be an object");
    for (const char* mm : {"images", "videos", "audios"})
      if (optional_string(cols, mm, where, "columns"))
        UNILLM_THROW(NotImplemented, "[data] ", where, ": column '", mm,
                     "' is not implemented (text-only SFT)");
    SftColumns& c = attr.columns;
    c.kto_tag = optional_string(cols, "kto_tag", where, "columns");
    c.system = optional_string(cols, "system", where, "columns");
    c.tools = optional_string(cols, "tools", where, "columns");
    c.chosen = optional_string(cols, "chosen", where, "columns");
    c.rejected = optional_string(cols, "rejected", where, "columns");
    if (attr.formatting == "alpaca") {
      c.prompt = optional_string(cols, "prompt", where, "columns");
      c.query = optional_string(cols, "query", where, "columns");
      c.response = optional_string(cols, "response", where, "columns");
      c.history = optional_string(cols, "history", where, "columns");
    } else {
      c.messages = optional_string(cols, "messages", where, "columns");
    }
  }
  if (attr.formatting != "alpaca" && entry.contains("tags")) {
    const json& t = entry["tags"];
    if (!t.is_object()) UNILLM_THROW(ConfigError, "[data] ", where, ": 'tags' must be an object");
    SharegptTags& g = attr.tags;
    g.role_tag = optional_string(t, "role_tag", where, "tags");
    g.content_tag = optional_string(t, "content_tag", where, "tags");
    g.user_tag = optional_string(t, "user_tag", where, "tags");
    g.assistant_tag = optional_string(t, "assistant_tag", where, "tags");
    g.observation_tag = optional_string(t, "observation_tag", where, "tags");
    g.function_tag = optional_string(t, "function_tag", where, "tags");
    g.system_tag = optional_string(t, "system_tag", where, "tags");
  }
  // LLaMA-Factory's converters take a record with a bool kto_tag as a KTO example whatever the
  // stage (sft and rm/dpo would then drop it), and without kto_tag stage kto drops every one.
  if (attr.columns.kto_tag && stage != "kto")
    UNILLM_THROW(ConfigError, "[data] ", where, ": kto_tag is only used by stage kto (not stage ",
                 stage, ")");
  if (!attr.columns.kto_tag && stage == "kto")
    UNILLM_THROW(ConfigError, "[data] ", where,
                 ": stage kto needs columns.kto_tag (a bool column: true = desirable response); "
                 "without it LLaMA-Factory drops every example");
  if (attr.ranking && (!attr.columns.chosen || !attr.columns.rejected))
    UNILLM_THROW(ConfigError, "[data] ", where, ": a ranking dataset needs columns.chosen and ",
                 "columns.rejected (stage ", stage, ")");
  if (attr.formatting == "alpaca" && !attr.ranking && !attr.columns.response)
    UNILLM_THROW(ConfigError, "[data] ", where,
                 ": 'columns' has no 'response' (nothing to train on in stage ", stage, ")");
  if (attr.formatting != "alpaca" &&
      (!attr.columns.messages || !attr.tags.role_tag || !attr.tags.content_tag))
    UNILLM_THROW(ConfigError, "[data] ", where, ": ", attr.formatting,
                 " needs columns.messages, tags.role_tag and tags.content_tag");
}

// The formatting key, checked against what the stage reads.
std::string read_formatting(const json& entry, const std::string& stage, const std::string& where) {
  const json f = entry.value("formatting", json("alpaca"));
  if (!f.is_string())
    UNILLM_THROW(ConfigError, "[data] ", where, ": 'formatting' must be a string");
  const std::string formatting = f.get<std::string>();
  if (formatting != "alpaca" && formatting != "sharegpt" && formatting != "openai")
    UNILLM_THROW(ConfigError, "[data] ", where, ": unknown formatting '", formatting,
                 "' (expected alpaca, sharegpt or openai)");
  if (stage == "pt" && formatting != "alpaca")
    UNILLM_THROW(NotImplemented, "[data] ", where, ": formatting '", formatting,
                 "' is not implemented yet for stage pt (use alpaca with columns: {prompt: text})");
  return formatting;
}

DatasetAttr resolve_one(const std::string& name, const json& info, const std::string& dataset_dir,
                        const std::string& info_path, const std::string& stage) {
  if (!info.contains(name))
    UNILLM_THROW(ConfigError, "[data] undefined dataset '", name, "' in ", info_path);
  const json& entry = info[name];
  const std::string where = info_path + " dataset '" + name + "'";
  if (!entry.is_object()) UNILLM_THROW(ConfigError, "[data] ", where, ": entry must be an object");
  const bool has_file = entry.contains("file_name");
  for (const char* hub : {"hf_hub_url", "ms_hub_url", "om_hub_url", "script_url"}) {
    if (!entry.contains(hub)) continue;
    std::error_code ec;
    if (has_file &&
        fs::exists(fs::path(dataset_dir) / string_field(entry, "file_name", where), ec))
      break;  // a local copy exists: read it (LLaMA-Factory would go to the hub)
    UNILLM_THROW(ConfigError, "[data] ", where, ": '", hub,
                 "' datasets are not available offline "
                 "(unillm never downloads); download it and point 'file_name' at the local file");
  }
  if (!has_file) UNILLM_THROW(ConfigError, "[data] ", where, ": no 'file_name'");
  const auto ranking_it = entry.find("ranking");
  if (ranking_it != entry.end() && !ranking_it->is_null() && !ranking_it->is_boolean())
    UNILLM_THROW(ConfigError, "[data] ", where, ": 'ranking' must be true or false");
  const bool ranking =
      ranking_it != entry.end() && ranking_it->is_boolean() && ranking_it->get<bool>();
  if (ranking && !ranking_stage(stage))
    UNILLM_THROW(ConfigError, "[data] ", where, ": ranking datasets are not applicable to stage ",
                 stage);
  if (!ranking && ranking_stage(stage))
    UNILLM_THROW(ConfigError, "[data] ", info_path, ": dataset '", name,
                 "' is not a ranking dataset; stage ", stage, " needs ranking: true");
  DatasetAttr attr;
  if (entry.contains("num_samples") && !entry["num_samples"].is_null()) {
    const json& n = entry["num_samples"];
    if (!n.is_number_integer() || n.get<int64_t>() < 1)
      UNILLM_THROW(ConfigError, "[data] ", where, ": 'num_samples' must be a positive integer (got ", n.dump(), ")");
    attr.num_samples = n.get<int64_t>();
  }
  attr.name = name;
  attr.ranking = ranking;
  attr.formatting = read_formatting(entry, stage, where);
  const std::string local =
      (fs::path(dataset_dir) / string_field(entry, "file_name", where)).string();
  attr.files = local_files(local, where);
  attr.file_type = file_type_of(attr.files[0]);
  if (attr.file_type.empty())
    UNILLM_THROW(ConfigError, "[data] ", where, ": ", attr.files[0],
                 ": unsupported file type (supported: .txt, .json, .jsonl)");
  for (const auto& f : attr.files)
    if (file_type_of(f) != attr.file_type)
      UNILLM_THROW(ConfigError, "[data] ", where, ": file types should be identical (", f, ")");
  if (stage == "pt") {
    read_pt_columns(entry, attr, where);
  } else {
    if (attr.file_type != "json")
      UNILLM_THROW(ConfigError, "[data] ", where, ": ", attr.files[0], ": stage ", stage,
                   " reads .json or .jsonl files");
    read_sft_columns(entry, attr, where, stage);
  }
  return attr;
}

}  // namespace

std::vector<DatasetAttr> resolve_datasets(const std::vector<std::string>& names,
                                          const std::string& dataset_dir) {
  return resolve_datasets(names, dataset_dir, "pt");
}

std::vector<DatasetAttr> resolve_datasets(const std::vector<std::string>& names,
                                          const std::string& dataset_dir,
                                          const std::string& stage) {
  if (stage != "pt" && stage != "sft" && stage != "kto" && !ranking_stage(stage))
    UNILLM_THROW(NotImplemented, "[data] datasets for stage '", stage, "' are not implemented");
  if (names.empty()) return {};
  if (dataset_dir == "ONLINE" || dataset_dir.rfind("REMOTE:", 0) == 0)
    UNILLM_THROW(ConfigError, "[data] dataset_dir '", dataset_dir,
                 "' reads from the hub, which is not available offline (unillm never downloads)");
  const std::string info_path = (fs::path(dataset_dir) / "dataset_info.json").string();
  json info;
  try {
    info = io::read_json_file(info_path);
  } catch (const IoError& e) {
    UNILLM_THROW(ConfigError, "[data] cannot read dataset_info.json: ", e.what());
  }
  if (!info.is_object())
    UNILLM_THROW(ConfigError, "[data] ", info_path, ": expected a JSON object");
  std::vector<DatasetAttr> out;
  for (const auto& n : names) out.push_back(resolve_one(n, info, dataset_dir, info_path, stage));
  return out;
}

}  // namespace unillm::data
