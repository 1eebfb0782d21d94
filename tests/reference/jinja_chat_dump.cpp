// Test-only driver for jinja_chat_check.py: encodes a batch of conversations through
// data::JinjaChatTemplate (a model dir's own chat_template) in one process. Input JSON:
// {"cases": [{"tokenizer_dir", "model_dir", "kind": "prompt" | "sft", "messages": [{"role": user |
// assistant | function | observation, "content"}], "system", "tools", "enable_thinking": true |
// false}]}; output JSON: one per case, {"ok": true, "ids": [...], "labels": [...] (sft only)} or
// {"ok": false, "error": ...}. sft cases go through the SFT encoder (encode_supervised). Each
// tokenizer is loaded once (the model dirs hold copies of a few tokenizers).
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/jinja_template.h"
#include "data/sft_encode.h"

namespace {

using nlohmann::ordered_json;
using unillm::data::Role;

Role role_of(const std::string& r) {
  if (r == "user") return Role::kUser;
  if (r == "assistant") return Role::kAssistant;
  if (r == "function") return Role::kFunction;
  if (r == "observation") return Role::kObservation;
  throw std::runtime_error("unknown role " + r);
}

ordered_json run_case(const ordered_json& c, const unillm::io::Tokenizer& tok) {
  unillm::data::TemplateOptions o;
  if (c.contains("enable_thinking")) o.enable_thinking = c["enable_thinking"].get<bool>();
  auto t = unillm::data::JinjaChatTemplate::load(c["model_dir"].get<std::string>(), tok, o);
  unillm::data::Conversation conv;
  for (const auto& m : c["messages"])
    conv.messages.push_back(
        {role_of(m["role"].get<std::string>()), m["content"].get<std::string>()});
  conv.system = c.value("system", "");
  conv.tools = c.value("tools", "");
  if (c["kind"] == "prompt")
    return {{"ok", true}, {"ids", t->encode_prompt(conv.messages, conv.system, conv.tools)}};
  unillm::data::SupervisedOptions so;
  so.cutoff_len = 1 << 20;
  const auto e = unillm::data::encode_supervised(conv, *t, so);
  return {{"ok", true}, {"ids", e.input_ids}, {"labels", e.labels}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: jinja_chat_dump IN.json OUT.json\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  const ordered_json batch = ordered_json::parse(in);
  std::map<std::string, std::unique_ptr<unillm::io::Tokenizer>> toks;
  ordered_json out = ordered_json::array();
  for (const auto& c : batch["cases"]) {
    const std::string dir = c["tokenizer_dir"].get<std::string>();
    if (!toks.count(dir)) toks[dir] = unillm::io::Tokenizer::load(dir);
    try {
      out.push_back(run_case(c, *toks[dir]));
    } catch (const unillm::Error& e) {
      out.push_back({{"ok", false}, {"error", e.what()}});
    }
  }
  std::ofstream(argv[2]) << out.dump();
  return 0;
}
