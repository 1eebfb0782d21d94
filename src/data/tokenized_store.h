// unillm's own on-disk form of tokenized training rows, for LLaMA-Factory's `tokenized_path`
// (which saves a Hugging Face `datasets` DatasetDict in Arrow; unillm cannot write that, so a
// directory of this form is what tokenized_path holds here; train/tokenized_path.h has the flow).
//
// DIR/unillm_tokenized.json   the manifest: format "unillm-tokenized", version 1, what the rows
//                             were built with (TokenizedIdentity), the batch settings the stage
//                             chose (pad_id, mask_label_id), the log's description, and per split
//                             {file, rows, tokens}. Written last, so a dir without it is an
//                             unfinished save.
// DIR/train.rows, eval.rows   one split each (the eval split: LLaMA-Factory's "validation" from
//                             val_size, or eval_dataset), little-endian:
//   "UNILLMRW" u32 version u32 flags (1 labels, 2 position_ids, 4 segment_ids, 8 tags)
//   i64 rows, group, documents, skipped_records, tokens
//   i64 length[rows]   i32 ids[tokens]   then, per flag, i32 labels / positions / segments
//   [tokens] and u8 tags[rows / group]   u64 FNV-1a of every byte before it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/pretrain.h"

namespace unillm::data {

inline constexpr const char* kTokenizedManifest = "unillm_tokenized.json";

// What the rows were built with, recorded in the manifest and compared when they are loaded.
struct TokenizedIdentity {
  std::string stage;          // pt | sft | rm | dpo | kto
  std::string template_name;  // the template the rows were rendered with ("" for none)
  uint64_t tokenizer = 0;     // tokenizer_fingerprint (data/token_corpus.h)
  int64_t vocab_size = 0;
  int64_t cutoff_len = 0;
  bool packing = false, neat_packing = false;
  std::vector<std::string> dataset, eval_dataset;
};

struct SavedRows {
  TokenizedIdentity identity;
  TokenizedDataset train, eval;  // loaded into memory (no RowSource)
  int32_t pad_id = 0;
  std::optional<int32_t> mask_label_id;
  std::string description;
};

// LLaMA-Factory's has_tokenized_data: dir is a directory with at least one entry.
bool has_tokenized_data(const std::string& dir);

// Writes s into dir (created when absent): the two .rows files, then the manifest, each atomically.
// Throws IoError naming the file.
void save_tokenized(const std::string& dir, const SavedRows& s);

// Reads dir back. Throws DataError naming the file and what is wrong: no manifest (with what the
// dir holds instead: a `datasets` save, an unfinished save), another format or version, a missing
// or mistyped manifest key, a .rows file that is truncated, corrupted or disagrees with the
// manifest.
SavedRows load_tokenized(const std::string& dir);

// The .rows bytes of one split, and back. decode_rows throws DataError ("[data] SOURCE: ...") on
// any malformed input: bad magic or version, unknown flags, counts that do not add up or exceed
// the bytes, a negative length or id, a checksum mismatch, trailing bytes.
std::string encode_rows(const TokenizedDataset& d);
TokenizedDataset decode_rows(const uint8_t* bytes, size_t size, const std::string& source);

}  // namespace unillm::data
