// The built-in chat templates: every register_template call of LLaMA-Factory's
// src/llamafactory/data/template.py as a row (template_defs_*.cpp, generated), with
// register_template's defaults filled in here.
#include "data/template_defs.h"

#include <algorithm>

#include "data/template.h"

namespace unillm::data {
namespace {

using template_rows::kEos;
using template_rows::text;

// register_template's defaults: user/system "{{content}}", assistant "{{content}}" + EOS (no EOS
// with efficient_eos), function = the assistant slots as given (else that default) in the
// "default" tool format, observation = the user format as given (else "{{content}}").
TemplateDef finish(TemplateDef d) {
  TemplateSlots default_slots = {text("{{content}}")};
  if (!d.efficient_eos) default_slots.push_back(kEos);
  if (d.format_function.empty())
    d.format_function = d.format_assistant.empty() ? default_slots : d.format_assistant;
  if (d.format_observation.empty())
    d.format_observation =
        d.format_user.empty() ? TemplateSlots{text("{{content}}")} : d.format_user;
  if (d.format_user.empty()) d.format_user = {text("{{content}}")};
  if (d.format_assistant.empty()) d.format_assistant = default_slots;
  if (d.format_system.empty()) d.format_system = {text("{{content}}")};
  return d;
}

std::vector<TemplateDef> build_defs() {
  std::vector<TemplateDef> rows;
  template_rows::add_a_f(rows);
  template_rows::add_g_h(rows);
  template_rows::add_i_l(rows);
  template_rows::add_m_p(rows);
  template_rows::add_q_z(rows);
  std::vector<TemplateDef> out;
  for (TemplateDef& d : rows) out.push_back(finish(std::move(d)));
  return out;
}

const std::vector<TemplateDef>& builtin_defs() {
  static const std::vector<TemplateDef> defs = build_defs();  // immutable after first use
  return defs;
}

}  // namespace

const TemplateDef* find_template_def(const std::string& name) {
  for (const TemplateDef& d : builtin_defs())
    if (d.name == name) return &d;
  return nullptr;
}

std::vector<std::string> ChatTemplate::names() {
  std::vector<std::string> out;
  for (const TemplateDef& d : builtin_defs()) out.push_back(d.name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace unillm::data
