// Fuzz target for the tokenized-rows reader (src/data/tokenized_store.cpp, a tokenized_path dir's
// train.rows / eval.rows): any bytes either throw unillm::Error or decode into rows whose per-row
// arrays match their lengths, whose groups are whole and whose tags are one per example, and which
// encode back to exactly the same bytes (the format has one encoding); the same for the bytes with
// their checksum recomputed. See docs/fuzzing.md.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "data/tokenized_store.h"

namespace {

void check(const unillm::data::TokenizedDataset& d, const uint8_t* data, size_t size) {
  const auto rows = static_cast<size_t>(d.num_rows());
  if (d.num_rows() % d.group != 0) std::abort();
  for (const auto* v : {&d.labels, &d.position_ids, &d.segment_ids}) {
    if (v->empty()) continue;
    if (v->size() != rows) std::abort();
    for (size_t r = 0; r < rows; ++r)
      if ((*v)[r].size() != d.rows[r].size()) std::abort();
  }
  if (!d.tags.empty() && d.tags.size() != static_cast<size_t>(d.num_examples())) std::abort();
  if (unillm::data::encode_rows(d) != std::string(reinterpret_cast<const char*>(data), size))
    std::abort();
}

// The bytes with their last 8 replaced by the FNV-1a of the rest, so mutations reach the parser
// behind the checksum instead of stopping at it.
std::string resealed(const uint8_t* data, size_t size) {
  std::string b(reinterpret_cast<const char*>(data), size);
  if (size < 8) return b;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i + 8 < size; ++i) h = (h ^ data[i]) * 0x100000001b3ULL;
  for (int k = 0; k < 8; ++k) b[size - 8 + k] = static_cast<char>(h >> (8 * k));
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    check(unillm::data::decode_rows(data, size, "<fuzz>"), data, size);
  } catch (const unillm::Error&) {
  }
  const std::string sealed = resealed(data, size);
  const auto* p = reinterpret_cast<const uint8_t*>(sealed.data());
  try {
    check(unillm::data::decode_rows(p, sealed.size(), "<fuzz>"), p, sealed.size());
  } catch (const unillm::Error&) {
  }
  return 0;
}
