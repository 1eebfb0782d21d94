// Fuzz target for the dataset readers (src/data/record_reader, sft_reader, json_records, pretrain):
// the first byte picks the format, the rest is the file; strict, skipping and max_samples reads
// must agree and be sane, and only unillm::Error may be thrown. See docs/fuzzing.md.
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <optional>

#include "data/pretrain.h"
#include "data/sft_reader.h"
#include "fuzz_support.h"

namespace {

using namespace unillm;
using data::Role;

enum Mode { kTxt, kJsonPt, kAlpaca, kSharegpt, kOpenai, kSrcTgt, kPretrainTxt, kPretrainJson };

// The first input byte: 't' txt and 'j' json/jsonl (stage pt, read_documents), 'a' alpaca,
// 's' sharegpt, 'o' sharegpt with OpenAI-style tags, 'p' PaddleNLP {src,tgt} (stage sft), 'T' / 'J'
// load_pretrain_data on a txt (packing, val_size) / jsonl (no packing) dataset; others: mod 8.
Mode mode_of(uint8_t selector) {
  const char* kLetters = "tjasopTJ";
  const char* hit = selector ? std::strchr(kLetters, selector) : nullptr;
  return static_cast<Mode>(hit ? hit - kLetters : selector % 8);
}

data::DatasetAttr attr_for(Mode m, const std::string& file) {
  data::DatasetAttr a;
  a.name = "fuzz";
  a.files = {file};
  a.file_type = m == kTxt ? "txt" : "json";
  a.query_column = "query";
  a.columns.history = "history";
  a.columns.system = "system";
  a.columns.tools = "tools";
  if (m == kSharegpt || m == kOpenai) a.formatting = "sharegpt";
  if (m == kOpenai) {
    a.columns.messages = "messages";
    a.tags = {"role", "content", "user", "assistant", "observation", "function_call", "system"};
  }
  return a;
}

std::optional<data::DocumentSet> read_docs(const data::DatasetAttr& a, data::ReadOptions o) {
  try {
    return data::read_documents(a, o);
  } catch (const Error& e) {
    fuzz::expect_input_error(e);
    fuzz::require(!o.skip_bad_records, "skip_bad_records never throws");
    return std::nullopt;
  }
}

void check_documents(Mode m, const data::DatasetAttr& a) {
  auto strict = read_docs(a, {});
  auto skip = read_docs(a, {std::nullopt, true});
  auto one = read_docs(a, {1, true});
  fuzz::require(skip->rows >= static_cast<int64_t>(skip->texts.size()), "rows >= documents");
  fuzz::require(skip->skip_messages.size() <= static_cast<size_t>(skip->skipped_records),
                "skip messages <= skipped records");
  fuzz::require(one->rows <= 1, "max_samples 1 reads at most one row");
  for (const auto& t : skip->texts) {
    fuzz::require(!t.empty(), "no empty documents");
    if (m != kTxt) continue;
    fuzz::require(data::valid_utf8(t), "txt lines are UTF-8");
    for (size_t i = 0; i < t.size(); ++i)
      fuzz::require(data::line_break_at(t, i) == 0, "txt documents hold no line break");
  }
  if (strict)
    fuzz::require(strict->texts == skip->texts && skip->skipped_records == 0,
                  "a clean file reads the same when skipping");
}

void check_conversation(const data::Conversation& c) {
  const size_t n = c.messages.size();
  fuzz::require(n >= 2 && n % 2 == 0, "an even number of turns >= 2");
  for (size_t i = 0; i < n; ++i) {
    Role r = c.messages[i].role;
    fuzz::require(i % 2 == 0 ? (r == Role::kUser || r == Role::kObservation)
                             : (r == Role::kAssistant || r == Role::kFunction),
                  "turns alternate user|observation, assistant|function");
  }
  fuzz::require(!c.messages.back().content.empty(), "a non-empty response");
}

std::optional<data::ConversationSet> read_convs(Mode m, const data::DatasetAttr& a,
                                                data::ReadOptions o) {
  try {
    return m == kSrcTgt ? data::read_src_tgt_file(a.files[0], o) : data::read_conversations(a, o);
  } catch (const Error& e) {
    fuzz::expect_input_error(e);
    fuzz::require(!o.skip_bad_records, "skip_bad_records never throws");
    return std::nullopt;
  }
}

void check_conversations(Mode m, const data::DatasetAttr& a) {
  auto strict = read_convs(m, a, {});
  auto skip = read_convs(m, a, {std::nullopt, true});
  auto one = read_convs(m, a, {1, true});
  const int64_t got = static_cast<int64_t>(skip->conversations.size()) + skip->skipped_records;
  fuzz::require(got == skip->rows || got == skip->rows + 1, "every row converted or skipped");
  fuzz::require(one->rows <= 1, "max_samples 1 reads at most one row");
  for (const auto& c : skip->conversations) check_conversation(c);
  if (strict)
    fuzz::require(
        strict->conversations.size() == skip->conversations.size() && skip->skipped_records == 0,
        "a clean file reads the same when skipping");
}

// load_pretrain_data over dataset "fuzz" of a dataset_info.json naming the file.
void check_pretrain(Mode m, const std::string& dir) {
  static const auto tok = io::Tokenizer::from_tokenizer_json(fuzz::tiny_tokenizer_json());
  data::DataOptions o;
  o.dataset = {m == kPretrainTxt ? "fuzz_txt" : "fuzz"};
  o.dataset_dir = dir;
  o.cutoff_len = 8;
  o.packing = m == kPretrainTxt;
  o.val_size = m == kPretrainTxt ? 0.25 : 0.0;
  o.preprocessing_batch_size = 3;
  try {
    auto [train, eval] = data::load_pretrain_data(o, *tok);
    fuzz::require(train.num_rows() > 0, "at least one training row");
    for (const auto* set : {&train, &eval})
      for (const auto& row : set->rows) {
        fuzz::require(!row.empty() && static_cast<int64_t>(row.size()) <= o.cutoff_len,
                      "rows of 1..cutoff_len ids");
        if (o.packing) fuzz::require(static_cast<int64_t>(row.size()) == o.cutoff_len, "blocks");
        for (int32_t id : row) fuzz::require(id >= 0 && id < tok->vocab_size(), "ids in vocab");
      }
  } catch (const Error& e) {
    fuzz::expect_input_error(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  omp_set_num_threads(1);  // tokenisation runs in an OpenMP loop; one thread keeps runs cheap
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1 << 16)) return 0;  // the readers are linear; seeds are < 32 KB
  const Mode m = mode_of(data[0]);
  const std::string dir = fuzz::scratch().path();
  static const bool info_written = [&] {
    fuzz::write_bytes(
        dir + "/dataset_info.json",
        R"({"fuzz": {"file_name": "records.jsonl"}, "fuzz_txt": {"file_name": "records.txt"}})");
    return true;
  }();
  (void)info_written;
  const bool txt = m == kTxt || m == kPretrainTxt;
  const std::string file = dir + (txt ? "/records.txt" : "/records.jsonl");
  fuzz::write_bytes(file, fuzz::bytes_of(data + 1, size - 1));
  if (m == kTxt || m == kJsonPt) check_documents(m, attr_for(m, file));
  if (m == kAlpaca || m == kSharegpt || m == kOpenai || m == kSrcTgt)
    check_conversations(m, attr_for(m, file));
  if (m == kPretrainTxt || m == kPretrainJson) check_pretrain(m, dir);
  return 0;
}
