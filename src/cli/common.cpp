// Shared CLI helpers.
#include "cli/common.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "backends/cpu/register.h"
#include "core/error.h"
#include "models/adapter.h"

namespace unillm::cli {

void add_runtime_options(ArgParser& p, RuntimeOptions& o) {
  p.option("device", "cpu (default), cuda[:N], plugin[:N]", &o.device);
  p.option("threads", "threads for kernels and BLAS (default: cores in the affinity mask)", &o.threads);
}

Device setup_runtime(const RuntimeOptions& o) {
  cpu::register_cpu_backend();
  if (o.threads < 0) UNILLM_THROW(ConfigError, "[cli] --threads must be >= 1, got ", o.threads);
  cpu::set_num_threads(static_cast<int>(o.threads));
  Device d = parse_device(o.device);
  backend_for(d);  // throws a DeviceError naming the device when this build lacks it
  return d;
}

void cpu_register_only() { cpu::register_cpu_backend(); }

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    std::string t = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(t, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
    if (t.empty() || used != t.size() || v < 0 || v > INT32_MAX)
      UNILLM_THROW(ConfigError, "[cli] --", flag, ": '", t, "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) UNILLM_THROW(ConfigError, "[cli] --", flag, " is empty");
  return ids;
}

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) UNILLM_THROW(IoError, "[cli] cannot open ", path);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

std::string hf_cache_root() {
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) return c;
  if (const char* h = std::getenv("HF_HOME"); h && *h) return std::string(h) + "/hub";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/huggingface/hub";
}

std::unique_ptr<models::CausalLM> load_model(const std::string& dir,
                                             const std::vector<std::string>& adapter_dirs) {
  auto model = models::load_causal_lm(dir);
  std::vector<std::string> names;
  for (size_t i = 0; i < adapter_dirs.size(); ++i) {
    names.push_back("adapter" + std::to_string(i));
    models::load_adapter(*model, adapter_dirs[i], names.back());
  }
  model->set_active_adapters(names);
  return model;
}

}  // namespace unillm::cli
