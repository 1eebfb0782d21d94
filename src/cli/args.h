// A small command-line parser: --name VALUE, --name=VALUE, boolean --flags, repeatable options.
// Errors (unknown option with a "did you mean", missing or malformed value) throw ConfigError.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace unillm::cli {

class ArgParser {
 public:
  ArgParser(std::string command, std::string summary);
  void flag(const std::string& name, const std::string& help, bool* out);
  void option(const std::string& name, const std::string& help, std::string* out);
  void option(const std::string& name, const std::string& help, int64_t* out);
  void option(const std::string& name, const std::string& help, double* out);
  void repeated(const std::string& name, const std::string& help, std::vector<std::string>* out);
  // Parses args (without the program and command names). Throws ConfigError; returns false
  // when --help was given (help() has the text).
  bool parse(const std::vector<std::string>& args);
  bool given(const std::string& name) const;
  void require(const std::string& name) const;  // throws when absent
  std::string help() const;

 private:
  enum class Kind { flag, text, integer, real, list };
  struct Opt {
    std::string name, help;
    Kind kind;
    void* out;
    bool given = false;
  };
  Opt* find(const std::string& name);
  const Opt* find(const std::string& name) const;
  void set(Opt& o, const std::string& value);
  std::string command_, summary_;
  std::vector<Opt> opts_;
};

// Closest of candidates to word by edit distance, or "" when none is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace unillm::cli
