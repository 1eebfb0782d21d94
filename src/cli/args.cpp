// Command-line parsing with clear errors.
#include "cli/args.h"

#include <cmath>

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace unillm::cli {

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(3, word.size() / 3) + 1;
  for (auto& c : candidates) {
    std::vector<size_t> prev(c.size() + 1), cur(c.size() + 1);
    for (size_t j = 0; j <= c.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= c.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (word[i - 1] != c[j - 1])});
      std::swap(prev, cur);
    }
    if (prev[c.size()] < best_d) {
      best_d = prev[c.size()];
      best = c;
    }
  }
  return best;
}

ArgParser::ArgParser(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void ArgParser::flag(const std::string& n, const std::string& h, bool* out) { opts_.push_back({n, h, Kind::flag, out}); }
void ArgParser::option(const std::string& n, const std::string& h, std::string* out) { opts_.push_back({n, h, Kind::text, out}); }
void ArgParser::option(const std::string& n, const std::string& h, int64_t* out) { opts_.push_back({n, h, Kind::integer, out}); }
void ArgParser::option(const std::string& n, const std::string& h, double* out) { opts_.push_back({n, h, Kind::real, out}); }
void ArgParser::repeated(const std::string& n, const std::string& h, std::vector<std::string>* out) {
  opts_.push_back({n, h, Kind::list, out});
}

ArgParser::Opt* ArgParser::find(const std::string& name) {
  for (auto& o : opts_)
    if (o.name == name) return &o;
  return nullptr;
}

const ArgParser::Opt* ArgParser::find(const std::string& name) const {
  return const_cast<ArgParser*>(this)->find(name);
}

void ArgParser::set(Opt& o, const std::string& v) {
  o.given = true;
  try {
    size_t used = 0;
    switch (o.kind) {
      case Kind::flag: *static_cast<bool*>(o.out) = true; return;
      case Kind::text: *static_cast<std::string*>(o.out) = v; return;
      case Kind::list: static_cast<std::vector<std::string>*>(o.out)->push_back(v); return;
      case Kind::integer: *static_cast<int64_t*>(o.out) = std::stoll(v, &used); break;
      case Kind::real: {
        const double d = std::stod(v, &used);
        if (!std::isfinite(d)) throw std::invalid_argument(v);  // nan, inf, 1e999
        *static_cast<double*>(o.out) = d;
        break;
      }
    }
    if (used != v.size()) throw std::invalid_argument(v);
  } catch (const std::logic_error&) {
    UNILLM_THROW(ConfigError, "[", command_, "] --", o.name, ": '", v, "' is not a valid ",
                 o.kind == Kind::integer ? "integer" : "finite number");
  }
}

bool ArgParser::parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") return false;
    if (a.rfind("--", 0) != 0)
      UNILLM_THROW(ConfigError, "[", command_, "] unexpected argument '", a, "' (see --help)");
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Opt* o = find(name);
    if (!o) {
      std::vector<std::string> names;
      for (auto& x : opts_) names.push_back(x.name);
      std::string guess = did_you_mean(name, names);
      UNILLM_THROW(ConfigError, "[", command_, "] unknown option --", name,
                   guess.empty() ? "" : " (did you mean --" + guess + "?)");
    }
    if (o->kind == Kind::flag) {
      if (has_value) UNILLM_THROW(ConfigError, "[", command_, "] --", name, " takes no value");
      set(*o, "");
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) UNILLM_THROW(ConfigError, "[", command_, "] --", name, " needs a value");
      value = args[++i];
    }
    set(*o, value);
  }
  return true;
}

bool ArgParser::given(const std::string& name) const {
  const Opt* o = find(name);
  return o && o->given;
}

void ArgParser::require(const std::string& name) const {
  if (!given(name)) UNILLM_THROW(ConfigError, "[", command_, "] --", name, " is required (see --help)");
}

std::string ArgParser::help() const {
  std::ostringstream os;
  os << "usage: unillm " << command_ << " [options]\n" << summary_ << "\n\noptions:\n";
  for (auto& o : opts_) {
    std::string lhs = "--" + o.name + (o.kind == Kind::flag ? "" : " VALUE");
    os << "  " << lhs << std::string(lhs.size() < 26 ? 26 - lhs.size() : 1, ' ') << o.help << "\n";
  }
  return os.str();
}

}  // namespace unillm::cli
