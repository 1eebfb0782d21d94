// Tensor comparison helpers for tests.
#include "support/expect.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "backends/cpu/register.h"

namespace unillm::testing {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(shape_str(a.shape()), shape_str(b.shape()));
  double m = 0;
  int64_t n = std::min(a.numel(), b.numel());
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a.item_flat(i) - b.item_flat(i)));
  return m;
}

void expect_close(const Tensor& a, const Tensor& b, double atol, double rtol) {
  ASSERT_EQ(shape_str(a.shape()), shape_str(b.shape()));
  std::vector<float> av = a.to_float_vector(), bv = b.to_float_vector();
  int bad = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    double tol = atol + rtol * std::fabs(bv[i]);
    if (!(std::fabs(av[i] - bv[i]) <= tol)) {
      if (++bad <= 5) ADD_FAILURE() << "element " << i << ": " << av[i] << " vs " << bv[i] << " (tol " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << "elements out of tolerance";
}

std::string source_path(const std::string& rel) { return std::string(UNILLM_SOURCE_DIR) + "/" + rel; }

void init_cpu() {
  // CI runs the op tests under each CPU level: UNILLM_ISA caps it, as the CLI's --isa does.
  cpu::IsaLevel cap = cpu::IsaLevel::avx512_bf16;
  const char* env = std::getenv("UNILLM_ISA");
  if (env && *env && !cpu::parse_isa(env, &cap)) ADD_FAILURE() << "UNILLM_ISA=" << env << " is not a level";
  cpu::register_cpu_backend(cap);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

}  // namespace unillm::testing
