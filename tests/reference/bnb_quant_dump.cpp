// The unillm half of bnb_quant_check.py (run by it, not by ctest directly):
//   bnb_quant_dump IN N K TYPE DOUBLE OUT
// IN: N·K raw little-endian f32 (row-major [N, K]); TYPE nf4 | fp4 | int8; DOUBLE 0 | 1.
// OUT receives, as raw little-endian blocks one after another: the code bytes (nf4/fp4: bnb's
// packed bytes; int8: the i8 codes), the f32 scales (block absmax; with double quantisation the
// per-256 scales of the centred absmaxes; int8: max|w_row| / 127), the double-quantised u8 codes
// (when DOUBLE), the f32 offset (when DOUBLE), the decoded f32 block absmaxes (nf4/fp4), and the
// f32 dequantised weight [N, K]. The tables (nf4, fp4, dynamic map) follow at the end.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ops/quant.h"
#include "ops/quant_4bit.h"
#include "support/expect.h"

namespace {

void put(std::ofstream& o, const void* p, size_t bytes) {
  o.write(static_cast<const char*>(p), static_cast<std::streamsize>(bytes));
}
void put(std::ofstream& o, const unillm::Tensor& t) { put(o, t.contiguous().raw_data(), t.nbytes()); }

}  // namespace

int main(int argc, char** argv) {
  using namespace unillm;
  if (argc != 7) {
    std::fprintf(stderr, "usage: bnb_quant_dump IN N K nf4|fp4|int8 0|1 OUT\n");
    return 2;
  }
  try {
    unillm::testing::init_cpu();
    const int64_t n = std::stoll(argv[2]), k = std::stoll(argv[3]);
    const std::string type = argv[4];
    const bool dq = std::string(argv[5]) == "1";
    std::vector<float> w(static_cast<size_t>(n * k));
    std::ifstream in(argv[1], std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(w.data()), static_cast<std::streamsize>(w.size() * 4))) {
      std::fprintf(stderr, "bnb_quant_dump: %s is shorter than %lld floats\n", argv[1], static_cast<long long>(n * k));
      return 1;
    }
    const Tensor t = Tensor::from_vector(w, {n, k});
    ops::QuantizedWeight q;
    if (type == "int8") {
      q = ops::quantize_weight(t, ops::QuantType::int8, 0, true);
    } else {
      q = ops::quantize_4bit(t, type == "fp4" ? ops::QuantType::fp4 : ops::QuantType::nf4, {ops::kBnbBlocksize, dq});
    }
    std::ofstream out(argv[6], std::ios::binary);
    put(out, q.data);
    put(out, q.scales);
    if (q.absmax_codes.defined()) {
      put(out, q.absmax_codes);
      put(out, &q.absmax_offset, 4);
    }
    if (type != "int8") put(out, ops::block_absmax(q));
    put(out, ops::dequantize_weight(q));
    put(out, ops::levels_4bit(ops::QuantType::nf4).data(), 64);
    put(out, ops::levels_4bit(ops::QuantType::fp4).data(), 64);
    put(out, ops::dynamic_map().data(), 1024);
    if (!out) {
      std::fprintf(stderr, "bnb_quant_dump: cannot write %s\n", argv[6]);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bnb_quant_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
