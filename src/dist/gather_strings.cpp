#include "dist/gather_strings.h"

#include <cstring>

namespace unillm::dist {

std::vector<std::string> allgather_strings(ProcessGroup& g, const std::string& mine) {
  const int p = g.size();
  // The lengths first, then every string padded to the longest.
  Tensor len = Tensor::empty({1}, DType::i64);
  len.data<int64_t>()[0] = static_cast<int64_t>(mine.size());
  Tensor lens = Tensor::empty({p}, DType::i64);
  g.allgather(len, lens);
  int64_t longest = 1;
  for (int r = 0; r < p; ++r) longest = std::max(longest, lens.data<int64_t>()[r]);
  Tensor buf = Tensor::zeros({longest}, DType::i8);
  std::memcpy(buf.raw_data(), mine.data(), mine.size());
  Tensor all = Tensor::empty({longest * p}, DType::i8);
  g.allgather(buf, all);
  std::vector<std::string> out;
  const char* base = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < p; ++r) out.emplace_back(base + r * longest, static_cast<size_t>(lens.data<int64_t>()[r]));
  return out;
}

}  // namespace unillm::dist
