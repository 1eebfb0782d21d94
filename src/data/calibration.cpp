// Calibration samples: a dataset_info name through the pretraining loader, or a file read as a
// pretraining dataset with the "text" column; packed blocks, evenly spaced.
#include "data/calibration.h"

#include <filesystem>

#include "core/error.h"
#include "data/pretrain.h"
#include "data/record_reader.h"

namespace unillm::data {

namespace fs = std::filesystem;

std::vector<std::vector<int32_t>> calibration_samples(const std::string& source, const std::string& dataset_dir,
                                                      int64_t nsamples, int64_t maxlen, const io::Tokenizer& tok) {
  if (nsamples <= 0 || maxlen <= 1)
    UNILLM_THROW(ConfigError, "[calibration] needs samples > 0 and a length > 1, got ", nsamples, " × ", maxlen);
  DataOptions opts;
  opts.dataset_dir = dataset_dir;
  opts.cutoff_len = maxlen;
  opts.packing = true;
  std::vector<std::string> texts;
  std::error_code ec;
  if (fs::is_regular_file(source, ec)) {
    DatasetAttr attr;
    attr.name = source;
    attr.files = {source};
    attr.file_type = fs::path(source).extension() == ".txt" ? "txt" : "json";
    for (auto& t : read_documents(attr, {}).texts) texts.push_back(std::move(t));
  } else {
    if (!fs::exists(fs::path(dataset_dir) / "dataset_info.json", ec))
      UNILLM_THROW(ConfigError, "[calibration] '", source, "' is neither a file nor a dataset (no ", dataset_dir,
                   "/dataset_info.json)");
    for (const auto& attr : resolve_datasets({source}, dataset_dir))
      for (auto& t : read_documents(attr, {}).texts) texts.push_back(std::move(t));
  }
  std::vector<std::vector<int32_t>> docs;
  int64_t tokens = 0;
  for (const auto& t : texts) {
    docs.push_back(tok.encode(t, pretrain_encode_options()));
    tokens += static_cast<int64_t>(docs.back().size()) + 1;
  }
  if (tokens < maxlen)
    UNILLM_THROW(ConfigError, "[calibration] '", source, "' holds ", tokens, " tokens, fewer than one sample of ",
                 maxlen, " (lower --calibration-len / export_quantization_maxlen)");
  const auto blocks = pack_documents(docs, maxlen, pretrain_eos_id(opts, tok), tok.adds_bos() ? tok.bos_id() : -1,
                                     static_cast<int64_t>(docs.size()));  // one group: only the tail is dropped
  const auto have = static_cast<int64_t>(blocks.size());
  if (have <= nsamples) return blocks;
  std::vector<std::vector<int32_t>> out;
  for (int64_t i = 0; i < nsamples; ++i) out.push_back(blocks[static_cast<size_t>(i * have / nsamples)]);
  return out;
}

}  // namespace unillm::data
