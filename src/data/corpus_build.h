// `unillm preprocess`: text files → a token corpus (token_corpus.h), streamed, so a corpus larger
// than memory can be prepared. Documents are what stage pt's raw-text reader sees
// (record_reader.h): .txt = one document per line (Python splitlines breaks), empty lines
// skipped; .jsonl / .json = JSON lines, each non-blank line an object whose `json_key` string is
// the document, empty strings skipped. Each document is tokenised with pretrain_encode_options()
// (no BOS/EOS; training adds them), so training from the corpus sees the ids raw text would give.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/token_corpus.h"
#include "io/tokenizer.h"

namespace unillm::data {

struct CorpusBuildOptions {
  std::vector<std::string> inputs;  // read in order, concatenated
  std::string output_prefix;        // writes PREFIX.bin and PREFIX.idx
  std::string json_key = "text";
  // A chunk of documents is tokenised together (in parallel), then written: memory holds one
  // chunk of text and its ids (~5x the text with int32 ids).
  int64_t chunk_docs = 4096;
  int64_t chunk_bytes = 8 << 20;  // a chunk also ends after this much text
  // Called after each chunk with (documents, tokens, input bytes) so far; may be empty.
  std::function<void(int64_t, int64_t, int64_t)> progress;
};

struct CorpusBuildStats {
  CorpusMeta meta;
  int64_t input_bytes = 0;
};

// Throws DataError "[preprocess] FILE line N: ..." for a bad record (invalid UTF-8 in a .txt
// line, invalid JSON, not an object, key missing or not a string, a JSON array file — give JSON
// lines), for an input without documents; IoError when a file cannot be read or written. On an
// error nothing is left under the output names.
CorpusBuildStats build_token_corpus(const CorpusBuildOptions& opts, const io::Tokenizer& tok);

}  // namespace unillm::data
