// output_dir checks, staging dirs and the commit of a staged final output (see output_dir.h).
#include "train/output_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>
#include <vector>

#include "core/error.h"
#include "io/safetensors_writer.h"

namespace unillm::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStagingTag = ".unillm-";

fs::path absolute_clean(const std::string& p) {
  std::error_code ec;
  fs::path a = fs::weakly_canonical(fs::absolute(p), ec);
  return ec ? fs::absolute(p).lexically_normal() : a;
}

// True when a is b or a directory above it (component by component, not by string prefix).
bool is_same_or_ancestor(const fs::path& a, const fs::path& b) {
  auto ai = a.begin(), bi = b.begin();
  for (; ai != a.end(); ++ai, ++bi) {
    if (ai->empty()) continue;  // a trailing separator
    if (bi == b.end() || *ai != *bi) return false;
  }
  return true;
}

}  // namespace

void refuse_input_dirs(const std::string& key, const std::string& dir,
                       const std::string& config_path,
                       const std::vector<std::pair<std::string, std::string>>& inputs) {
  const fs::path out = absolute_clean(dir);
  for (const auto& [label, input] : inputs) {
    if (input.empty()) continue;
    const fs::path in = absolute_clean(input);
    if (!is_same_or_ancestor(out, in)) continue;
    UNILLM_THROW(ConfigError, "[config] ", config_path, ": ", key, " '", dir, "' ",
                 out == in ? "is" : "contains", " the ", label, " dir '", input,
                 "'; its files would be written among that dir's. Choose another ", key);
  }
}

bool is_staging_name(const std::string& name) {
  static const std::regex kName(R"(.+\.unillm-[A-Za-z0-9]{6})");
  return std::regex_match(name, kName);
}

void prepare_output_dir(const OutputDirRules& r) {
  std::error_code ec;
  const bool exists = fs::exists(r.output_dir, ec);
  if (exists && !fs::is_directory(r.output_dir, ec))
    UNILLM_THROW(ConfigError, "[train] ", r.config_path, ": output_dir '", r.output_dir,
                 "' is a file, not a directory");
  refuse_input_dirs("output_dir", r.output_dir, r.config_path, r.inputs);
  if (exists && !fs::is_empty(r.output_dir, ec) && !r.overwrite && !r.resuming)
    UNILLM_THROW(ConfigError, "[train] ", r.config_path, ": output_dir '", r.output_dir,
                 "' is not empty; set overwrite_output_dir: true to write into it (nothing in it is "
                 "deleted; files of the same name are replaced) or resume_from_checkpoint");
  fs::create_directories(r.output_dir, ec);
  if (!fs::is_directory(r.output_dir))
    UNILLM_THROW(IoError, "[train] cannot create output_dir '", r.output_dir, "' (", ec.message(), ")");
  for (const auto& e : fs::directory_iterator(r.output_dir, ec))
    if (e.is_directory() && is_staging_name(e.path().filename().string()))
      remove_staging_dir(e.path().string());
}

std::string make_staging_dir(const std::string& output_dir, const std::string& stem) {
  std::string tmpl = (fs::path(output_dir) / (stem + kStagingTag + "XXXXXX")).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    UNILLM_THROW(IoError, "[train] cannot create a directory in ", output_dir, " (",
                 std::strerror(errno), ")");
  return buf.data();
}

void remove_staging_dir(const std::string& dir) noexcept {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

void commit_staging(const std::string& staging, const std::string& output_dir) {
  std::vector<fs::path> files;
  std::set<std::string> staged_weights;
  for (const auto& e : fs::directory_iterator(staging)) {
    files.push_back(e.path());
    const std::string name = e.path().filename().string();
    if (io::is_weight_file_name(name)) staged_weights.insert(name);
  }
  std::error_code ec;
  if (!staged_weights.empty())
    for (const auto& e : fs::directory_iterator(output_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (io::is_weight_file_name(name) && !staged_weights.count(name)) fs::remove(e.path(), ec);
    }
  for (const auto& f : files) {
    const fs::path to = fs::path(output_dir) / f.filename();
    fs::rename(f, to, ec);
    if (ec)
      UNILLM_THROW(IoError, "[train] cannot move ", f.string(), " to ", to.string(), " (",
                   ec.message(), "); the new output stays in ", staging);
  }
  remove_staging_dir(staging);
}

}  // namespace unillm::train
