// SentencePiece .model files (ModelProto) read with a minimal protobuf reader: pieces, scores and
// types, trainer_spec (model_type, byte_fallback, unk/bos/eos ids) and normalizer_spec (dummy
// prefix, extra-whitespace removal, whitespace escaping). BPE models only (Llama 2).
#include <cstring>

#include "io/tokenizer_internal.h"

namespace unillm::io::tok {
namespace {

// Protobuf wire-format reader over one message; throws IoError naming the file when truncated.
class ProtoReader {
 public:
  ProtoReader(std::string_view buf, const std::string& src)
      : p_(buf.data()), end_(p_ + buf.size()), src_(src) {}
  bool done() const { return p_ >= end_; }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) fail(src_, "truncated protobuf (varint)");
      auto b = static_cast<unsigned char>(*p_++);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail(src_, "malformed protobuf varint");
  }
  void key(uint32_t& field, uint32_t& wire) {
    uint64_t k = varint();
    field = static_cast<uint32_t>(k >> 3);
    wire = static_cast<uint32_t>(k & 7);
  }
  std::string_view bytes() {
    uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_))
      fail(src_, "truncated protobuf (length-delimited field)");
    std::string_view v(p_, n);
    p_ += n;
    return v;
  }
  float fixed32_float() {
    if (end_ - p_ < 4) fail(src_, "truncated protobuf (fixed32)");
    float f;
    std::memcpy(&f, p_, 4);  // little-endian hosts only (x86-64, aarch64)
    p_ += 4;
    return f;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0:
        varint();
        return;
      case 1:
        advance(8);
        return;
      case 2:
        bytes();
        return;
      case 5:
        advance(4);
        return;
      default:
        fail(src_, "unsupported protobuf wire type " + std::to_string(wire));
    }
  }

 private:
  void advance(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) fail(src_, "truncated protobuf");
    p_ += n;
  }
  const char* p_;
  const char* end_;
  const std::string& src_;
};

enum PieceType {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

struct Piece {
  std::string text;
  float score = 0;
  int type = kNormal;
};

struct SpModel {
  std::vector<Piece> pieces;
  int model_type = 1;  // UNIGRAM by default in the proto
  bool byte_fallback = false;
  int32_t unk_id = 0, bos_id = 1, eos_id = 2;
  std::string normalizer_name;
  size_t charsmap_size = 0;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

Piece read_piece(std::string_view msg, const std::string& src) {
  ProtoReader r(msg, src);
  Piece p;
  while (!r.done()) {
    uint32_t f, w;
    r.key(f, w);
    if (f == 1 && w == 2)
      p.text = std::string(r.bytes());
    else if (f == 2 && w == 5)
      p.score = r.fixed32_float();
    else if (f == 3 && w == 0)
      p.type = static_cast<int>(r.varint());
    else
      r.skip(w);
  }
  if (p.type < kNormal || p.type > kByte)
    fail(src, "piece '" + p.text + "' has unknown type " + std::to_string(p.type));
  return p;
}

void read_trainer_spec(std::string_view msg, const std::string& src, SpModel& m) {
  ProtoReader r(msg, src);
  while (!r.done()) {
    uint32_t f, w;
    r.key(f, w);
    if (w != 0) {
      r.skip(w);
      continue;
    }
    auto v = r.varint();
    if (f == 3) m.model_type = static_cast<int>(v);
    if (f == 35) m.byte_fallback = v != 0;
    if (f == 40) m.unk_id = static_cast<int32_t>(v);
    if (f == 41) m.bos_id = static_cast<int32_t>(v);
    if (f == 42) m.eos_id = static_cast<int32_t>(v);
  }
}

void read_normalizer_spec(std::string_view msg, const std::string& src, SpModel& m) {
  ProtoReader r(msg, src);
  while (!r.done()) {
    uint32_t f, w;
    r.key(f, w);
    if (f == 1 && w == 2)
      m.normalizer_name = std::string(r.bytes());
    else if (f == 2 && w == 2)
      m.charsmap_size = r.bytes().size();
    else if (f == 3 && w == 0)
      m.add_dummy_prefix = r.varint() != 0;
    else if (f == 4 && w == 0)
      m.remove_extra_whitespaces = r.varint() != 0;
    else if (f == 5 && w == 0)
      m.escape_whitespaces = r.varint() != 0;
    else
      r.skip(w);
  }
}

SpModel read_model(const std::string& buf, const std::string& src) {
  SpModel m;
  ProtoReader r(buf, src);
  while (!r.done()) {
    uint32_t f, w;
    r.key(f, w);
    if (f == 1 && w == 2)
      m.pieces.push_back(read_piece(r.bytes(), src));
    else if (f == 2 && w == 2)
      read_trainer_spec(r.bytes(), src, m);
    else if (f == 3 && w == 2)
      read_normalizer_spec(r.bytes(), src, m);
    else
      r.skip(w);
  }
  if (m.pieces.empty()) fail(src, "no pieces (not a SentencePiece model?)");
  if (m.model_type != 2)
    fail(src, "SentencePiece model_type " + std::to_string(m.model_type) +
                  " is not supported (only BPE = 2)");
  if (m.charsmap_size > 0 && m.normalizer_name != "identity")
    fail(src, "normalizer '" + m.normalizer_name + "' (precompiled charsmap) is not supported");
  return m;
}

int byte_of_piece(const std::string& text) {  // "<0x41>" -> 0x41, else -1
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  return static_cast<int>(std::strtol(text.substr(3, 2).c_str(), nullptr, 16));
}

}  // namespace

std::unique_ptr<TokenizerData> load_sentencepiece_model(const std::string& path) {
  SpModel m = read_model(read_file(path), path);
  auto d = std::make_unique<TokenizerData>();
  d->source = path;
  BpeModel& bpe = d->pipeline.model;
  bpe.mode = BpeModel::Mode::kCharScores;
  bpe.byte_fallback = m.byte_fallback;
  int32_t n = static_cast<int32_t>(m.pieces.size());
  bpe.scores.resize(n);
  bpe.mergeable.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    const Piece& p = m.pieces[id];
    std::string piece = p.text;
    for (size_t k; (k = piece.find("\xE2\x96\x81")) != std::string::npos;) piece.replace(k, 3, " ");
    int byte = p.type == kByte ? byte_of_piece(p.text) : -1;
    if (p.type == kByte && byte < 0) fail(path, "BYTE piece '" + p.text + "' is not <0xXX>");
    if (byte >= 0) piece = std::string(1, static_cast<char>(byte)), bpe.byte_ids[byte] = id;
    if (p.type == kControl || p.type == kUnknown) piece = p.text;
    d->set_token(id, p.text, piece);
    bpe.vocab.emplace(p.text, id);
    bpe.scores[id] = p.score;
    bpe.mergeable[id] = p.type == kNormal || p.type == kUserDefined || p.type == kUnused;
    if (p.type == kUnknown) bpe.unk_id = id;
    if (p.type == kControl || p.type == kUnknown || p.type == kUserDefined)
      d->add_token({p.text, id, p.type != kUserDefined, false, false});
  }
  if (m.unk_id >= 0 && m.unk_id < n) bpe.unk_id = m.unk_id;
  if (m.bos_id >= 0 && m.bos_id < n) d->bos = m.bos_id;
  if (m.eos_id >= 0 && m.eos_id < n) d->eos = m.eos_id;
  if (d->bos >= 0) d->prefix = {d->bos};  // LlamaTokenizer: add_bos_token defaults to true
  std::string space = m.escape_whitespaces ? "\xE2\x96\x81" : " ";
  auto& norms = d->pipeline.normalizers;
  if (m.remove_extra_whitespaces) norms.push_back({Normalizer::Kind::kCollapseSpaces, "", ""});
  if (m.add_dummy_prefix) norms.push_back({Normalizer::Kind::kPrepend, space, ""});
  if (m.escape_whitespaces) norms.push_back({Normalizer::Kind::kReplace, " ", space});
  d->strip_leading_space = m.add_dummy_prefix;
  if (m.escape_whitespaces) bpe.enable_marker_split(space);
  return d;
}

}  // namespace unillm::io::tok
