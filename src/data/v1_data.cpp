// LLaMA-Factory v1's SFT data (v1_data.h), written from its DataEngine, converters and Renderer
// (src/llamafactory/v1 at ff6d4d12): dataset spec → records → messages → one sample per
// supervised assistant turn → the model's chat template.
#include "data/v1_data.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "data/error.h"
#include "data/jinja_template.h"
#include "data/json_records.h"
#include "data/python_random.h"
#include "io/json_file.h"
#include "io/tokenizer_internal.h"

namespace unillm::data {

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// v1's fallback for a tokenizer without a chat_template (rendering/format.py).
constexpr const char* kChatMlJinja =
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{'<|im_start|>assistant\n'}}"
    "{% endif %}";

struct Entry {
  std::string name, path, converter, where;
  std::optional<int64_t> size;
  std::optional<double> weight;
};

std::string yaml_where(const std::string& file, const YAML::Node& n) {
  return UNILLM_MSG(file, " line ", n.Mark().line + 1);
}

// A relative path as LLaMA-Factory reads it (from the working directory), else beside the spec,
// else from the spec's parent directory (LLaMA-Factory's layout: data/v1_sft_demo.yaml names
// data/identity.json from the repository's root).
std::string resolve(const std::string& path, const std::string& spec_dir) {
  if (fs::path(path).is_absolute() || fs::exists(path)) return path;
  const fs::path dir = fs::absolute(spec_dir.empty() ? "." : spec_dir);
  for (const fs::path& base : {dir, dir.parent_path()})
    if (fs::exists(base / path)) return (base / path).string();
  return path;
}

std::vector<Entry> read_spec(const V1DataOptions& o) {
  const std::string& spec = o.train_dataset;
  const auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return spec.size() >= s.size() && spec.compare(spec.size() - s.size(), s.size(), s) == 0;
  };
  if (!ends_with(".yaml") && !ends_with(".yml")) {
    if (!fs::exists(spec))
      UNILLM_THROW(ConfigError, "[config] ", o.where, ": train_dataset '", spec,
                   "' is neither a dataset YAML nor a local file or directory (Hugging Face Hub datasets need a "
                   "network; download it and name the local file)");
    return {Entry{"default", spec, "", o.where, {}, {}}};  // v1's native `messages` rows
  }
  if (!fs::exists(spec))
    UNILLM_THROW(ConfigError, "[config] ", o.where, ": train_dataset '", spec,
                 "' does not exist (a dataset YAML on the Hugging Face Hub needs a network; download it)");
  YAML::Node root;
  try {
    root = YAML::LoadFile(spec);
  } catch (const YAML::Exception& e) {
    UNILLM_THROW(ConfigError, "[config] ", spec, " line ", e.mark.line + 1, ": YAML syntax error: ", e.msg);
  }
  if (!root.IsMap() || root.size() == 0)
    UNILLM_THROW(ConfigError, "[config] ", spec, ": expected a mapping of dataset names to {path, source, converter, …}");
  const std::string dir = fs::path(spec).parent_path().string();
  std::vector<Entry> out;
  for (const auto& kv : root) {
    Entry e;
    e.name = kv.first.as<std::string>();
    e.where = yaml_where(spec, kv.first);
    const YAML::Node& v = kv.second;
    if (!v.IsMap()) UNILLM_THROW(ConfigError, "[config] ", e.where, ": dataset '", e.name, "' must be a mapping");
    std::string source = "hf_hub", split = "train", split_at;  // v1's defaults
    for (const auto& f : v) {
      const std::string key = f.first.as<std::string>();
      const std::string at = yaml_where(spec, f.first);
      const YAML::Node& val = f.second;
      const std::string text = val.IsScalar() ? val.as<std::string>() : "";
      try {
        if (key == "path") {
          e.path = text;
        } else if (key == "source") {
          source = text;
        } else if (key == "converter") {
          if (!val.IsNull()) e.converter = text;
          if (e.converter == "pair" && !o.pairs)
            UNILLM_THROW(ConfigError, "[config] ", at,
                         ": converter 'pair' makes DPO samples (chosen / rejected); train them with stage=dpo or stage=rm, "
                         "as `llamafactory-cli dpo|rm` does");
          if (e.converter != "pair" && !e.converter.empty() && o.pairs)
            UNILLM_THROW(ConfigError, "[config] ", at, ": converter '", e.converter,
                         "' makes SFT samples; v1's dpo needs pairs (converter: pair, or native chosen_messages / "
                         "rejected_messages rows)");
          if (!e.converter.empty() && e.converter != "alpaca" && e.converter != "sharegpt" && e.converter != "pair")
            UNILLM_THROW(ConfigError, "[config] ", at, ": unknown converter '", e.converter,
                         "' (LLaMA-Factory v1 has alpaca, sharegpt and pair)");
        } else if (key == "size") {
          if (!val.IsNull()) e.size = val.as<int64_t>();
          if (e.size && *e.size < 0) UNILLM_THROW(ConfigError, "[config] ", at, ": size must be >= 0");
        } else if (key == "weight") {
          if (!val.IsNull()) e.weight = val.as<double>();
          if (e.weight && *e.weight < 0) UNILLM_THROW(ConfigError, "[config] ", at, ": weight must be >= 0");
        } else if (key == "split") {
          split = text;
          split_at = at;
        } else if (key == "streaming") {
          if (!val.IsNull() && val.as<bool>())
            UNILLM_THROW(NotImplemented, "[config] ", at, ": streaming datasets are not implemented yet");
        } else {
          UNILLM_THROW(ConfigError, "[config] ", at, ": unknown dataset key '", key,
                       "' (path, source, converter, size, weight, split, streaming)");
        }
      } catch (const YAML::Exception&) {
        UNILLM_THROW(ConfigError, "[config] ", at, ": bad value for '", key, "'");
      }
    }
    if (source != "local")
      UNILLM_THROW(ConfigError, "[config] ", e.where, ": dataset '", e.name, "': source ", source,
                   " (v1's default when none is given): only local files are read here (the Hugging Face Hub "
                   "needs a network; download the data and give `source: local`)");
    if (split != "train")
      UNILLM_THROW(ConfigError, "[config] ", split_at, ": split '", split,
                   "': a local file has only the 'train' split (datasets' load_dataset)");
    if (e.path.empty()) UNILLM_THROW(ConfigError, "[config] ", e.where, ": dataset '", e.name, "' has no path");
    e.path = resolve(e.path, dir);
    if (!fs::exists(e.path))
      UNILLM_THROW(ConfigError, "[config] ", e.where, ": dataset '", e.name, "': ", e.path,
                   " does not exist (paths are read from the working directory, as LLaMA-Factory does, or beside ",
                   spec, " or from its parent directory)");
    out.push_back(std::move(e));
  }
  return out;
}

// The files of a path: itself, or a directory's json/jsonl files (all of the first one's type).
std::vector<std::string> files_of(const Entry& e) {
  const auto kind = [&](const fs::path& p) {
    const std::string x = p.extension().string();
    if (x == ".json" || x == ".jsonl") return std::string("json");
    UNILLM_THROW(NotImplemented, "[config] ", e.where, ": ", p.string(),
                 ": only json / jsonl files are read for LLaMA-Factory v1 data (", x, " is not implemented yet)");
  };
  if (!fs::is_directory(e.path)) {
    kind(e.path);
    return {e.path};
  }
  std::vector<std::string> files;
  for (const auto& f : fs::directory_iterator(e.path))
    if (f.is_regular_file()) files.push_back(f.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty()) UNILLM_THROW(ConfigError, "[config] ", e.where, ": ", e.path, " is an empty directory");
  for (const auto& f : files) kind(f);
  return files;
}

[[noreturn]] void bad(const std::string& src, const std::string& what) {
  UNILLM_THROW(DataError, "[data] ", src, ": ", what);
}

std::string text_of(const ojson& r, const char* key, const std::string& src) {
  if (!r.contains(key) || r[key].is_null()) return "";
  if (!r[key].is_string()) bad(src, UNILLM_MSG("'", key, "' must be a string"));
  return r[key].get<std::string>();
}

void no_media(const ojson& r, const std::string& src) {
  for (const char* k : {"images", "videos", "audios"})
    if (r.contains(k) && !r[k].is_null() && !(r[k].is_array() && r[k].empty()))
      UNILLM_THROW(NotImplemented, "[data] ", src, ": '", k,
                   "': multimodal samples are not implemented (unillm trains text-only models)");
}

// v1's converters split alpaca's prompt and sharegpt's values on the media placeholders, taking
// one file of the row's images / videos / audios per tag (more tags than files: its error).
void no_media_tags(const std::string& text, const std::string& src) {
  for (const char* tag : {"<image>", "<video>", "<audio>"})
    if (text.find(tag) != std::string::npos)
      UNILLM_THROW(NotImplemented, "[data] ", src, ": the text holds a ", tag,
                   " placeholder, which LLaMA-Factory v1's converters fill from the row's media (multimodal "
                   "samples are not implemented: unillm trains text-only models)");
}

// A tool call as v1's renderer takes one (format.py's _to_hf_messages raises otherwise).
const ojson& checked_call(const ojson& tc, const std::string& src) {
  if (!tc.is_object() || !tc.contains("name") || !tc.contains("arguments"))
    bad(src, "a tool_call must be a JSON object with 'name' and 'arguments'");
  return tc;
}

V1Message text_message(std::string role, std::string text, double weight) {
  V1Message m;
  m.role = std::move(role);
  m.text = std::move(text);
  m.loss_weight = weight;
  return m;
}

// alpaca_converter: system, instruction + input (joined as they are), output.
V1Sample from_alpaca(const ojson& r, const std::string& src) {
  no_media(r, src);
  V1Sample s;
  const auto has = [&](const char* k) { return r.contains(k) && !r[k].is_null(); };
  if (has("system")) s.messages.push_back(text_message("system", text_of(r, "system", src), 0.0));
  if (has("instruction") || has("input")) {
    std::string prompt = text_of(r, "instruction", src) + text_of(r, "input", src);
    no_media_tags(prompt, src);
    s.messages.push_back(text_message("user", std::move(prompt), 0.0));
  }
  if (has("output")) s.messages.push_back(text_message("assistant", text_of(r, "output", src), 1.0));
  return s;
}

// The tools column: re-serialised JSON when it parses, dropped (as v1 warns and drops) otherwise.
std::string tools_of(const ojson& r, const std::string& src) {
  const std::string t = text_of(r, "tools", src);
  if (t.empty()) return "";
  ojson v = ojson::parse(t, nullptr, false);
  return v.is_discarded() ? "" : v.dump();
}

V1Sample from_sharegpt(const ojson& r, const std::string& src) {
  no_media(r, src);
  static const std::map<std::string, std::string> roles = {
      {"system", "system"}, {"human", "user"}, {"gpt", "assistant"}, {"observation", "tool"}};
  V1Sample s;
  if (r.contains("conversations") && !r["conversations"].is_null()) {
    if (!r["conversations"].is_array()) bad(src, "'conversations' must be a list");
    for (const ojson& m : r["conversations"]) {
      if (!m.is_object() || !m.contains("from") || !m["from"].is_string() || !m.contains("value") ||
          !m["value"].is_string())
        bad(src, "each conversation message needs string 'from' and 'value'");
      const std::string tag = m["from"].get<std::string>(), value = m["value"].get<std::string>();
      if (tag == "function_call") {
        ojson calls = ojson::parse(value, nullptr, false);
        if (calls.is_discarded()) continue;  // v1 warns "Invalid tool call format" and drops it
        V1Message msg;
        msg.role = "assistant";
        msg.loss_weight = 1.0;
        if (!calls.is_array()) calls = ojson::array({calls});
        for (const ojson& c : calls) msg.tool_calls.push_back(checked_call(c, src));
        s.messages.push_back(std::move(msg));
      } else if (auto it = roles.find(tag); it != roles.end()) {
        no_media_tags(value, src);
        s.messages.push_back(text_message(it->second, value, tag == "gpt" ? 1.0 : 0.0));
      }  // an unknown tag: v1 warns and skips the message
    }
  }
  s.tools = tools_of(r, src);
  return s;
}

// A list of v1 messages: [{"role", "content": [{"type", "value"}], "loss_weight"}].
std::vector<V1Message> native_messages(const ojson& list, const std::string& src) {
  std::vector<V1Message> out;
  for (const ojson& m : list) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad(src, "each message needs a string 'role'");
    V1Message msg;
    msg.role = m["role"].get<std::string>();
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      bad(src, "role '" + msg.role + "' (system, user, assistant or tool)");
    msg.loss_weight = m.contains("loss_weight") && m["loss_weight"].is_number() ? m["loss_weight"].get<double>() : 1.0;
    if (!m.contains("content") || !m["content"].is_array()) bad(src, "each message needs a 'content' list");
    for (const ojson& c : m["content"]) {
      if (!c.is_object() || !c.contains("type") || !c["type"].is_string() || !c.contains("value") ||
          !c["value"].is_string())
        bad(src, "each content block needs string 'type' and 'value'");
      const std::string type = c["type"].get<std::string>(), value = c["value"].get<std::string>();
      if (type == "text") {
        msg.text += value;
      } else if (type == "reasoning") {
        msg.reasoning += value;
      } else if (type == "tool_call") {
        const ojson tc = ojson::parse(value, nullptr, false);
        msg.tool_calls.push_back(checked_call(tc, src));
      } else if (type == "image_url" || type == "video_url" || type == "audio_url") {
        UNILLM_THROW(NotImplemented, "[data] ", src, ": '", type,
                     "' content: multimodal samples are not implemented (unillm trains text-only models)");
      } else {
        bad(src, "content type '" + type + "' (text, reasoning, tool_call)");
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// v1's own rows: {"messages": [...], "tools"} or a pair {"chosen_messages", "rejected_messages"}.
V1Sample from_native(const ojson& r, const std::string& src) {
  V1Sample s;
  const auto list = [&](const char* k) { return r.contains(k) && r[k].is_array(); };
  if (list("chosen_messages") && list("rejected_messages")) {
    s.pair = true;
    s.messages = native_messages(r["chosen_messages"], src);
    s.rejected = native_messages(r["rejected_messages"], src);
  } else if (list("messages")) {
    s.messages = native_messages(r["messages"], src);
  } else {
    bad(src, "a v1 sample needs a 'messages' list or 'chosen_messages' and 'rejected_messages' (or name a "
             "converter: alpaca, sharegpt, pair)");
  }
  if (r.contains("tools") && r["tools"].is_string()) s.tools = r["tools"].get<std::string>();
  return s;
}

// pair_converter: chosen / rejected lists of {"role", "content"} (a tool message's content its
// tool calls), the assistant messages scored.
V1Sample from_pair(const ojson& r, const std::string& src) {
  no_media(r, src);
  const auto convert = [&](const char* key) {
    std::vector<V1Message> out;
    if (!r.contains(key) || r[key].is_null()) return out;
    if (!r[key].is_array()) bad(src, UNILLM_MSG("'", key, "' must be a list of messages"));
    for (const ojson& m : r[key]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
          !m["content"].is_string())
        bad(src, UNILLM_MSG("each message of '", key, "' needs string 'role' and 'content'"));
      V1Message msg;
      msg.role = m["role"].get<std::string>();
      msg.loss_weight = msg.role == "assistant" ? 1.0 : 0.0;
      const std::string content = m["content"].get<std::string>();
      if (msg.role == "tool") {
        ojson calls = ojson::parse(content, nullptr, false);
        if (calls.is_discarded()) continue;  // v1 warns "Invalid tool call format" and drops it
        if (!calls.is_array()) calls = ojson::array({calls});
        for (const ojson& c : calls) msg.tool_calls.push_back(checked_call(c, src));
      } else {
        no_media_tags(content, src);
        msg.text = content;
      }
      out.push_back(std::move(msg));
    }
    return out;
  };
  V1Sample s;
  s.pair = true;
  s.messages = convert("chosen");
  s.rejected = convert("rejected");
  s.tools = tools_of(r, src);
  return s;
}

// Python's str.replace(sp, sp[0] + "\u200b" + sp[1:]) for each special-token string, longest first.
std::string escape(std::string text, const std::vector<std::string>& specials) {
  for (const std::string& sp : specials) {
    if (text.find(sp) == std::string::npos) continue;
    size_t first = 1;  // sp's first code point, in bytes
    while (first < sp.size() && (static_cast<unsigned char>(sp[first]) & 0xC0) == 0x80) ++first;
    const std::string broken = sp.substr(0, first) + "\u200b" + sp.substr(first);
    std::string out;
    for (size_t at = 0;;) {
      const size_t hit = text.find(sp, at);
      out += text.substr(at, hit == std::string::npos ? std::string::npos : hit - at);
      if (hit == std::string::npos) break;
      out += broken;
      at = hit + sp.size();
    }
    text = std::move(out);
  }
  return text;
}

// A row left out: counted, and the first few reasons kept for the log.
void drop(TokenizedDataset& out, std::string why) {
  if (out.skip_messages.size() < 3) out.skip_messages.push_back(std::move(why));
  ++out.skipped_records;
}

}  // namespace

V1Index read_v1_index(const V1DataOptions& o) {
  V1Index idx;
  PythonRandom rng(o.seed);
  for (const Entry& e : read_spec(o)) {
    std::vector<std::pair<int64_t, int64_t>> entries;
    for (const std::string& file : files_of(e)) {
      const std::string bytes = io::read_file_bytes(file);
      JsonRecords recs = split_json_records(bytes);
      if (!recs.error.empty())
        UNILLM_THROW(DataError, "[data] ", file, " line ", recs.error_line, ": ", recs.error);
      for (const JsonRecord& rec : recs.records) {
        const std::string src = UNILLM_MSG(file, " line ", rec.line);
        ojson r = ojson::parse(rec.text, nullptr, false);
        if (r.is_discarded() || !r.is_object()) bad(src, "not a JSON object");
        V1Sample s = e.converter == "alpaca"     ? from_alpaca(r, src)
                     : e.converter == "sharegpt" ? from_sharegpt(r, src)
                     : e.converter == "pair"     ? from_pair(r, src)
                                                 : from_native(r, src);
        s.source = src;
        if (s.pair != o.pairs)
          bad(src, s.pair ? "a chosen / rejected pair; train pairs with stage=dpo or stage=rm, as `llamafactory-cli dpo|rm` does"
                          : "not a chosen / rejected pair (v1's dpo: \"DPO training requires pair-format samples\")");
        const auto at = static_cast<int64_t>(idx.samples.size());
        bool any = s.pair;  // a pair is kept whole
        if (s.pair) entries.emplace_back(at, static_cast<int64_t>(s.messages.size()));
        for (size_t i = 0; i < s.messages.size() && !s.pair; ++i)
          if (s.messages[i].role == "assistant" && s.messages[i].loss_weight > 1e-6) {
            entries.emplace_back(at, static_cast<int64_t>(i + 1));
            any = true;
          }
        if (!any) entries.emplace_back(at, static_cast<int64_t>(s.messages.size()));
        idx.samples.push_back(std::move(s));
      }
    }
    // adjust_data_index: random.choices(index, k=size), then k=int(len · weight).
    const auto resample = [&](int64_t k) {
      std::vector<std::pair<int64_t, int64_t>> picked;
      for (int64_t i : rng.choices(static_cast<int64_t>(entries.size()), k)) picked.push_back(entries[static_cast<size_t>(i)]);
      entries = std::move(picked);
    };
    if (e.size) resample(*e.size);
    if (e.weight) resample(static_cast<int64_t>(static_cast<double>(entries.size()) * *e.weight));
    idx.entries.insert(idx.entries.end(), entries.begin(), entries.end());
  }
  return idx;
}

struct V1Renderer::Impl {
  std::unique_ptr<JinjaChatTemplate> thinking, plain;  // enable_thinking true / false
  std::vector<std::string> specials;                   // longest first
  const io::Tokenizer* tok = nullptr;
};

V1Renderer::V1Renderer(const std::string& model_dir, const io::Tokenizer& tok) : impl_(std::make_unique<Impl>()) {
  TemplateOptions on, off;
  on.enable_thinking = true;
  off.enable_thinking = false;
  impl_->thinking = JinjaChatTemplate::load_or(model_dir, tok, on, kChatMlJinja);
  impl_->plain = JinjaChatTemplate::load_or(model_dir, tok, off, kChatMlJinja);
  impl_->tok = &tok;
  for (const auto& a : tok.data().added)
    if (a.special && std::count_if(a.content.begin(), a.content.end(), [](char c) {
          return (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // code points, as Python's len
        }) >= 2)
      impl_->specials.push_back(a.content);
  std::stable_sort(impl_->specials.begin(), impl_->specials.end(),
                   [](const std::string& x, const std::string& y) { return x.size() > y.size(); });
}

V1Renderer::~V1Renderer() = default;

V1Row V1Renderer::render(const V1Sample& s, int64_t cut) const {
  return render_messages(std::vector<V1Message>(s.messages.begin(), s.messages.begin() + cut), s.tools, s.source);
}

V1Row V1Renderer::render_messages(const std::vector<V1Message>& msgs, const std::string& tools_text,
                                  const std::string& source) const {
  const auto cut = static_cast<int64_t>(msgs.size());
  if (cut < 1 || msgs.back().role != "assistant")
    bad(source, "the sample must end with the assistant turn it trains on (LLaMA-Factory v1's rule)");
  if (cut == 1)  // v1 renders its prompt from no messages, which apply_chat_template fails on
    bad(source, "the trained assistant turn has no message before it (LLaMA-Factory v1 cannot render its prompt)");
  // (v1 then checks that the escaped text encodes to no special id; the tokenizers here match
  // special tokens as exact strings, which U+200B breaks, so it cannot.)
  const auto esc = [&](const std::string& t) { return escape(t, impl_->specials); };
  ojson messages = ojson::array();
  for (int64_t i = 0; i < cut; ++i) {
    const V1Message& m = msgs[static_cast<size_t>(i)];
    ojson hm = {{"role", m.role}, {"content", esc(m.text)}};
    if (!m.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (ojson tc : m.tool_calls) {
        if (tc["arguments"].is_object())
          for (auto& [k, v] : tc["arguments"].items())
            if (v.is_string()) v = esc(v.get<std::string>());
        calls.push_back({{"type", "function"}, {"function", {{"name", tc["name"]}, {"arguments", tc["arguments"]}}}});
      }
      hm["tool_calls"] = calls;
    }
    if (!m.reasoning.empty()) hm["reasoning_content"] = esc(m.reasoning);
    messages.push_back(std::move(hm));
  }
  ojson tools = nullptr;
  if (!tools_text.empty()) {
    tools = ojson::parse(esc(tools_text), nullptr, false);
    if (tools.is_discarded()) bad(source, "tools is not valid JSON");
    if (!tools.is_array()) tools = ojson::array({tools});
  }
  const V1Message& last = msgs.back();
  const JinjaChatTemplate& t = last.reasoning.empty() ? *impl_->plain : *impl_->thinking;
  V1Row row;
  row.ids = t.tokenize(t.render_json(messages, tools, false));
  ojson head = messages;
  head.erase(head.size() - 1);
  const std::vector<int32_t> prompt = t.tokenize(t.render_json(head, tools, true));
  if (prompt.size() > row.ids.size() || !std::equal(prompt.begin(), prompt.end(), row.ids.begin()))
    bad(source,
        "the chat template's prompt is not a token prefix of the whole conversation for this turn, so its "
        "supervised tokens cannot be found (LLaMA-Factory v1 refuses it too)");
  const double w = last.loss_weight;
  if (w > 1e-6 && std::abs(w - 1.0) > 1e-6)
    UNILLM_THROW(NotImplemented, "[data] ", source, ": loss_weight ", w,
                 ": only 0 and 1 are implemented (unillm's losses weigh tokens 0 or 1)");
  row.labels.assign(prompt.size(), kIgnoreIndex);
  for (size_t i = prompt.size(); i < row.ids.size(); ++i) row.labels.push_back(w > 1e-6 ? row.ids[i] : kIgnoreIndex);
  return row;
}

namespace {

bool has_scored(const std::vector<int32_t>& labels) {
  return std::any_of(labels.begin(), labels.end(), [](int32_t l) { return l != kIgnoreIndex; });
}

// A rendered row's first n tokens (n at most its length).
void keep_first(V1Row& row, int64_t n) {
  row.ids.resize(static_cast<size_t>(n));
  row.labels.resize(static_cast<size_t>(n));
}

}  // namespace

TokenizedDataset load_v1_sft_data(const V1DataOptions& o, const io::Tokenizer& tok, const std::string& model_dir) {
  const V1Index idx = read_v1_index(o);
  const V1Renderer renderer(model_dir, tok);
  TokenizedDataset out;
  out.documents = static_cast<int64_t>(idx.samples.size());
  for (const auto& [sample, cut] : idx.entries) {
    V1Row r = renderer.render(idx.samples[static_cast<size_t>(sample)], cut);
    if (static_cast<int64_t>(r.ids.size()) > o.cutoff_len) {
      keep_first(r, o.cutoff_len);
      if (!has_scored(r.labels)) {
        drop(out, idx.samples[static_cast<size_t>(sample)].source + ": its supervised tokens all fall beyond cutoff_len " +
                      std::to_string(o.cutoff_len) + " (dropped, as LLaMA-Factory v1 does)");
        continue;
      }
    }
    out.rows.push_back(std::move(r.ids));
    out.labels.push_back(std::move(r.labels));
  }
  if (out.rows.empty())
    UNILLM_THROW(DataError, "[data] ", o.train_dataset, ": no training sample (", idx.entries.size(),
                 " in the index, ", out.skipped_records, " dropped by cutoff_len)");
  return out;
}

TokenizedDataset load_v1_pair_data(const V1DataOptions& o, const io::Tokenizer& tok, const std::string& model_dir) {
  UNILLM_CHECK(o.pairs, "load_v1_pair_data reads pairs (V1DataOptions::pairs)");
  const V1Index idx = read_v1_index(o);
  const V1Renderer renderer(model_dir, tok);
  TokenizedDataset out;
  out.group = 2;
  out.documents = static_cast<int64_t>(idx.samples.size());
  for (const auto& entry : idx.entries) {
    const V1Sample& s = idx.samples[static_cast<size_t>(entry.first)];
    V1Row c = renderer.render_messages(s.messages, s.tools, s.source);
    V1Row r = renderer.render_messages(s.rejected, s.tools, s.source);
    const auto total = static_cast<int64_t>(c.ids.size() + r.ids.size());
    if (total > o.cutoff_len) {  // the concatenation's first cutoff_len tokens
      const auto keep_c = std::min<int64_t>(o.cutoff_len, static_cast<int64_t>(c.ids.size()));
      keep_first(c, keep_c);
      keep_first(r, o.cutoff_len - keep_c);
      // v1 drops a row with no scored token left, and trains one whose rejected half has none with
      // that half's log-prob 0; the pair losses here need scored tokens on both sides, so such a
      // pair is dropped too (said in the log).
      if (!has_scored(c.labels) || !has_scored(r.labels)) {
        drop(out, s.source + (has_scored(c.labels) ? ": its rejected side has no scored token within cutoff_len "
                                                : ": its scored tokens all fall beyond cutoff_len ") +
                      std::to_string(o.cutoff_len) + " (dropped)");
        continue;
      }
    }
    out.rows.push_back(std::move(c.ids));
    out.labels.push_back(std::move(c.labels));
    out.rows.push_back(std::move(r.ids));
    out.labels.push_back(std::move(r.labels));
  }
  if (out.rows.empty())
    UNILLM_THROW(DataError, "[data] ", o.train_dataset, ": no training pair (", idx.entries.size(),
                 " in the index, ", out.skipped_records, " dropped by cutoff_len)");
  return out;
}

}  // namespace unillm::data
