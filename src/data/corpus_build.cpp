// Streaming text → token corpus (see corpus_build.h): read a chunk of documents, tokenise it in
// parallel, append it in order; memory holds one chunk.
#include "data/corpus_build.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"
#include "data/error.h"
#include "data/pretrain.h"
#include "data/record_reader.h"

namespace unillm::data {

namespace {

class Builder {
 public:
  Builder(const CorpusBuildOptions& o, const io::Tokenizer& tok)
      : o_(o), tok_(tok), writer_(o.output_prefix, tok), eo_(pretrain_encode_options()) {}

  void add(std::string text) {
    if (text.empty()) return;  // as the raw reader: an empty line / text is no document
    chunk_bytes_ += static_cast<int64_t>(text.size());
    chunk_.push_back(std::move(text));
    if (static_cast<int64_t>(chunk_.size()) >= o_.chunk_docs || chunk_bytes_ >= o_.chunk_bytes)
      flush();
  }

  void flush() {
    std::vector<std::vector<int32_t>> ids(chunk_.size());
    const int64_t n = static_cast<int64_t>(chunk_.size());
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < n; ++i) ids[i] = tok_.encode(chunk_[i], eo_);
    for (const auto& d : ids) {
      writer_.add(d);
      tokens_ += static_cast<int64_t>(d.size());
    }
    docs_ += n;
    chunk_.clear();
    chunk_bytes_ = 0;
    if (o_.progress) o_.progress(docs_, tokens_, bytes_);
  }

  void read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) UNILLM_THROW(IoError, "[preprocess] cannot open ", path, ": ", std::strerror(errno));
    const bool txt = path.size() >= 4 && path.compare(path.size() - 4, 4, ".txt") == 0;
    const int64_t before = docs_ + static_cast<int64_t>(chunk_.size());
    std::string line;
    for (int64_t no = 1; std::getline(in, line); ++no) {
      bytes_ += static_cast<int64_t>(line.size()) + 1;
      if (txt)
        add_txt_line(path, no, line);
      else
        add_json_line(path, no, line);
    }
    if (in.bad()) UNILLM_THROW(IoError, "[preprocess] reading ", path, " failed");
    if (docs_ + static_cast<int64_t>(chunk_.size()) == before)
      UNILLM_THROW(DataError, "[preprocess] ", path, ": no documents");
  }

  CorpusBuildStats finish() {
    flush();
    CorpusBuildStats s;
    s.meta = writer_.finish();
    s.input_bytes = bytes_;
    return s;
  }

 private:
  // One physical line may hold several documents: the raw reader splits at every splitlines
  // break (\r, \v, \f, U+2028, …), not only at \n.
  void add_txt_line(const std::string& path, int64_t no, std::string_view s) {
    if (!valid_utf8(s))
      UNILLM_THROW(DataError, "[preprocess] ", path, " line ", no, ": invalid UTF-8");
    size_t start = 0;
    for (size_t i = 0; i < s.size();) {
      const size_t br = line_break_at(s, i);
      if (br == 0) {
        ++i;
        continue;
      }
      add(std::string(s.substr(start, i - start)));
      i += br;
      start = i;
    }
    if (start < s.size()) add(std::string(s.substr(start)));
  }

  void add_json_line(const std::string& path, int64_t no, const std::string& line) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) return;  // a blank line is no record
    auto bad = [&](const std::string& what) {
      UNILLM_THROW(DataError, "[preprocess] ", path, " line ", no, ": ", what);
    };
    if (line[first] == '[')
      bad("a JSON array; preprocess streams JSON lines (one object per line): convert the file");
    nlohmann::json obj = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) bad("invalid JSON");
    if (!obj.is_object()) bad("expected a JSON object");
    auto it = obj.find(o_.json_key);
    if (it == obj.end()) bad("key '" + o_.json_key + "' missing");
    if (!it->is_string())
      bad("key '" + o_.json_key + "' is not a string (got " + it->type_name() + ")");
    add(it->get<std::string>());
  }

  const CorpusBuildOptions& o_;
  const io::Tokenizer& tok_;
  TokenCorpusWriter writer_;
  io::EncodeOptions eo_;
  std::vector<std::string> chunk_;
  int64_t docs_ = 0, tokens_ = 0, bytes_ = 0, chunk_bytes_ = 0;
};

}  // namespace

CorpusBuildStats build_token_corpus(const CorpusBuildOptions& opts, const io::Tokenizer& tok) {
  if (opts.inputs.empty()) UNILLM_THROW(ConfigError, "[preprocess] no input file given");
  if (opts.output_prefix.empty()) UNILLM_THROW(ConfigError, "[preprocess] no output prefix given");
  if (opts.chunk_docs < 1 || opts.chunk_bytes < 1)
    UNILLM_THROW(ConfigError, "[preprocess] chunk size must be >= 1");
  Builder b(opts, tok);  // its writer removes the temporary files if anything below throws
  for (const auto& path : opts.inputs) b.read_file(path);
  return b.finish();
}

}  // namespace unillm::data
