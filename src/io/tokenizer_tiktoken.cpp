// tiktoken ranks files ("<base64 bytes> <rank>" per line), as Llama 3's original/tokenizer.model.
// The rank is the id and the merge priority; the 256 special tokens and the pre-tokenizer regex
// are Llama 3's (Meta's llama/tokenizer.py), the only family that ships this format.
#include <fstream>

#include "io/tokenizer_internal.h"
#include "io/tokenizer_unicode.h"

namespace unillm::io::tok {
namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool base64_decode(std::string_view s, std::string& out) {
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < s.size() && s[i] != '='; ++i) {
    int v = base64_value(s[i]);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  for (; i < s.size(); ++i)
    if (s[i] != '=') return false;
  return !out.empty();
}

// Llama 3's special tokens, in id order after the ranks.
std::vector<std::string> llama3_specials() {
  std::vector<std::string> s = {"<|begin_of_text|>",
                                "<|end_of_text|>",
                                "<|reserved_special_token_0|>",
                                "<|reserved_special_token_1|>",
                                "<|reserved_special_token_2|>",
                                "<|reserved_special_token_3|>",
                                "<|start_header_id|>",
                                "<|end_header_id|>",
                                "<|reserved_special_token_4|>",
                                "<|eot_id|>"};
  for (int i = 5; i < 251; ++i) s.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  return s;
}

}  // namespace

bool sniff_tiktoken(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string head(512, '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(f.gcount()));
  size_t nl = head.find('\n'), sp = head.find(' ');
  if (nl == std::string::npos || sp == std::string::npos || sp == 0 || sp > nl) return false;
  for (size_t i = 0; i < sp; ++i)
    if (base64_value(head[i]) < 0 && head[i] != '=') return false;
  for (size_t i = sp + 1; i < nl; ++i)
    if (head[i] < '0' || head[i] > '9') return false;
  return nl > sp + 1;
}

std::unique_ptr<TokenizerData> load_tiktoken(const std::string& path) {
  std::string text = read_file(path);
  auto d = std::make_unique<TokenizerData>();
  d->source = path;
  BpeModel& bpe = d->pipeline.model;
  bpe.mode = BpeModel::Mode::kByteRanks;
  bpe.ignore_merges = true;  // tiktoken looks a whole piece up first
  std::string bytes;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size(); ++line_no) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    std::string where = "line " + std::to_string(line_no + 1);
    if (sp == std::string_view::npos || !base64_decode(line.substr(0, sp), bytes))
      fail(path, where + ": expected '<base64> <rank>'");
    int32_t rank = 0;
    for (char c : line.substr(sp + 1)) {
      if (c < '0' || c > '9' || rank > 100000000) fail(path, where + ": bad rank");
      rank = rank * 10 + (c - '0');
    }
    if (!bpe.vocab.emplace(bytes, rank).second) fail(path, where + ": duplicate token");
    if (rank < static_cast<int32_t>(d->tokens.size()) && !d->tokens[rank].empty())
      fail(path, where + ": duplicate rank " + std::to_string(rank));
    d->set_token(rank, unicode::bytes_to_byte_level(bytes), bytes);
    if (bytes.size() == 1) bpe.byte_ids[static_cast<unsigned char>(bytes[0])] = rank;
  }
  for (int b = 0; b < 256; ++b)
    if (bpe.byte_ids[b] < 0) fail(path, "no token for byte " + std::to_string(b));
  int32_t base = static_cast<int32_t>(d->tokens.size());
  std::vector<std::string> specials = llama3_specials();
  for (size_t i = 0; i < specials.size(); ++i)
    d->add_token({specials[i], base + static_cast<int32_t>(i), true, false, false});
  d->bos = base;
  d->eos = base + 1;
  d->stop_ids = {base + 1, base + 9};  // <|end_of_text|>, <|eot_id|>
  d->prefix = {d->bos};
  PreTokenizer split;
  split.regex = std::make_shared<Regex>(kLlama3Pattern);
  d->pipeline.pretokenizers.push_back(split);
  return d;
}

}  // namespace unillm::io::tok
