// unillm's tokenized-rows directory (see tokenized_store.h): the .rows codec and the manifest.
#include "data/tokenized_store.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/error.h"
#include "io/json_file.h"

namespace unillm::data {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "the .rows format is little-endian");

namespace {

constexpr char kMagic[8] = {'U', 'N', 'I', 'L', 'L', 'M', 'R', 'W'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kLabels = 1, kPositions = 2, kSegments = 4, kTags = 8;
constexpr const char* kFormat = "unillm-tokenized";

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_rows(std::string& out, const std::vector<std::vector<int32_t>>& rows) {
  for (const auto& r : rows)
    if (!r.empty()) out.append(reinterpret_cast<const char*>(r.data()), r.size() * sizeof(int32_t));
}

// Bounds-checked reads over the bytes before the checksum.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n, const std::string& source) : p_(p), n_(n), source_(source) {}
  template <typename T>
  T get(const char* what) {
    if (left() < sizeof(T)) fail(std::string("truncated in ") + what);
    T v;
    std::memcpy(&v, p_ + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  size_t left() const { return n_ - at_; }
  // `lengths` rows of i32 each; every value must satisfy ok.
  template <typename Ok>
  std::vector<std::vector<int32_t>> rows(const std::vector<int64_t>& lengths, const char* what,
                                         Ok ok) {
    std::vector<std::vector<int32_t>> out(lengths.size());
    for (size_t r = 0; r < lengths.size(); ++r) {
      out[r].resize(static_cast<size_t>(lengths[r]));
      if (!out[r].empty()) std::memcpy(out[r].data(), p_ + at_, out[r].size() * sizeof(int32_t));
      at_ += out[r].size() * sizeof(int32_t);
      for (int32_t v : out[r])
        if (!ok(v))
          fail(std::string(what) + " of row " + std::to_string(r) + " holds " + std::to_string(v));
    }
    return out;
  }
  [[noreturn]] void fail(const std::string& what) const {
    UNILLM_THROW(DataError, "[data] ", source_, ": ", what,
                 " (a corrupted or truncated tokenized file)");
  }

 private:
  const uint8_t* p_;
  size_t n_, at_ = 0;
  const std::string& source_;
};

// The per-token arrays of d, checked to be one per row of the row's length (or absent).
uint32_t flags_of(const TokenizedDataset& d) {
  const auto rows = static_cast<size_t>(d.num_rows());
  auto present = [&](const std::vector<std::vector<int32_t>>& v, uint32_t bit) -> uint32_t {
    if (v.empty()) return 0;
    UNILLM_CHECK(v.size() == rows, "[data] tokenized rows: a per-row array of ", v.size(),
                 " rows for ", rows);
    for (size_t r = 0; r < rows; ++r)
      UNILLM_CHECK(static_cast<int64_t>(v[r].size()) == d.row_length(static_cast<int64_t>(r)),
                   "[data] tokenized rows: row ", r, " has arrays of different lengths");
    return bit;
  };
  return present(d.labels, kLabels) | present(d.position_ids, kPositions) |
         present(d.segment_ids, kSegments) | (d.tags.empty() ? 0 : kTags);
}

}  // namespace

std::string encode_rows(const TokenizedDataset& d) {
  const uint32_t flags = flags_of(d);
  const int64_t rows = d.num_rows();
  std::string out(kMagic, 8);
  put(out, kVersion);
  put(out, flags);
  for (int64_t v : {rows, d.group, d.documents, d.skipped_records, d.num_tokens()}) put(out, v);
  for (int64_t r = 0; r < rows; ++r) put(out, d.row_length(r));
  std::vector<int32_t> row;
  for (int64_t r = 0; r < rows; ++r) {  // through read_row: a RowSource-backed dataset works too
    row.resize(static_cast<size_t>(d.row_length(r)));
    if (row.empty()) continue;
    d.read_row(r, row.data());
    out.append(reinterpret_cast<const char*>(row.data()), row.size() * sizeof(int32_t));
  }
  if (flags & kLabels) put_rows(out, d.labels);
  if (flags & kPositions) put_rows(out, d.position_ids);
  if (flags & kSegments) put_rows(out, d.segment_ids);
  if (flags & kTags) out.append(reinterpret_cast<const char*>(d.tags.data()), d.tags.size());
  put(out, fnv1a(reinterpret_cast<const uint8_t*>(out.data()), out.size()));
  return out;
}

TokenizedDataset decode_rows(const uint8_t* bytes, size_t size, const std::string& source) {
  constexpr size_t kHeader = 8 + 4 + 4 + 5 * 8;
  Reader whole(bytes, size, source);
  if (size < kHeader + 8) whole.fail("shorter than a header");
  uint64_t sum;
  std::memcpy(&sum, bytes + size - 8, 8);
  if (std::memcmp(bytes, kMagic, 8) != 0)
    whole.fail("not a unillm tokenized-rows file (bad magic)");
  if (fnv1a(bytes, size - 8) != sum) whole.fail("checksum mismatch");
  Reader in(bytes + 8, size - 16, source);
  if (const auto v = in.get<uint32_t>("version"); v != kVersion)
    in.fail("version " + std::to_string(v) + ", this unillm reads version " +
            std::to_string(kVersion));
  const auto flags = in.get<uint32_t>("flags");
  if (flags & ~(kLabels | kPositions | kSegments | kTags))
    in.fail("unknown flags " + std::to_string(flags));
  TokenizedDataset d;
  const auto rows = in.get<int64_t>("rows");
  d.group = in.get<int64_t>("group");
  d.documents = in.get<int64_t>("documents");
  d.skipped_records = in.get<int64_t>("skipped_records");
  const auto tokens = in.get<int64_t>("tokens");
  if (rows < 0 || d.documents < 0 || d.skipped_records < 0 || tokens < 0)
    in.fail("a negative count");
  if (d.group != 1 && d.group != 2) in.fail("group " + std::to_string(d.group) + " (1 or 2)");
  if (rows % d.group != 0) in.fail(std::to_string(rows) + " rows do not form whole groups");
  if (rows == 0 && flags != 0) in.fail("per-row arrays flagged for a split without rows");
  if (static_cast<uint64_t>(rows) > in.left() / 8) in.fail("more row lengths than bytes");
  std::vector<int64_t> lengths(static_cast<size_t>(rows));
  int64_t total = 0;
  for (auto& l : lengths) {
    l = in.get<int64_t>("row lengths");
    if (l < 0 || l > tokens - total) in.fail("row lengths that do not add up to the token count");
    total += l;
  }
  if (total != tokens) in.fail("row lengths that do not add up to the token count");
  const int arrays = 1 + !!(flags & kLabels) + !!(flags & kPositions) + !!(flags & kSegments);
  const uint64_t tags = (flags & kTags) ? static_cast<uint64_t>(rows / d.group) : 0;
  if (static_cast<uint64_t>(tokens) > in.left() / (4 * arrays) ||
      static_cast<uint64_t>(tokens) * 4 * arrays + tags != in.left())
    in.fail("a size that disagrees with its counts");
  d.rows = in.rows(lengths, "ids", [](int32_t v) { return v >= 0; });
  if (flags & kLabels)
    d.labels = in.rows(lengths, "labels", [](int32_t v) { return v >= 0 || v == kIgnoreIndex; });
  if (flags & kPositions)
    d.position_ids = in.rows(lengths, "position ids", [](int32_t v) { return v >= 0; });
  if (flags & kSegments)
    d.segment_ids = in.rows(lengths, "segment ids", [](int32_t v) { return v >= 0; });
  for (uint64_t i = 0; i < tags; ++i) d.tags.push_back(in.get<uint8_t>("tags"));
  return d;
}

bool has_tokenized_data(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && !fs::is_empty(dir, ec);
}

namespace {

nlohmann::ordered_json split_json(const std::string& file, const TokenizedDataset& d) {
  return {{"file", file}, {"rows", d.num_rows()}, {"tokens", d.num_tokens()}};
}

// What a dir without a manifest holds instead, for the error.
std::string what_else(const std::string& dir) {
  for (const char* f : {"dataset_dict.json", "state.json", "dataset_info.json"})
    if (fs::exists(fs::path(dir) / f))
      return std::string("a Hugging Face `datasets` save (") + f +
             "), as LLaMA-Factory writes; unillm cannot read Arrow. Point tokenized_path at a new "
             "or empty dir: unillm then tokenizes the data and saves its own format there";
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->path().extension() == ".arrow")
      return "Arrow files (" + it->path().filename().string() +
             ": a `datasets` save); unillm cannot read them. Point tokenized_path at a new or "
             "empty dir";
  return std::string("no ") + kTokenizedManifest +
         " (not a unillm tokenized dir, or a save that did not finish); point tokenized_path at a "
         "new or empty dir, or remove this one";
}

template <typename T>
T field(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.contains(key)) UNILLM_THROW(DataError, "[data] ", path, ": key '", key, "' missing");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    UNILLM_THROW(DataError, "[data] ", path, ": key '", key, "' has the wrong type (",
                 j.at(key).dump(), ")");
  }
}

TokenizedDataset load_split(const std::string& dir, const nlohmann::json& m, const char* split,
                            const std::string& manifest) {
  const auto& splits = m.at("splits");
  if (!splits.is_object() || !splits.contains(split))
    UNILLM_THROW(DataError, "[data] ", manifest, ": key 'splits.", split, "' missing");
  const auto& s = splits.at(split);
  const auto file = field<std::string>(s, "file", manifest);
  if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos ||
      file == "..")
    UNILLM_THROW(DataError, "[data] ", manifest, ": splits.", split, ".file '", file,
                 "' must be a file name in the dir");
  const std::string path = (fs::path(dir) / file).string();
  if (!fs::exists(path))
    UNILLM_THROW(DataError, "[data] ", path, ": missing (named by ", manifest, ")");
  const std::string bytes = io::read_file_bytes(path);
  TokenizedDataset d =
      decode_rows(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
  if (d.num_rows() != field<int64_t>(s, "rows", manifest) ||
      d.num_tokens() != field<int64_t>(s, "tokens", manifest))
    UNILLM_THROW(DataError, "[data] ", path, ": ", d.num_rows(), " rows and ", d.num_tokens(),
                 " tokens, the manifest says ", s.dump(), " (files from different saves?)");
  return d;
}

}  // namespace

void save_tokenized(const std::string& dir, const SavedRows& s) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) UNILLM_THROW(IoError, "[data] tokenized_path ", dir, ": cannot create: ", ec.message());
  io::write_file_atomic((fs::path(dir) / "train.rows").string(), encode_rows(s.train));
  io::write_file_atomic((fs::path(dir) / "eval.rows").string(), encode_rows(s.eval));
  const TokenizedIdentity& id = s.identity;
  nlohmann::ordered_json m;
  m["format"] = kFormat;
  m["version"] = kVersion;
  m["stage"] = id.stage;
  m["template"] = id.template_name;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(id.tokenizer));
  m["tokenizer"] = {{"fingerprint", hex}, {"vocab_size", id.vocab_size}};
  m["cutoff_len"] = id.cutoff_len;
  m["packing"] = id.packing;
  m["neat_packing"] = id.neat_packing;
  m["dataset"] = id.dataset;
  m["eval_dataset"] = id.eval_dataset;
  m["pad_id"] = s.pad_id;
  m["mask_label_id"] =
      s.mask_label_id ? nlohmann::ordered_json(*s.mask_label_id) : nlohmann::ordered_json();
  m["description"] = s.description;
  m["splits"] = {{"train", split_json("train.rows", s.train)},
                 {"eval", split_json("eval.rows", s.eval)}};
  io::write_file_atomic((fs::path(dir) / kTokenizedManifest).string(), m.dump(2) + "\n");
}

SavedRows load_tokenized(const std::string& dir) {
  const std::string manifest = (fs::path(dir) / kTokenizedManifest).string();
  if (!fs::exists(manifest))
    UNILLM_THROW(DataError, "[data] tokenized_path '", dir, "' holds ", what_else(dir));
  const nlohmann::json m = io::read_json_file(manifest);
  if (!m.is_object()) UNILLM_THROW(DataError, "[data] ", manifest, ": not a JSON object");
  if (field<std::string>(m, "format", manifest) != kFormat)
    UNILLM_THROW(DataError, "[data] ", manifest, ": format '", m.at("format").get<std::string>(),
                 "', expected '", kFormat, "'");
  if (const auto v = field<int64_t>(m, "version", manifest); v != kVersion)
    UNILLM_THROW(DataError, "[data] ", manifest, ": version ", v, ", this unillm reads version ",
                 kVersion);
  SavedRows s;
  TokenizedIdentity& id = s.identity;
  id.stage = field<std::string>(m, "stage", manifest);
  id.template_name = field<std::string>(m, "template", manifest);
  const auto tok = field<nlohmann::json>(m, "tokenizer", manifest);
  if (!tok.is_object())
    UNILLM_THROW(DataError, "[data] ", manifest, ": key 'tokenizer' is not an object");
  const auto hex = field<std::string>(tok, "fingerprint", manifest);
  size_t used = 0;
  try {
    id.tokenizer = std::stoull(hex, &used, 16);
  } catch (const std::exception&) {
    used = 0;
  }
  if (hex.size() != 16 || used != 16)
    UNILLM_THROW(DataError, "[data] ", manifest, ": tokenizer.fingerprint '", hex,
                 "' is not 16 hex digits");
  id.vocab_size = field<int64_t>(tok, "vocab_size", manifest);
  id.cutoff_len = field<int64_t>(m, "cutoff_len", manifest);
  id.packing = field<bool>(m, "packing", manifest);
  id.neat_packing = field<bool>(m, "neat_packing", manifest);
  id.dataset = field<std::vector<std::string>>(m, "dataset", manifest);
  id.eval_dataset = field<std::vector<std::string>>(m, "eval_dataset", manifest);
  s.pad_id = field<int32_t>(m, "pad_id", manifest);
  if (m.contains("mask_label_id") && !m.at("mask_label_id").is_null())
    s.mask_label_id = field<int32_t>(m, "mask_label_id", manifest);
  s.description = field<std::string>(m, "description", manifest);
  if (!m.contains("splits")) UNILLM_THROW(DataError, "[data] ", manifest, ": key 'splits' missing");
  s.train = load_split(dir, m, "train", manifest);
  s.eval = load_split(dir, m, "eval", manifest);
  if (s.eval.num_rows() > 0 && s.eval.group != s.train.group)
    UNILLM_THROW(DataError, "[data] ", dir, ": train and eval rows of different kinds (group ",
                 s.train.group, " and ", s.eval.group, ")");
  return s;
}

}  // namespace unillm::data
