// The plugin ABI end to end with the reference plugin: loading and refusal of bad plugins,
// copies between host and device, stream-ordered frees, and the guard that makes a host access
// to device memory fault.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/register.h"
#include "backends/plugin/plugin_loader.h"
#include "core/device.h"
#include "core/tensor.h"
#include "support/expect.h"

namespace unillm {
namespace {

const std::string kPlugins = std::string(UNILLM_BINARY_DIR) + "/plugins";
const std::string kBad = std::string(UNILLM_BINARY_DIR) + "/test_plugins";

// The reference plugin, then the bad ones (kind 3 reuses the name "ref"), loaded once.
const plugin::LoadReport& loaded() {
  static const plugin::LoadReport report = [] {
    testing::init_cpu();
    plugin::LoadReport r = plugin::load_plugins(kPlugins);
    plugin::LoadReport bad = plugin::load_plugins(kBad + ":" + std::string(UNILLM_SOURCE_DIR) + "/README.md");
    r.failures = bad.failures;
    r.loaded.insert(r.loaded.end(), bad.loaded.begin(), bad.loaded.end());
    return r;
  }();
  return report;
}

Device ref(int i = 0) {
  loaded();
  return parse_device("ref:" + std::to_string(i));
}

std::string failure_of(const std::string& file) {
  for (const auto& f : loaded().failures)
    if (f.find(file) != std::string::npos) return f;
  return "";
}

TEST(Plugin, TheReferencePluginLoadsAndTheBadOnesAreRefused) {
  ASSERT_EQ(loaded().loaded.size(), 1u) << (loaded().loaded.empty() ? "" : loaded().loaded.back());
  EXPECT_NE(loaded().loaded[0].find("ref ("), std::string::npos) << loaded().loaded[0];
  EXPECT_NE(failure_of("libunillm_bad_plugin_1.so").find("built for plugin ABI 2.0; this unillm takes 1.x"), std::string::npos)
      << failure_of("libunillm_bad_plugin_1.so");
  EXPECT_NE(failure_of("libunillm_bad_plugin_2.so").find("initialisation failed (status 1): no accelerator found"), std::string::npos)
      << failure_of("libunillm_bad_plugin_2.so");
  EXPECT_NE(failure_of("libunillm_bad_plugin_3.so").find("'ref' is already registered"), std::string::npos)
      << failure_of("libunillm_bad_plugin_3.so");
  EXPECT_NE(failure_of("libunillm_bad_plugin_4.so").find("no symbol unillm_plugin_init"), std::string::npos)
      << failure_of("libunillm_bad_plugin_4.so");
  EXPECT_NE(failure_of("README.md").find("cannot load it"), std::string::npos) << failure_of("README.md");
  EXPECT_EQ(loaded().failures.size(), 5u);
}

TEST(Plugin, DeviceNamesAndIndices) {
  EXPECT_EQ(device_name(ref(1)), "ref:1");
  EXPECT_EQ(parse_device("ref").index, 0);
  EXPECT_THROW(parse_device("ref:2"), ConfigError);
  EXPECT_THROW(parse_device("ref:-1"), ConfigError);
  EXPECT_THROW(parse_device("npu"), ConfigError);
  const DeviceProperties p = backend_for(ref()).properties(0);
  EXPECT_EQ(p.total_memory, uint64_t{8} << 30);
  EXPECT_EQ(p.dtypes.size(), 6u);
}

TEST(Plugin, CopiesRoundTripThroughDeviceMemory) {
  loaded();  // registers the CPU backend too (each test may run alone under ctest)
  std::vector<float> v(100000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f - 7;
  Tensor host = Tensor::from_vector(v, {100, 1000});
  Tensor dev = host.to(ref());
  EXPECT_EQ(dev.device(), ref());
  Tensor dev2 = Tensor::empty({100, 1000}, DType::f32, ref());
  dev2.copy_from(dev);  // device to device
  EXPECT_EQ(dev2.to(Device{}).to_float_vector(), v);
  Tensor other = dev.to(ref(1));  // between two devices of the kind
  EXPECT_EQ(other.to(Device{}).to_float_vector(), v);
  Backend& be = backend_for(ref());
  be.memset(dev2.raw_data(), 0, 400, 0);
  const std::vector<float> z = dev2.to(Device{}).to_float_vector();
  EXPECT_EQ(z[0], 0.0f);
  EXPECT_EQ(z[99], 0.0f);
  EXPECT_EQ(z[100], v[100]);
}

TEST(Plugin, FreeIsStreamOrdered) {
  const Device d = ref();
  Backend& be = backend_for(d);
  Allocator& a = be.allocator(0);
  const size_t big = size_t{512} << 20;
  const size_t before = a.bytes_in_use();
  void* slow = a.allocate(big);
  void* p = a.allocate(4096);
  be.memset(slow, 1, big, 0);  // keeps the stream busy for a while
  a.deallocate(p, 4096);       // queued behind the memset
  void* q = a.allocate(4096);  // must not be p: a queued kernel could still read p
  EXPECT_NE(q, p);
  be.synchronize(0);
  a.deallocate(q, 4096);
  a.deallocate(slow, big);
  be.synchronize(0);
  EXPECT_EQ(a.bytes_in_use(), before);
}

TEST(Plugin, OutOfDeviceMemoryIsAnError) {
  Allocator& a = backend_for(ref()).allocator(0);
  EXPECT_THROW(a.allocate(size_t{16} << 30), OutOfMemory);
}

TEST(PluginDeathTest, TheHostCannotTouchDeviceMemory) {
  // The plugin's streams are threads: the death test re-runs the binary instead of forking.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Device d = ref();
  Tensor dev = Tensor::from_vector({1, 2, 3}, {3}).to(d);
  // Reading device memory from the host is what the device path must never do: it faults.
  EXPECT_EXIT(
      {
        volatile float x = *static_cast<const float*>(dev.raw_data());
        (void)x;
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

}  // namespace
}  // namespace unillm
