// Test-only driver for jinja_check.py: renders a batch of (template, context) cases with
// unillm::jinja in one process. Input JSON: {"templates": {name: source}, "cases": [{"template":
// name, "context": {...}}]}; output JSON: [{"ok": true, "text": ...} | {"ok": false, "error":
// ...}].
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/jinja/jinja.h"

int main(int argc, char** argv) {
  using nlohmann::ordered_json;
  if (argc != 3) {
    std::cerr << "usage: jinja_render IN.json OUT.json\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  ordered_json batch = ordered_json::parse(in);
  std::map<std::string, unillm::jinja::Template> parsed;
  std::map<std::string, std::string> parse_errors;
  for (auto it = batch["templates"].begin(); it != batch["templates"].end(); ++it) {
    try {
      parsed.emplace(it.key(), unillm::jinja::parse(it.value().get<std::string>(), it.key()));
    } catch (const unillm::Error& e) {
      parse_errors[it.key()] = e.what();
    }
  }
  ordered_json out = ordered_json::array();
  for (const auto& c : batch["cases"]) {
    std::string name = c["template"].get<std::string>();
    ordered_json r;
    if (parse_errors.count(name)) {
      r = {{"ok", false}, {"error", parse_errors[name]}};
    } else {
      try {
        r = {{"ok", true}, {"text", parsed.at(name).render(c["context"])}};
      } catch (const unillm::Error& e) {
        r = {{"ok", false}, {"error", e.what()}};
      }
    }
    out.push_back(r);
  }
  std::ofstream(argv[2]) << out.dump();
  return 0;
}
