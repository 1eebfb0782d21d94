// `unillm env`: version, build options, devices, threads, BLAS, CPU instruction-set level, kernel coverage.
#include <cstdio>
#include <cstdlib>

#include "backends/cpu/register.h"
#include "cli/commands.h"
#include "core/error.h"
#include "cli/common.h"
#include "core/parallel.h"
#include "core/registry.h"

namespace unillm::cli {

int cmd_env(const std::vector<std::string>& args) {
  bool kernels = false;
  RuntimeOptions runtime;
  ArgParser p("env", "Describe this build and machine.");
  p.flag("kernels", "also print the kernel coverage table (op: device/dtype ...)", &kernels);
  add_runtime_options(p, runtime);
  if (!p.parse(args)) return print_help(p);
  setup_runtime(runtime);
  std::printf("unillm %s (%s build, %s)\n", UNILLM_VERSION, UNILLM_BUILD_TYPE, UNILLM_COMPILER);
  std::printf("build options: cuda=%s\n", "off");
  for (Backend* b : registered_backends())
    for (int i = 0; i < b->device_count(); ++i) {
      const DeviceProperties d = b->properties(i);
      std::string dtypes;
      for (const auto& t : d.dtypes) dtypes += (dtypes.empty() ? "" : ",") + t;
      std::printf("device: %s (%s; %.1f GiB; dtypes %s)\n",
                  device_name(Device{b->kind(), i}).c_str(), d.name.c_str(),
                  static_cast<double>(d.total_memory) / (1u << 30), dtypes.c_str());
    }
  for (const auto& l : loaded_plugins()) std::printf("plugin: %s\n", l.c_str());
  for (const auto& f : plugin_failures()) std::printf("plugin failed: %s\n", f.c_str());
  if (loaded_plugins().empty() && plugin_failures().empty())
    std::printf("plugins: none (UNILLM_PLUGIN_PATH is %s)\n",
                std::getenv("UNILLM_PLUGIN_PATH") ? "empty" : "unset");
  std::printf("threads: %d (cores in affinity mask: %d; OpenMP runtime shared with BLAS)\n", num_threads(),
              affinity_cores());
  std::printf("gemm: %s\n", cpu::gemm_info().c_str());
  std::printf("blas: %s\n", cpu::blas_info().c_str());
  std::printf("isa: %s\n", cpu::isa_info().c_str());
  if (kernels) std::printf("kernels:\n%s", kernel_registry().coverage_table().c_str());
  return 0;
}

}  // namespace unillm::cli
