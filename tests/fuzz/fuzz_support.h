// Helpers shared by the fuzz targets (docs/fuzzing.md): a per-process scratch directory for
// parsers that only read paths, the accepted-error check, and the checks run on a loaded tokenizer.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/tokenizer.h"

namespace unillm::fuzz {

inline std::string_view bytes_of(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A directory of this process under $TMPDIR (or /tmp), removed at exit. Parsers that only take a
// path read the input from a file written here (page cache, a few microseconds per input).
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "unillm-fuzz-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      std::perror("unillm fuzz: mkdtemp");
      std::abort();
    }
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline const ScratchDir& scratch() {
  static const ScratchDir dir;
  return dir;
}

// Writes bytes to path (replacing it); aborts on failure, which is the machine's fault, not the
// parser's.
inline void write_bytes(const std::string& path, std::string_view bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  size_t done = 0;
  while (fd >= 0 && done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (fd < 0 || done != bytes.size() || ::close(fd) != 0) {
    std::perror(("unillm fuzz: writing " + path).c_str());
    std::abort();
  }
}

// A failed internal invariant reached from input is a bug even though it is a unillm::Error:
// input must get a message about the input. UNILLM_CHECK messages are "FILE.cpp:LINE: check
// failed: ..." (input errors start with "[component]", so echoed input cannot look like one).
inline bool is_internal_check(std::string_view what) {
  const size_t at = what.find(": check failed: ");
  if (at == std::string_view::npos) return false;
  const std::string_view head = what.substr(0, at);
  const size_t colon = head.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == head.size()) return false;
  for (char c : head.substr(colon + 1))
    if (c < '0' || c > '9') return false;
  const std::string_view file = head.substr(0, colon);
  return !file.empty() && file.front() != '[' && file.find(' ') == std::string_view::npos &&
         (file.ends_with(".cpp") || file.ends_with(".h"));
}

inline void expect_input_error(const unillm::Error& e) {
  if (is_internal_check(e.what())) {
    std::fprintf(stderr, "unillm fuzz: internal check reached from input: %s\n", e.what());
    std::abort();
  }
}

// Aborts with a message when cond is false (an invariant of a parsed result).
inline void require(bool cond, const char* what) {
  if (!cond) {
    std::fprintf(stderr, "unillm fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

inline bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    int n = b < 0x80 ? 1 : b >= 0xF5 ? 0 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// What every loaded tokenizer must do: ids in [0, vocab), bos/eos/stop ids in the vocab, decode
// gives valid UTF-8 and the stream decoder agrees with decode.
inline void check_tokenizer(const io::Tokenizer& tok) {
  static const std::string kText =
      "Hello world! <s> </s> <|im_end|> \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x99\x82 caf\x65\xCC\x81"
      " \n\n  x\xFF";
  const int32_t v = tok.vocab_size();
  require(v > 0, "vocab_size > 0");
  require(tok.bos_id() >= -1 && tok.bos_id() < v, "bos id in the vocab");
  require(tok.eos_id() >= -1 && tok.eos_id() < v, "eos id in the vocab");
  for (int32_t id : tok.stop_ids()) require(id >= 0 && id < v, "stop ids in the vocab");
  for (bool parse_special : {false, true}) {
    std::vector<int32_t> ids = tok.encode(kText, {.parse_special = parse_special});
    for (int32_t id : ids) require(id >= 0 && id < v, "encoded ids in the vocab");
    std::string text = tok.decode(ids);
    require(valid_utf8(text), "decode is valid UTF-8");
    io::StreamDecoder stream(tok);
    std::string joined;
    for (int32_t id : ids) joined += stream.push(id);
    joined += stream.finish();
    require(joined == text, "stream decode == decode");
  }
}

// A small SentencePiece-style BPE tokenizer.json (<s>/</s>/<unk>, three ChatML-style added tokens
// and 20 pieces; no byte fallback, so it loads fast) for targets that fuzz the files around one.
inline std::string tiny_tokenizer_json() {
  using nlohmann::json;
  const char* kSp = "\xE2\x96\x81";  // U+2581
  json vocab = json::object(), added = json::array();
  const char* kAdded[] = {"<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"};
  for (int i = 0; i < 6; ++i) {
    vocab[kAdded[i]] = i;
    added.push_back({{"id", i},
                     {"content", kAdded[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  std::vector<std::string> pieces = {kSp, "e", "h", "l", "o", "t", "w", "r", "d"};
  json merges = json::array();
  for (const auto& [l, r] : std::vector<std::pair<std::string, std::string>>{{"h", "e"},
                                                                             {"l", "l"},
                                                                             {"he", "ll"},
                                                                             {"hell", "o"},
                                                                             {kSp, "t"},
                                                                             {kSp, "hello"},
                                                                             {"o", "r"},
                                                                             {"w", "or"},
                                                                             {"l", "d"},
                                                                             {"wor", "ld"},
                                                                             {kSp, "world"}}) {
    merges.push_back(l + " " + r);
    pieces.push_back(l + r);
  }
  for (const auto& p : pieces) vocab[p] = static_cast<int>(vocab.size());
  json replace_sp = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}};
  json unreplace = {{"type", "Replace"}, {"pattern", {{"String", kSp}}}, {"content", " "}};
  json j = {{"version", "1.0"},
            {"added_tokens", added},
            {"normalizer",
             {{"type", "Sequence"},
              {"normalizers", {{{"type", "Prepend"}, {"prepend", kSp}}, replace_sp}}}},
            {"pre_tokenizer", nullptr},
            {"decoder",
             {{"type", "Sequence"},
              {"decoders",
               {unreplace,
                {{"type", "ByteFallback"}},
                {{"type", "Fuse"}},
                {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
            {"model",
             {{"type", "BPE"},
              {"unk_token", "<unk>"},
              {"fuse_unk", true},
              {"byte_fallback", false},
              {"vocab", vocab},
              {"merges", merges}}}};
  return j.dump();
}

}  // namespace unillm::fuzz
