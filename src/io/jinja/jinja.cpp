// Template = parsed tree + name; render converts the JSON context to Values and walks the tree.
#include "io/jinja/jinja.h"

#include "core/error.h"
#include "io/jinja/eval.h"
#include "io/jinja/lexer.h"
#include "io/jinja/parser.h"

namespace unillm::jinja {

struct TemplateData {
  std::string name;
  Body body;
};

Template parse(const std::string& source, const std::string& name) {
  auto data = std::make_shared<TemplateData>();
  data->name = name;
  data->body = parse_tokens(lex(source, name), name);
  Template t;
  t.data_ = std::move(data);
  return t;
}

std::string Template::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object())
    UNILLM_THROW(ConfigError, "[jinja] ", data_->name,
                 ": the render context must be a JSON object");
  return render_body(data_->body, Value::from_json(context), data_->name, limits);
}

std::string Template::render(const nlohmann::json& context) const {
  return render(nlohmann::ordered_json::parse(context.dump()));
}

const std::string& Template::name() const { return data_->name; }

}  // namespace unillm::jinja
