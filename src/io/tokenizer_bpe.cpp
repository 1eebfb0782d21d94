// The BPE merge loop shared by every tokenizer: symbols in a linked list, candidate pairs in a
// binary heap (best priority first, leftmost on ties), stale candidates skipped on pop. O(n log n)
// per piece, so a 1 MB piece with no pre-token splits (SentencePiece) stays fast.
#include <algorithm>

#include "io/tokenizer_internal.h"
#include "io/tokenizer_unicode.h"

namespace unillm::io::tok {
namespace {

struct Sym {
  uint32_t start, len;  // bytes of the piece; len 0 = merged away
  int32_t id;           // -1: not in the vocab (char modes)
  int32_t prev, next;
};

// 16 bytes, so the heap of a 1 MB piece stays cache-friendly. Priorities are ranks (< 2^24, exact
// in a float) or SentencePiece scores (floats in the model file).
struct Cand {
  float prio;  // lower merges first
  int32_t left;
  uint16_t left_len, right_len;  // the pair is still valid if both lengths are unchanged
  int32_t merged;
};

struct CandWorse {
  bool operator()(const Cand& a, const Cand& b) const {
    return a.prio > b.prio || (a.prio == b.prio && a.left > b.left);
  }
};

// Finds the merge of (l, r) under the model's rule; false when the pair does not merge.
bool find_pair(const BpeModel& m, std::string_view piece, const Sym& l, const Sym& r, Cand& c) {
  switch (m.mode) {
    case BpeModel::Mode::kByteMerges:
    case BpeModel::Mode::kCharMerges: {
      if (l.id < 0 || r.id < 0) return false;
      auto it = m.merges.find((static_cast<uint64_t>(l.id) << 32) | static_cast<uint32_t>(r.id));
      if (it == m.merges.end()) return false;
      c.prio = static_cast<float>(it->second.rank);
      c.merged = it->second.id;
      return true;
    }
    case BpeModel::Mode::kByteRanks:
    case BpeModel::Mode::kCharScores: {
      auto it = m.vocab.find(piece.substr(l.start, l.len + r.len));
      if (it == m.vocab.end()) return false;
      int32_t id = it->second;
      if (m.mode == BpeModel::Mode::kByteRanks) {
        c.prio = static_cast<float>(id);
      } else {
        if (!m.mergeable[id]) return false;
        c.prio = -m.scores[id];
      }
      c.merged = id;
      return true;
    }
  }
  return false;
}

// Buffers reused across the parts of one encode() call.
struct Scratch {
  std::vector<Sym> syms;
  std::vector<Cand> heap;
};

void merge_all(const BpeModel& m, std::string_view piece, std::vector<Sym>& syms,
               std::vector<Cand>& heap) {
  heap.clear();
  auto candidate = [&](int32_t l, Cand& c) {
    int32_t r = syms[l].next;
    if (r < 0 || syms[l].len + syms[r].len > 0xFFFF) return false;
    if (!find_pair(m, piece, syms[l], syms[r], c)) return false;
    c.left = l;
    c.left_len = static_cast<uint16_t>(syms[l].len);
    c.right_len = static_cast<uint16_t>(syms[r].len);
    return true;
  };
  auto push = [&](int32_t l) {
    Cand c;
    if (!candidate(l, c)) return;
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), CandWorse());
  };
  Cand c0;
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i)
    if (candidate(i, c0)) heap.push_back(c0);
  std::make_heap(heap.begin(), heap.end(), CandWorse());  // O(n) start
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), CandWorse());
    Cand c = heap.back();
    heap.pop_back();
    Sym& l = syms[c.left];
    if (l.len != c.left_len || l.next < 0) continue;
    Sym& r = syms[l.next];
    if (r.len != c.right_len) continue;
    l.len += r.len;
    l.id = c.merged;
    r.len = 0;
    l.next = r.next;
    if (l.next >= 0) syms[l.next].prev = c.left;
    if (l.prev >= 0) push(l.prev);
    push(c.left);
  }
}

// Initial symbols: single bytes (byte modes) or UTF-8 characters (char modes).
void initial_symbols(const BpeModel& m, std::string_view piece, std::vector<Sym>& syms) {
  syms.clear();
  bool bytes = m.mode == BpeModel::Mode::kByteMerges || m.mode == BpeModel::Mode::kByteRanks;
  syms.reserve(bytes ? piece.size() : piece.size() / 2 + 1);
  for (size_t i = 0; i < piece.size();) {
    size_t n = bytes ? 1 : std::min<size_t>(unicode::utf8_len(piece[i]), piece.size() - i);
    int32_t id;
    if (bytes) {
      id = m.byte_ids[static_cast<unsigned char>(piece[i])];
    } else {
      auto it = m.vocab.find(piece.substr(i, n));
      id = it == m.vocab.end() ? -1 : it->second;
    }
    int32_t k = static_cast<int32_t>(syms.size());
    syms.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(n), id, k - 1, -1});
    if (k > 0) syms[k - 1].next = k;
    i += n;
  }
}

void encode_part(const BpeModel& m, std::string_view piece, std::vector<int32_t>& out,
                 Scratch& sc) {
  if (piece.empty()) return;
  if (m.ignore_merges) {
    auto it = m.vocab.find(piece);
    if (it != m.vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  initial_symbols(m, piece, sc.syms);
  merge_all(m, piece, sc.syms, sc.heap);
  const std::vector<Sym>& syms = sc.syms;
  bool last_unk = false;
  for (int32_t i = 0; i >= 0 && i < static_cast<int32_t>(syms.size()); i = syms[i].next) {
    const Sym& s = syms[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      last_unk = false;
      continue;
    }
    bool have_bytes = m.byte_fallback;
    for (uint32_t k = 0; have_bytes && k < s.len; ++k)
      have_bytes = m.byte_ids[static_cast<unsigned char>(piece[s.start + k])] >= 0;
    if (have_bytes) {
      for (uint32_t k = 0; k < s.len; ++k)
        out.push_back(m.byte_ids[static_cast<unsigned char>(piece[s.start + k])]);
      last_unk = false;
    } else if (m.unk_id >= 0 && !(m.fuse_unk && last_unk)) {
      out.push_back(m.unk_id);
      last_unk = true;
    }
  }
}

}  // namespace

void BpeModel::enable_marker_split(const std::string& marker) {
  split_marker.clear();
  if (marker.empty()) return;
  for (const auto& [token, id] : vocab) {
    size_t k = token.find(marker, 1);
    for (; k != std::string::npos; k = token.find(marker, k + marker.size()))
      if (k < marker.size() || token.compare(k - marker.size(), marker.size(), marker) != 0) return;
  }
  split_marker = marker;
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  Scratch sc;
  if (split_marker.empty()) return encode_part(*this, piece, out, sc);
  const std::string& m = split_marker;
  size_t start = 0;
  for (size_t k = piece.find(m, 1); k != std::string_view::npos; k = piece.find(m, k + m.size())) {
    if (k >= m.size() && piece.compare(k - m.size(), m.size(), m) == 0) continue;  // inside a run
    encode_part(*this, piece.substr(start, k - start), out, sc);
    start = k;
  }
  encode_part(*this, piece.substr(start), out, sc);
}

}  // namespace unillm::io::tok
