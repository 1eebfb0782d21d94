// Byte-level BPE from vocab.json + merges.txt (GPT2Tokenizer / Qwen2Tokenizer layouts), and the
// merges-BPE builder that tokenizer.json shares. tokenizer_config.json's tokenizer_class picks the
// pre-tokenizer: Qwen2 (NFC + Qwen2 regex) or GPT-2 (GPT-2 regex, the default).
#include "io/tokenizer_internal.h"
#include "io/tokenizer_unicode.h"

namespace unillm::io::tok {

void build_merges_bpe(TokenizerData& d, const nlohmann::json& vocab,
                      const std::vector<std::pair<std::string, std::string>>& merges,
                      bool byte_level) {
  BpeModel& bpe = d.pipeline.model;
  bpe.mode = byte_level ? BpeModel::Mode::kByteMerges : BpeModel::Mode::kCharMerges;
  if (!vocab.is_object()) fail(d.source, "vocab is not a JSON object");
  for (const auto& [token, v] : vocab.items()) {
    if (!v.is_number_integer()) fail(d.source, "vocab id of '" + token + "' is not an integer");
    int32_t id = v.get<int32_t>();
    std::string key = byte_level ? unicode::byte_level_to_bytes(token) : token;
    d.set_token(id, token, key);
    bpe.vocab[key] = id;
    if (byte_level && key.size() == 1) bpe.byte_ids[static_cast<unsigned char>(key[0])] = id;
    if (!byte_level && token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>')
      bpe.byte_ids[std::strtol(token.substr(3, 2).c_str(), nullptr, 16) & 0xFF] = id;
  }
  bpe.merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = d.token_ids.find(a), ib = d.token_ids.find(b), im = d.token_ids.find(a + b);
    if (ia == d.token_ids.end() || ib == d.token_ids.end() || im == d.token_ids.end())
      fail(d.source, "merge " + std::to_string(rank) + " '" + a + " " + b +
                         "' uses a token not in the vocab");
    uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    bpe.merges.emplace(key, BpeModel::Merge{static_cast<int32_t>(rank), im->second});
  }
}

namespace {

std::vector<std::pair<std::string, std::string>> read_merges_txt(const std::string& path) {
  std::string text = read_file(path);
  std::vector<std::pair<std::string, std::string>> merges;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size(); ++line_no) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files exist in the wild
    if (line.empty() || (line_no == 0 && line.rfind("#version", 0) == 0)) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size() ||
        line.find(' ', sp + 1) != std::string::npos)
      fail(path, "line " + std::to_string(line_no + 1) + ": expected 'left right'");
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  return merges;
}

}  // namespace

std::unique_ptr<TokenizerData> load_vocab_merges(const std::string& dir) {
  auto d = std::make_unique<TokenizerData>();
  std::string merges_path = dir + "/merges.txt";
  if (!file_exists(merges_path)) fail(merges_path, "missing (vocab.json needs merges.txt)");
  std::string tokenizer_class;
  std::string config = dir + "/tokenizer_config.json";
  if (file_exists(config)) {
    nlohmann::json c = parse_json(read_file(config), config);
    if (c.is_object() && c.contains("tokenizer_class") && c.at("tokenizer_class").is_string())
      tokenizer_class = c.at("tokenizer_class").get<std::string>();
  }
  auto merges = read_merges_txt(merges_path);
  d->source = dir + "/vocab.json";
  build_merges_bpe(*d, parse_json(read_file(d->source), d->source), merges, true);
  d->source = dir;
  bool qwen2 = tokenizer_class.rfind("Qwen2", 0) == 0 || tokenizer_class.rfind("Qwen3", 0) == 0;
  if (qwen2) d->pipeline.normalizers.push_back({Normalizer::Kind::kNfc, "", ""});
  PreTokenizer split;
  split.regex = std::make_shared<Regex>(qwen2 ? kQwen2Pattern : kGpt2Pattern);
  d->pipeline.pretokenizers.push_back(split);
  return d;
}

}  // namespace unillm::io::tok
