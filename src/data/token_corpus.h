// A pre-tokenised corpus on disk, written by `unillm preprocess` and read by training in place:
// PREFIX.bin holds every document's token ids back to back, PREFIX.idx where each document
// starts. Documents are stored as the tokenizer gave them: no BOS, no EOS (training adds those
// by its own rules, so eos_token / template still apply). See docs/corpora.md.
//
// PREFIX.bin: 32-byte header {char[8] "UNILLMTK", u32 version = 1, u32 dtype, u64 num_tokens,
//             u64 0}, then num_tokens ids of dtype (1 = u16, used when vocab_size <= 65536;
//             2 = i32), little-endian.
// PREFIX.idx: 64-byte header {char[8] "UNILLMIX", u32 version = 1, u32 dtype, u64 num_docs,
//             u64 num_tokens, u64 vocab_size, u64 tokenizer fingerprint, i32 bos, i32 eos,
//             u64 0}, then num_docs + 1 u64 token offsets (0, …, num_tokens; non-decreasing).
// The writer writes both to PREFIX.*.tmp and renames them at finish(), so a crash never leaves a
// half-written corpus under the final names.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include "io/tokenizer.h"

namespace unillm::data {

enum class TokenDType : uint32_t { kU16 = 1, kI32 = 2 };

// The dtype a corpus of this vocabulary is stored in.
TokenDType token_dtype_for(int64_t vocab_size);
// FNV-1a over every id's vocab string and the BOS/EOS ids: a corpus records the tokenizer it was
// made with, so training with another tokenizer is refused instead of learning garbage.
uint64_t tokenizer_fingerprint(const io::Tokenizer& tok);

struct CorpusMeta {
  TokenDType dtype = TokenDType::kU16;
  int64_t num_docs = 0;
  int64_t num_tokens = 0;
  int64_t vocab_size = 0;
  uint64_t fingerprint = 0;
  int32_t bos_id = -1, eos_id = -1;  // the tokenizer's, for information
};

class TokenCorpusWriter {
 public:
  // Opens PREFIX.bin.tmp / PREFIX.idx.tmp (creating PREFIX's directory). Throws IoError.
  TokenCorpusWriter(std::string prefix, const io::Tokenizer& tok);
  ~TokenCorpusWriter();  // without finish(): removes the temporary files
  TokenCorpusWriter(const TokenCorpusWriter&) = delete;
  TokenCorpusWriter& operator=(const TokenCorpusWriter&) = delete;

  // Appends one document. Throws DataError when an id is outside [0, vocab_size).
  void add(std::span<const int32_t> ids);
  // Writes the headers and renames both files into place. Returns what was written.
  CorpusMeta finish();

 private:
  void write(std::FILE* f, const void* p, size_t n, const std::string& path);
  std::string prefix_;
  CorpusMeta meta_;
  std::FILE* bin_ = nullptr;
  std::FILE* idx_ = nullptr;
  std::string buf_;  // one document's ids in the stored dtype
  bool finished_ = false;
};

// Read-only view of a corpus. The index is memory-mapped (8 bytes per document); the token file
// is read with pread into the caller's buffer, so what training touches stays in the kernel's
// page cache and never in this process's resident set: with a mapping, every block read maps
// the kernel's 64 KiB fault-around window, and over an epoch RSS grows to the whole file
// (measured: +1.5 MB after 24 random blocks of a 90 MB file). The layout stays mmap-able.
class TokenCorpus {
 public:
  // Checks magic, version, dtype, the file sizes against the headers and the offsets
  // (read in chunks, not mapped); throws DataError naming the file for any mismatch, IoError when
  // a file cannot be opened.
  static std::shared_ptr<const TokenCorpus> open(const std::string& prefix);

  const CorpusMeta& meta() const { return meta_; }
  const std::string& prefix() const { return prefix_; }
  int64_t num_docs() const { return meta_.num_docs; }
  int64_t doc_offset(int64_t d) const;  // d in [0, num_docs]; the end of doc d-1
  int64_t doc_length(int64_t d) const { return doc_offset(d + 1) - doc_offset(d); }
  // Copies tokens [begin, begin + n) of the concatenated stream into out as int32. Thread-safe.
  // Throws IoError when the read fails.
  void copy_tokens(int64_t begin, int64_t n, int32_t* out) const;

  ~TokenCorpus();

 private:
  TokenCorpus() = default;
  std::string prefix_;
  CorpusMeta meta_;
  const uint64_t* offsets_ = nullptr;  // into the .idx mapping, after its header
  int bin_fd_ = -1;                    // the .bin, for pread
  void* idx_map_ = nullptr;
  size_t idx_size_ = 0;
};

}  // namespace unillm::data
