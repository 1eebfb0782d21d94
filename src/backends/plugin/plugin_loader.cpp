// dlopen of device plugins, ABI checks and registration.
#include "backends/plugin/plugin_loader.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>

#include "backends/plugin/plugin_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/registry.h"

namespace unillm::plugin {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> candidates(const std::string& search_path) {
  std::vector<std::string> files;
  std::stringstream ss(search_path);
  std::string entry;
  while (std::getline(ss, entry, ':')) {
    if (entry.empty()) continue;
    std::error_code ec;
    if (!fs::is_directory(entry, ec)) {
      files.push_back(entry);
      continue;
    }
    std::vector<std::string> in_dir;
    for (const auto& e : fs::directory_iterator(entry, ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("lib", 0) == 0 && n.size() > 3 && e.path().extension() == ".so")
        in_dir.push_back(e.path().string());
    }
    std::sort(in_dir.begin(), in_dir.end());
    files.insert(files.end(), in_dir.begin(), in_dir.end());
  }
  return files;
}

// Loads one plugin; returns its report line or throws Error with the reason.
std::string load_one(const std::string& file) {
  void* lib = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) UNILLM_THROW(DeviceError, "cannot load it: ", ::dlerror());
  auto init = reinterpret_cast<unillm_plugin_init_fn>(::dlsym(lib, UNILLM_PLUGIN_INIT_SYMBOL));
  if (!init) UNILLM_THROW(DeviceError, "no symbol ", UNILLM_PLUGIN_INIT_SYMBOL, " (not a unillm plugin?)");
  // The plugin's data must outlive every backend: it stays loaded, and its description is kept.
  static std::vector<std::unique_ptr<unillm_plugin>> kept;
  auto p = std::make_unique<unillm_plugin>();
  std::memset(p.get(), 0, sizeof *p);
  p->size = sizeof *p;
  const unillm_status s = init(UNILLM_PLUGIN_ABI_MAJOR, UNILLM_PLUGIN_ABI_MINOR, p.get());
  const std::string said(p->error, strnlen(p->error, sizeof p->error));
  if (s != UNILLM_OK)
    UNILLM_THROW(DeviceError, "its initialisation failed (status ", s, "): ", said.empty() ? "no message" : said);
  if (p->abi_major != UNILLM_PLUGIN_ABI_MAJOR)
    UNILLM_THROW(DeviceError, "it was built for plugin ABI ", p->abi_major, ".", p->abi_minor,
                 "; this unillm takes ", UNILLM_PLUGIN_ABI_MAJOR, ".x");
  if (!p->name || !*p->name || !p->device || p->device->size == 0)
    UNILLM_THROW(DeviceError, "it filled no device name or device interface");
  DeviceKind kind = register_device_kind(p->name);
  register_backend(std::make_unique<PluginBackend>(kind, *p, file));
  size_t registered = 0;
  for (size_t i = 0; i < p->num_kernels; ++i) {
    const unillm_kernel& k = p->kernels[i];
    DType dt;
    if (!k.op || !k.fn || !dtype_from_code(k.dtype, &dt)) continue;  // a dtype this unillm lacks
    kernel_registry().add<PluginKernelFn>(k.op, kind, dt, k.fn, k.variant ? k.variant : "");
    ++registered;
  }
  const int devices = find_backend(kind)->device_count();
  std::string no_collectives;
  const bool collectives = usable_collectives(*p, &no_collectives) != nullptr;
  std::string line = UNILLM_MSG(p->name, " (", file, ", ABI ", p->abi_major, ".", p->abi_minor, ", ",
                                devices, devices == 1 ? " device, " : " devices, ", registered, " kernels",
                                collectives ? ", collectives" : "", ")");
  if (!no_collectives.empty()) line += "; collectives not used: " + no_collectives;
  kept.push_back(std::move(p));
  return line;
}

}  // namespace

LoadReport load_plugins(const std::string& search_path) {
  LoadReport r;
  for (const auto& file : candidates(search_path)) {
    try {
      r.loaded.push_back(load_one(file));
    } catch (const Error& e) {
      r.failures.push_back("plugin " + file + ": " + e.what());
    }
  }
  return r;
}

}  // namespace unillm::plugin
