// Internal to the template rows (template_defs*.cpp): the slot helpers the generated rows use and
// the functions that append each file's rows.
#pragma once

#include <vector>

#include "data/template.h"

namespace unillm::data::template_rows {

inline TemplateSlot text(const char* s) { return {TemplateSlot::Kind::kText, s}; }
inline TemplateSlot token(const char* s) { return {TemplateSlot::Kind::kToken, s}; }
inline const TemplateSlot kBos{TemplateSlot::Kind::kBos, ""};
inline const TemplateSlot kEos{TemplateSlot::Kind::kEos, ""};

// One per generated file (tools/gen_template_defs.py), named by the first letters it covers.
void add_a_f(std::vector<TemplateDef>& out);
void add_g_h(std::vector<TemplateDef>& out);
void add_i_l(std::vector<TemplateDef>& out);
void add_m_p(std::vector<TemplateDef>& out);
void add_q_z(std::vector<TemplateDef>& out);

}  // namespace unillm::data::template_rows
