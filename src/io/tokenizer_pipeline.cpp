// The encode pipeline of one text segment: normalizers (NFC, Prepend, Replace, SentencePiece
// whitespace collapsing), pre-tokenizers (regex Split, ByteLevel, Metaspace) as HF tokenizers
// applies them, then the BPE model per piece. Regexes run on PCRE2 with UTF + UCP.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "io/tokenizer_internal.h"
#include "io/tokenizer_unicode.h"

namespace unillm::io::tok {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Regex::Regex(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    UNILLM_THROW(IoError, "[tokenizer] bad regex at offset ", offset, ": ",
                 reinterpret_cast<const char*>(msg));
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::vector<std::pair<size_t, size_t>> spans;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  pcre2_match_context* mc = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack =
      jit_ ? pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr) : nullptr;
  if (stack) pcre2_jit_stack_assign(mc, nullptr, stack);
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  int rc = 0;
  for (size_t pos = 0; pos < s.size();) {
    rc = pcre2_match(code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md, mc);
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] > ov[0]) {
      spans.emplace_back(ov[0], ov[1]);
      pos = ov[1];
    } else {  // empty match: step over one character
      pos = ov[0] + unicode::utf8_len(static_cast<unsigned char>(s[ov[0]]));
    }
  }
  if (stack) pcre2_jit_stack_free(stack);
  pcre2_match_context_free(mc);
  pcre2_match_data_free(md);
  if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
    UNILLM_THROW(IoError, "[tokenizer] pre-tokenizer regex failed (PCRE2 error ", rc, ")");
  return spans;
}

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

// SentencePiece remove_extra_whitespaces: no leading/trailing spaces, runs of spaces become one.
void collapse_spaces(std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out.push_back(c);
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  s.swap(out);
}

void normalize(const Normalizer& n, std::string& s) {
  switch (n.kind) {
    case Normalizer::Kind::kNfc:
      s = unicode::nfc(s);
      break;
    case Normalizer::Kind::kPrepend:
      if (!s.empty()) s.insert(0, n.a);
      break;
    case Normalizer::Kind::kReplace:
      replace_all(s, n.a, n.b);
      break;
    case Normalizer::Kind::kCollapseSpaces:
      collapse_spaces(s);
      break;
  }
}

// Applies a split behavior to spans that tile s, each flagged as a match or not.
void split_pieces(const std::string& s, const std::vector<std::pair<size_t, size_t>>& matches,
                  const PreTokenizer& p, std::vector<std::string>& out) {
  struct Part {
    size_t b, e;
    bool match;
  };
  std::vector<Part> parts;
  size_t pos = 0;
  for (auto [b, e] : matches) {
    if (b > pos) parts.push_back({pos, b, p.invert});
    parts.push_back({b, e, !p.invert});
    pos = e;
  }
  if (pos < s.size()) parts.push_back({pos, s.size(), p.invert});
  std::vector<std::string> got;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& part = parts[i];
    bool prev_match = i > 0 && parts[i - 1].match;
    bool join = false;  // joins the previous piece (HF's fold rules)
    switch (p.behavior) {
      case SplitBehavior::kRemoved:
        if (part.match) continue;
        break;
      case SplitBehavior::kMergedWithPrevious:
        join = part.match && i > 0 && !prev_match;
        break;
      case SplitBehavior::kMergedWithNext:
        join = prev_match && !part.match;
        break;
      case SplitBehavior::kContiguous:
        join = part.match && prev_match;
        break;
      case SplitBehavior::kIsolated:
        break;
    }
    if (join && !got.empty())
      got.back().append(s, part.b, part.e - part.b);
    else
      got.push_back(s.substr(part.b, part.e - part.b));
  }
  for (auto& g : got) out.push_back(std::move(g));
}

void pre_tokenize(const PreTokenizer& p, std::string piece, bool first,
                  std::vector<std::string>& out) {
  switch (p.kind) {
    case PreTokenizer::Kind::kSplit:
      split_pieces(piece, p.regex->find_all(piece), p, out);
      return;
    case PreTokenizer::Kind::kByteLevel: {
      if (p.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(0, " ");
      if (!p.regex) {
        out.push_back(std::move(piece));
        return;
      }
      split_pieces(piece, p.regex->find_all(piece), p, out);
      return;
    }
    case PreTokenizer::Kind::kMetaspace: {
      replace_all(piece, " ", p.replacement);
      bool prepend = p.prepend == PreTokenizer::Prepend::kAlways ||
                     (p.prepend == PreTokenizer::Prepend::kFirst && first);
      if (prepend && piece.compare(0, p.replacement.size(), p.replacement) != 0)
        piece.insert(0, p.replacement);
      if (!p.split) {
        out.push_back(std::move(piece));
        return;
      }
      std::vector<std::pair<size_t, size_t>> hits;
      for (size_t h = piece.find(p.replacement); h != std::string::npos;
           h = piece.find(p.replacement, h + p.replacement.size()))
        hits.emplace_back(h, h + p.replacement.size());
      PreTokenizer merged_next = p;
      merged_next.behavior = SplitBehavior::kMergedWithNext;
      split_pieces(piece, hits, merged_next, out);
      return;
    }
  }
}

}  // namespace

void Pipeline::encode(std::string_view segment, bool at_start, std::vector<int32_t>& out) const {
  std::string text(segment);
  for (const Normalizer& n : normalizers) normalize(n, text);
  std::vector<std::string> pieces;
  pieces.push_back(std::move(text));
  for (const PreTokenizer& p : pretokenizers) {
    std::vector<std::string> next;
    next.reserve(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i)
      pre_tokenize(p, std::move(pieces[i]), at_start && i == 0, next);
    pieces.swap(next);
  }
  for (const std::string& piece : pieces) model.encode(piece, out);
}

}  // namespace unillm::io::tok
