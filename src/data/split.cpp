// numpy-compatible permutation (SeedSequence + PCG64) and HF train_test_split sizes.
#include "data/split.h"

#include <array>
#include <cmath>

#include "data/error.h"

namespace unillm::data {

namespace {

// numpy.random.SeedSequence(seed).generate_state(4, np.uint64).
std::array<uint64_t, 4> seed_sequence_state(uint64_t seed) {
  constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd,
                     kMultB = 0x58f38ded, kMixL = 0xca01f9dd, kMixR = 0x4973f715;
  std::vector<uint32_t> entropy;
  do {
    entropy.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed != 0);
  uint32_t hash_a = kInitA;
  auto hashmix = [&](uint32_t v) {
    v ^= hash_a;
    hash_a *= kMultA;
    v *= hash_a;
    v ^= v >> 16;
    return v;
  };
  auto mix = [](uint32_t x, uint32_t y) {
    uint32_t r = kMixL * x - kMixR * y;
    return r ^ (r >> 16);
  };
  std::array<uint32_t, 4> pool{};
  for (size_t i = 0; i < 4; ++i) pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0);
  for (size_t src = 0; src < 4; ++src)
    for (size_t dst = 0; dst < 4; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
  for (size_t src = 4; src < entropy.size(); ++src)
    for (size_t dst = 0; dst < 4; ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src]));
  uint32_t hash_b = kInitB;
  std::array<uint32_t, 8> words{};
  for (size_t i = 0; i < 8; ++i) {
    uint32_t v = pool[i % 4] ^ hash_b;
    hash_b *= kMultB;
    v *= hash_b;
    words[i] = v ^ (v >> 16);
  }
  std::array<uint64_t, 4> out{};
  for (size_t k = 0; k < 4; ++k)
    out[k] = words[2 * k] | (static_cast<uint64_t>(words[2 * k + 1]) << 32);
  return out;
}

// numpy's PCG64 (XSL-RR 128/64) with its buffered 32-bit draws.
class Pcg64 {
 public:
  explicit Pcg64(uint64_t seed) {
    auto s = seed_sequence_state(seed);
    u128 initstate = (static_cast<u128>(s[0]) << 64) | s[1];
    u128 initseq = (static_cast<u128>(s[2]) << 64) | s[3];
    inc_ = (initseq << 1) | 1;
    state_ = 0;
    step();
    state_ += initstate;
    step();
  }
  uint64_t next64() {
    step();
    uint64_t hi = static_cast<uint64_t>(state_ >> 64), lo = static_cast<uint64_t>(state_);
    unsigned rot = static_cast<unsigned>(hi >> 58);
    uint64_t x = hi ^ lo;
    return (x >> rot) | (x << ((64 - rot) & 63));
  }
  uint32_t next32() {
    if (has_u32_) {
      has_u32_ = false;
      return u32_;
    }
    uint64_t v = next64();
    has_u32_ = true;
    u32_ = static_cast<uint32_t>(v >> 32);
    return static_cast<uint32_t>(v);
  }
  // numpy's random_interval: uniform in [0, max] by masked rejection.
  uint64_t interval(uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    for (int sh = 1; sh <= 32; sh *= 2) mask |= mask >> sh;
    uint64_t v;
    if (max <= 0xffffffffULL) {
      while ((v = (next32() & mask)) > max) {
      }
    } else {
      while ((v = (next64() & mask)) > max) {
      }
    }
    return v;
  }

 private:
  using u128 = unsigned __int128;
  void step() {
    const u128 kMult = (static_cast<u128>(0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL;
    state_ = state_ * kMult + inc_;
  }
  u128 state_ = 0, inc_ = 0;
  bool has_u32_ = false;
  uint32_t u32_ = 0;
};

}  // namespace

std::vector<int64_t> numpy_permutation(uint64_t seed, int64_t n) {
  std::vector<int64_t> a(n);
  for (int64_t i = 0; i < n; ++i) a[i] = i;
  Pcg64 rng(seed);
  for (int64_t i = n - 1; i >= 1; --i) {
    int64_t j = static_cast<int64_t>(rng.interval(static_cast<uint64_t>(i)));
    std::swap(a[i], a[j]);
  }
  return a;
}

SplitSizes split_sizes(double val_size, int64_t n) {
  SplitSizes s;
  if (val_size < 1.0) {
    if (val_size <= 0.0) UNILLM_THROW(DataError, "[data] val_size must be > 0, got ", val_size);
    s.test = static_cast<int64_t>(std::ceil(val_size * static_cast<double>(n)));
  } else {
    s.test = static_cast<int64_t>(val_size);  // LLaMA-Factory: int(val_size)
    if (s.test >= n)
      UNILLM_THROW(DataError, "[data] val_size ", s.test, " must be smaller than the number of ",
                   "rows (", n, ") to split");
  }
  s.train = n - s.test;
  if (s.train <= 0 || s.test <= 0)
    UNILLM_THROW(DataError, "[data] val_size ", val_size, " on ", n,
                 " rows leaves the train or the validation split empty");
  return s;
}

}  // namespace unillm::data
