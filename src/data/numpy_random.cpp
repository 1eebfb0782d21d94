// NumpyGenerator: numpy's SeedSequence → PCG64 seeding and its 64-bit output, written from
// numpy's algorithm descriptions (bit_generator.pyx's hash mixing, pcg64.h's XSL-RR generator).
#include "data/numpy_random.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace unillm::data {

namespace {

// SeedSequence's constants (32-bit words, a pool of 4).
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kXShift = 16, kPool = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  return value ^ (value >> kXShift);
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  return r ^ (r >> kXShift);
}

// SeedSequence(seed).generate_state(4, np.uint64): the entropy is the seed's 32-bit words, least
// significant first ([0] for 0).
std::vector<uint64_t> seed_sequence_state(uint64_t seed) {
  std::vector<uint32_t> entropy = {static_cast<uint32_t>(seed)};
  if (seed >> 32) entropy.push_back(static_cast<uint32_t>(seed >> 32));
  uint32_t pool[kPool];
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPool; ++i)
    pool[i] = hashmix(i < static_cast<int>(entropy.size()) ? entropy[static_cast<size_t>(i)] : 0u, hash_const);
  for (int src = 0; src < kPool; ++src)
    for (int dst = 0; dst < kPool; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
  // (entropy longer than the pool would be mixed in here; a 64-bit seed has at most 2 words)
  uint32_t words[8];
  uint32_t hb = kInitB;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = pool[i % kPool];
    v ^= hb;
    hb *= kMultB;
    v *= hb;
    words[i] = v ^ (v >> kXShift);
  }
  std::vector<uint64_t> out(4);
  for (int i = 0; i < 4; ++i) out[static_cast<size_t>(i)] = words[2 * i] | (uint64_t{words[2 * i + 1]} << 32);
  return out;
}

constexpr unsigned __int128 kMultiplier =
    (static_cast<unsigned __int128>(0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL;

}  // namespace

NumpyGenerator::NumpyGenerator(uint64_t seed) {
  const std::vector<uint64_t> s = seed_sequence_state(seed);
  const unsigned __int128 initstate = (static_cast<unsigned __int128>(s[0]) << 64) | s[1];
  const unsigned __int128 initseq = (static_cast<unsigned __int128>(s[2]) << 64) | s[3];
  state_ = 0;
  inc_ = (initseq << 1) | 1;
  step();
  state_ += initstate;
  step();
}

void NumpyGenerator::step() { state_ = state_ * kMultiplier + inc_; }

uint64_t NumpyGenerator::next_uint64() {
  step();
  const auto hi = static_cast<uint64_t>(state_ >> 64), lo = static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  const uint64_t x = hi ^ lo;
  return (x >> rot) | (x << ((64 - rot) & 63));
}

double NumpyGenerator::random() { return static_cast<double>(next_uint64() >> 11) * (1.0 / 9007199254740992.0); }

NumpyChoice::NumpyChoice(NumpyGenerator& rng, const std::vector<double>& p, const char* what) : rng_(rng) {
  if (p.empty()) UNILLM_THROW(ConfigError, "[data] ", what, " is empty");
  // numpy's check: a Kahan sum within sqrt(eps) of 1, no negative or NaN entry.
  double sum = 0, c = 0;
  for (double v : p) {
    if (std::isnan(v)) UNILLM_THROW(ConfigError, "[data] ", what, " contains NaN");
    if (v < 0) UNILLM_THROW(ConfigError, "[data] ", what, " has a negative probability (", v, ")");
    const double y = v - c, t = sum + y;
    c = (t - sum) - y;
    sum = t;
  }
  if (std::abs(sum - 1.0) > std::sqrt(std::numeric_limits<double>::epsilon()))
    UNILLM_THROW(ConfigError, "[data] ", what, " must sum to 1 (they sum to ", sum, ")");
  double run = 0;
  for (double v : p) cdf_.push_back(run += v);
  const double last = cdf_.back();
  for (double& v : cdf_) v /= last;
}

int64_t NumpyChoice::next() {
  const double u = rng_.random();
  size_t i = 0;  // searchsorted(cdf, u, side='right'): the first entry above u
  while (i < cdf_.size() && cdf_[i] <= u) ++i;
  return static_cast<int64_t>(i);
}

}  // namespace unillm::data
