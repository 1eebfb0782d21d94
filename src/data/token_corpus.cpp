// Token corpus writer and memory-mapped reader (format in token_corpus.h).
#include "data/token_corpus.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "data/error.h"

namespace unillm::data {

namespace fs = std::filesystem;

namespace {

constexpr char kBinMagic[8] = {'U', 'N', 'I', 'L', 'L', 'M', 'T', 'K'};
constexpr char kIdxMagic[8] = {'U', 'N', 'I', 'L', 'L', 'M', 'I', 'X'};
constexpr uint32_t kVersion = 1;

struct BinHeader {
  char magic[8];
  uint32_t version;
  uint32_t dtype;
  uint64_t num_tokens;
  uint64_t reserved;
};
static_assert(sizeof(BinHeader) == 32);

struct IdxHeader {
  char magic[8];
  uint32_t version;
  uint32_t dtype;
  uint64_t num_docs;
  uint64_t num_tokens;
  uint64_t vocab_size;
  uint64_t fingerprint;
  int32_t bos_id;
  int32_t eos_id;
  uint64_t reserved;
};
static_assert(sizeof(IdxHeader) == 64);

size_t dtype_bytes(TokenDType d) { return d == TokenDType::kU16 ? 2 : 4; }

// The file must hold a header of its kind; reads it and checks magic, version and dtype.
template <typename Header>
Header read_header(std::FILE* f, const std::string& path, const char (&magic)[8]) {
  Header h{};
  if (std::fread(&h, sizeof h, 1, f) != 1)
    UNILLM_THROW(DataError, "[data] ", path, ": too short for a token-corpus header (truncated?)");
  if (std::memcmp(h.magic, magic, 8) != 0)
    UNILLM_THROW(DataError, "[data] ", path,
                 ": not a unillm token corpus (bad magic; make it with `unillm preprocess`)");
  if (h.version != kVersion)
    UNILLM_THROW(DataError, "[data] ", path, ": token-corpus version ", h.version,
                 ", this unillm reads version ", kVersion);
  if (h.dtype != static_cast<uint32_t>(TokenDType::kU16) &&
      h.dtype != static_cast<uint32_t>(TokenDType::kI32))
    UNILLM_THROW(DataError, "[data] ", path, ": unknown token dtype ", h.dtype);
  return h;
}

struct File {
  std::FILE* f;
  explicit File(const std::string& path) : f(std::fopen(path.c_str(), "rb")) {
    if (!f) UNILLM_THROW(IoError, "[data] cannot open ", path, ": ", std::strerror(errno));
  }
  ~File() { std::fclose(f); }
};

void* map_file(const std::string& path, size_t size) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) UNILLM_THROW(IoError, "[data] cannot open ", path, ": ", std::strerror(errno));
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    UNILLM_THROW(IoError, "[data] cannot mmap ", path, ": ", std::strerror(errno));
  return p;
}

// Offsets must start at 0, never decrease and end at num_tokens; read in chunks so that
// checking a large index does not make it resident.
void check_offsets(std::FILE* f, const std::string& path, uint64_t count, uint64_t num_tokens) {
  std::vector<uint64_t> chunk(1 << 16);
  uint64_t prev = 0;
  for (uint64_t i = 0; i < count;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), count - i));
    if (std::fread(chunk.data(), sizeof(uint64_t), n, f) != n)
      UNILLM_THROW(DataError, "[data] ", path, ": truncated offsets");
    for (size_t k = 0; k < n; ++k, ++i) {
      if ((i == 0 && chunk[k] != 0) || chunk[k] < prev || chunk[k] > num_tokens)
        UNILLM_THROW(DataError, "[data] ", path, ": document offset ", i, " (", chunk[k],
                     ") is out of order or past the ", num_tokens, " tokens (corrupt index)");
      prev = chunk[k];
    }
  }
  if (prev != num_tokens)
    UNILLM_THROW(DataError, "[data] ", path, ": the last document ends at ", prev, ", not at ",
                 num_tokens, " tokens (corrupt index)");
}

}  // namespace

TokenDType token_dtype_for(int64_t vocab_size) {
  return vocab_size <= 65536 ? TokenDType::kU16 : TokenDType::kI32;
}

uint64_t tokenizer_fingerprint(const io::Tokenizer& tok) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i)
      h = (h ^ static_cast<const unsigned char*>(p)[i]) * 0x100000001b3ULL;
  };
  const int32_t v = tok.vocab_size(), bos = tok.bos_id(), eos = tok.eos_id();
  mix(&v, sizeof v);
  mix(&bos, sizeof bos);
  mix(&eos, sizeof eos);
  for (int32_t id = 0; id < v; ++id) {
    const std::string s = tok.id_to_token(id);
    mix(s.data(), s.size());
    mix("", 1);  // a separator, so "ab","c" differs from "a","bc"
  }
  return h;
}

// ---- writer

TokenCorpusWriter::TokenCorpusWriter(std::string prefix, const io::Tokenizer& tok)
    : prefix_(std::move(prefix)) {
  meta_.vocab_size = tok.vocab_size();
  meta_.dtype = token_dtype_for(meta_.vocab_size);
  meta_.fingerprint = tokenizer_fingerprint(tok);
  meta_.bos_id = tok.bos_id();
  meta_.eos_id = tok.eos_id();
  const fs::path parent = fs::path(prefix_).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  bin_ = std::fopen((prefix_ + ".bin.tmp").c_str(), "wb");
  idx_ = std::fopen((prefix_ + ".idx.tmp").c_str(), "wb");
  if (!bin_ || !idx_)
    UNILLM_THROW(IoError, "[preprocess] cannot create ", prefix_,
                 ".bin/.idx: ", std::strerror(errno));
  const BinHeader bh{};
  const IdxHeader ih{};
  const uint64_t zero = 0;
  write(bin_, &bh, sizeof bh, prefix_ + ".bin");  // placeholders, rewritten by finish()
  write(idx_, &ih, sizeof ih, prefix_ + ".idx");
  write(idx_, &zero, sizeof zero, prefix_ + ".idx");  // offset of document 0
}

TokenCorpusWriter::~TokenCorpusWriter() {
  if (bin_) std::fclose(bin_);
  if (idx_) std::fclose(idx_);
  if (!finished_) {
    std::error_code ec;
    fs::remove(prefix_ + ".bin.tmp", ec);
    fs::remove(prefix_ + ".idx.tmp", ec);
  }
}

void TokenCorpusWriter::write(std::FILE* f, const void* p, size_t n, const std::string& path) {
  if (n > 0 && std::fwrite(p, 1, n, f) != n)
    UNILLM_THROW(IoError, "[preprocess] writing ", path, " failed: ", std::strerror(errno));
}

void TokenCorpusWriter::add(std::span<const int32_t> ids) {
  UNILLM_CHECK(!finished_, "add after finish");
  const size_t w = dtype_bytes(meta_.dtype);
  buf_.resize(ids.size() * w);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= meta_.vocab_size)
      UNILLM_THROW(DataError, "[preprocess] token id ", ids[i], " outside the vocabulary of ",
                   meta_.vocab_size);
    if (w == 2) {
      const uint16_t v = static_cast<uint16_t>(ids[i]);
      std::memcpy(&buf_[i * 2], &v, 2);
    } else {
      std::memcpy(&buf_[i * 4], &ids[i], 4);
    }
  }
  write(bin_, buf_.data(), buf_.size(), prefix_ + ".bin");
  meta_.num_tokens += static_cast<int64_t>(ids.size());
  meta_.num_docs += 1;
  const uint64_t end = static_cast<uint64_t>(meta_.num_tokens);
  write(idx_, &end, sizeof end, prefix_ + ".idx");
}

CorpusMeta TokenCorpusWriter::finish() {
  BinHeader bh{};
  std::memcpy(bh.magic, kBinMagic, 8);
  bh.version = kVersion;
  bh.dtype = static_cast<uint32_t>(meta_.dtype);
  bh.num_tokens = static_cast<uint64_t>(meta_.num_tokens);
  IdxHeader ih{};
  std::memcpy(ih.magic, kIdxMagic, 8);
  ih.version = kVersion;
  ih.dtype = bh.dtype;
  ih.num_docs = static_cast<uint64_t>(meta_.num_docs);
  ih.num_tokens = bh.num_tokens;
  ih.vocab_size = static_cast<uint64_t>(meta_.vocab_size);
  ih.fingerprint = meta_.fingerprint;
  ih.bos_id = meta_.bos_id;
  ih.eos_id = meta_.eos_id;
  for (auto [f, p, n, name] :
       {std::tuple{bin_, static_cast<const void*>(&bh), sizeof bh, ".bin"},
        std::tuple{idx_, static_cast<const void*>(&ih), sizeof ih, ".idx"}}) {
    if (std::fseek(f, 0, SEEK_SET) != 0)
      UNILLM_THROW(IoError, "[preprocess] seeking in ", prefix_, name, " failed");
    write(f, p, n, prefix_ + name);
    if (std::fflush(f) != 0 || ::fsync(::fileno(f)) != 0)
      UNILLM_THROW(IoError, "[preprocess] writing ", prefix_, name,
                   " failed: ", std::strerror(errno));
  }
  std::fclose(bin_);
  std::fclose(idx_);
  bin_ = idx_ = nullptr;
  // The index last: a reader sees either no corpus or a complete one.
  fs::rename(prefix_ + ".bin.tmp", prefix_ + ".bin");
  fs::rename(prefix_ + ".idx.tmp", prefix_ + ".idx");
  finished_ = true;
  return meta_;
}

// ---- reader

std::shared_ptr<const TokenCorpus> TokenCorpus::open(const std::string& prefix) {
  std::shared_ptr<TokenCorpus> c(new TokenCorpus());
  c->prefix_ = prefix;
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  File idx(idx_path), bin(bin_path);
  const IdxHeader ih = read_header<IdxHeader>(idx.f, idx_path, kIdxMagic);
  const BinHeader bh = read_header<BinHeader>(bin.f, bin_path, kBinMagic);
  const uint64_t idx_size = fs::file_size(idx_path), bin_size = fs::file_size(bin_path);
  if (ih.num_docs > (idx_size - sizeof ih) / 8 || idx_size != sizeof ih + 8 * (ih.num_docs + 1))
    UNILLM_THROW(DataError, "[data] ", idx_path, ": ", idx_size, " bytes, but its header promises ",
                 ih.num_docs, " documents (", sizeof ih + 8 * (ih.num_docs + 1),
                 " bytes): truncated or not from the same run");
  if (bh.dtype != ih.dtype || bh.num_tokens != ih.num_tokens)
    UNILLM_THROW(DataError, "[data] ", bin_path, " does not belong to ", idx_path, " (dtype ",
                 bh.dtype, " vs ", ih.dtype, ", ", bh.num_tokens, " vs ", ih.num_tokens,
                 " tokens)");
  const size_t w = dtype_bytes(static_cast<TokenDType>(ih.dtype));
  if (ih.num_tokens > (bin_size - sizeof bh) / w || bin_size != sizeof bh + w * ih.num_tokens)
    UNILLM_THROW(DataError, "[data] ", bin_path, ": ", bin_size, " bytes, but its header promises ",
                 ih.num_tokens, " tokens of ", w, " bytes: truncated");
  if ((w == 2) != (ih.vocab_size <= 65536))
    UNILLM_THROW(DataError, "[data] ", idx_path, ": dtype does not fit vocab size ", ih.vocab_size);
  check_offsets(idx.f, idx_path, ih.num_docs + 1, ih.num_tokens);
  c->meta_ = {static_cast<TokenDType>(ih.dtype),
              static_cast<int64_t>(ih.num_docs),
              static_cast<int64_t>(ih.num_tokens),
              static_cast<int64_t>(ih.vocab_size),
              ih.fingerprint,
              ih.bos_id,
              ih.eos_id};
  c->idx_size_ = idx_size;
  c->idx_map_ = map_file(idx_path, idx_size);
  c->offsets_ =
      reinterpret_cast<const uint64_t*>(static_cast<const char*>(c->idx_map_) + sizeof ih);
  c->bin_fd_ = ::open(bin_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (c->bin_fd_ < 0)
    UNILLM_THROW(IoError, "[data] cannot open ", bin_path, ": ", std::strerror(errno));
  return c;
}

TokenCorpus::~TokenCorpus() {
  if (bin_fd_ >= 0) ::close(bin_fd_);
  if (idx_map_) ::munmap(idx_map_, idx_size_);
}

int64_t TokenCorpus::doc_offset(int64_t d) const {
  UNILLM_CHECK(d >= 0 && d <= meta_.num_docs, "document ", d, " of ", meta_.num_docs);
  return static_cast<int64_t>(offsets_[d]);
}

void TokenCorpus::copy_tokens(int64_t begin, int64_t n, int32_t* out) const {
  UNILLM_CHECK(begin >= 0 && n >= 0 && begin + n <= meta_.num_tokens, "tokens [", begin, ", ",
               begin + n, ") of ", meta_.num_tokens);
  const size_t w = dtype_bytes(meta_.dtype);
  char* dst = reinterpret_cast<char*>(out);
  const size_t bytes = w * static_cast<size_t>(n);
  off_t at = static_cast<off_t>(sizeof(BinHeader) + w * static_cast<size_t>(begin));
  for (size_t done = 0; done < bytes;) {
    const ssize_t got = ::pread(bin_fd_, dst + done, bytes - done, at + static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      UNILLM_THROW(IoError, "[data] reading ", prefix_,
                   ".bin failed: ", got < 0 ? std::strerror(errno) : "unexpected end of file");
    done += static_cast<size_t>(got);
  }
  if (w == 4) return;
  // Widen the u16 ids in place, last first: id i is read from bytes [2i, 2i+2) before int32 i
  // is written to [4i, 4i+4), which only overlaps ids >= i, already widened.
  for (int64_t i = n - 1; i >= 0; --i) {
    uint16_t v;
    std::memcpy(&v, dst + 2 * i, 2);
    out[i] = v;
  }
}

}  // namespace unillm::data
