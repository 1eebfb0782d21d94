// UTF-8 repair, NFC (canonical decomposition, reordering, composition; Hangul done algorithmically)
// and the GPT-2 byte-level alphabet.
#include "io/tokenizer_unicode.h"

#include <algorithm>
#include <array>
#include <vector>

namespace unillm::io::unicode {
namespace {

struct NfcDecomp {
  uint32_t cp, offset, len;
};
struct NfcCompose {
  uint64_t key;
  uint32_t composite;
};
struct NfcRange {
  uint32_t lo, hi;
};
#include "io/tokenizer_unicode_nfc.inc"

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr uint32_t kSCount = kLCount * kNCount;

// Allowed range of the second byte of a sequence with lead b (the others are 80..BF).
void second_range(unsigned char b, unsigned char& lo, unsigned char& hi) {
  lo = 0x80, hi = 0xBF;
  if (b == 0xE0) lo = 0xA0;
  if (b == 0xED) hi = 0x9F;
  if (b == 0xF0) lo = 0x90;
  if (b == 0xF4) hi = 0x8F;
}

int ccc_of(uint32_t cp) {
  if (cp < 0x300) return 0;
  const uint32_t* end = kNfcCcc + std::size(kNfcCcc);
  const uint32_t* it = std::lower_bound(kNfcCcc, end, cp << 8);
  return (it != end && (*it >> 8) == cp) ? static_cast<int>(*it & 0xFF) : 0;
}

bool unstable(uint32_t cp) {
  if (cp < 0x300) return false;
  const NfcRange* end = kNfcUnstable + std::size(kNfcUnstable);
  const NfcRange* it = std::upper_bound(kNfcUnstable, end, cp,
                                        [](uint32_t v, const NfcRange& r) { return v < r.lo; });
  return it != kNfcUnstable && cp <= (it - 1)->hi;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const NfcDecomp* end = kNfcDecomp + std::size(kNfcDecomp);
  const NfcDecomp* it = std::lower_bound(kNfcDecomp, end, cp,
                                         [](const NfcDecomp& d, uint32_t v) { return d.cp < v; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), kNfcDecompData + it->offset, kNfcDecompData + it->offset + it->len);
}

// Primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  uint64_t key = (static_cast<uint64_t>(a) << 21) | b;
  const NfcCompose* end = kNfcCompose + std::size(kNfcCompose);
  const NfcCompose* it = std::lower_bound(
      kNfcCompose, end, key, [](const NfcCompose& c, uint64_t v) { return c.key < v; });
  return (it != end && it->key == key) ? it->composite : 0;
}

// Canonical ordering: stable sort of each run of non-starters by combining class.
void reorder(std::vector<uint32_t>& cps, std::vector<int>& cls) {
  for (size_t i = 0; i < cps.size();) {
    if (cls[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && cls[j] != 0) ++j;
    for (size_t a = i + 1; a < j; ++a)  // insertion sort, stable
      for (size_t b = a; b > i && cls[b - 1] > cls[b]; --b) {
        std::swap(cls[b - 1], cls[b]);
        std::swap(cps[b - 1], cps[b]);
      }
    i = j;
  }
}

// Canonical composition (UAX #15 reference algorithm), in place.
void compose_all(std::vector<uint32_t>& cps, const std::vector<int>& cls) {
  if (cps.empty()) return;
  size_t starter = 0, out = 1;
  int last = cls[0] == 0 ? 0 : 256;
  for (size_t i = 1; i < cps.size(); ++i) {
    uint32_t c = cps[i];
    int cc = cls[i];
    uint32_t comp = (last < cc || last == 0) ? compose(cps[starter], c) : 0;
    if (comp) {
      cps[starter] = comp;
      continue;
    }
    if (cc == 0) starter = out;
    last = cc;
    cps[out++] = c;
  }
  cps.resize(out);
}

}  // namespace

int utf8_len(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 1;
}

uint32_t next_cp(std::string_view s, size_t& i) {
  unsigned char b = static_cast<unsigned char>(s[i]);
  int n = utf8_len(b);
  if (n == 1 || i + n > s.size()) {
    ++i;
    return b;
  }
  uint32_t cp = b & (0x7F >> n);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool utf8_valid(std::string_view s) {
  std::string scratch;
  for (size_t i = 0; i < s.size(); ++i)
    if (static_cast<unsigned char>(s[i]) >= 0x80) {
      utf8_repair(s.substr(i), true, scratch);
      return scratch == s.substr(i);
    }
  return true;
}

size_t utf8_repair(std::string_view s, bool final, std::string& out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      size_t j = i;
      while (j < n && static_cast<unsigned char>(s[j]) < 0x80) ++j;
      out.append(s.data() + i, j - i);
      i = j;
      continue;
    }
    int len = utf8_len(b);
    if (len == 1) {  // stray continuation byte or invalid lead
      out.append(kReplacement);
      ++i;
      continue;
    }
    unsigned char lo, hi;
    second_range(b, lo, hi);
    int k = 1;
    for (; k < len && i + k < n; ++k) {
      unsigned char c = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
    }
    if (k == len) {
      out.append(s.data() + i, len);
    } else if (i + k == n && !final) {
      return i;  // incomplete at the end: hold back
    } else {
      out.append(kReplacement);
    }
    i += k;
  }
  return n;
}

std::string nfc(std::string_view s) {
  size_t i = 0;
  bool needs = false;
  while (i < s.size() && !needs) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    needs = unstable(next_cp(s, i));
  }
  if (!needs) return std::string(s);
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  for (i = 0; i < s.size();) decompose(next_cp(s, i), cps);
  std::vector<int> cls(cps.size());
  for (size_t k = 0; k < cps.size(); ++k) cls[k] = ccc_of(cps[k]);
  reorder(cps, cls);
  compose_all(cps, cls);
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : cps) append_utf8(out, cp);
  return out;
}

namespace {
struct ByteLevelTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 512> to_byte{};
  ByteLevelTables() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteLevelTables& tables() {
  static const ByteLevelTables t;  // immutable after construction (thread-safe static init)
  return t;
}
}  // namespace

uint32_t byte_to_cp(unsigned char b) { return tables().to_cp[b]; }

int cp_to_byte(uint32_t cp) { return cp < 512 ? tables().to_byte[cp] : -1; }

std::string byte_level_to_bytes(std::string_view token) {
  std::string out;
  for (size_t i = 0; i < token.size();) {
    size_t start = i;
    uint32_t cp = next_cp(token, i);
    int b = cp_to_byte(cp);
    if (b >= 0)
      out.push_back(static_cast<char>(b));
    else
      out.append(token.substr(start, i - start));
  }
  return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) append_utf8(out, byte_to_cp(b));
  return out;
}

}  // namespace unillm::io::unicode
