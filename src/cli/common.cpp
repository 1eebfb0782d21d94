// Shared CLI helpers.
#include "cli/common.h"

#include <fstream>
#include <sstream>

#include "backends/cpu/register.h"
#include "core/error.h"

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

}  // namespace unillm::cli
