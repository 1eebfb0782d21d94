// The supervised encoder against goldens from tools/make_template_goldens.py (LLaMA-Factory's
// _encode_data_example re-implemented in Python), infer_seqlen by hand, and the invariants: labels
// mask exactly the prompt tokens, lengths never pass cutoff_len.
#include "data/sft_encode.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/error.h"

namespace unillm::data::testing {

// Defined in template_test.cpp.
const nlohmann::json& template_goldens();
const io::Tokenizer& golden_tokenizer(const std::string& key);
Conversation golden_conversation(const nlohmann::json& c);
TemplateOptions golden_options(const nlohmann::json& c);

namespace {

using nlohmann::json;

TEST(InferSeqlen, MatchesLlamaFactoryBranches) {
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(infer_seqlen(10, 5, 100), (P{10, 5}));    // both fit
  EXPECT_EQ(infer_seqlen(100, 10, 50), (P{40, 10}));  // target < half: source truncated
  EXPECT_EQ(infer_seqlen(10, 100, 50), (P{10, 40}));  // source < half: target truncated
  EXPECT_EQ(infer_seqlen(60, 40, 50), (P{30, 20}));   // both: int(50 * 0.4) = 20
  EXPECT_EQ(infer_seqlen(7, 3, 4), (P{3, 1}));        // int(4 * 0.3) = 1
  EXPECT_EQ(infer_seqlen(0, 9, 4), (P{0, 4}));
}

TEST(EncodeSupervised, MatchesGoldens) {
  int checked = 0;
  for (const json& c : template_goldens()["supervised"]) {
    SCOPED_TRACE(c["template"].get<std::string>() + " cutoff " + c["cutoff_len"].dump() +
                 " train_on_prompt " + c["train_on_prompt"].dump() + " mask_history " +
                 c["mask_history"].dump());
    auto t =
        ChatTemplate::by_name(c["template"], golden_tokenizer(c["tokenizer"]), golden_options(c));
    SupervisedOptions o;
    o.cutoff_len = c["cutoff_len"];
    o.train_on_prompt = c["train_on_prompt"];
    o.mask_history = c["mask_history"];
    SupervisedExample ex = encode_supervised(golden_conversation(c), *t, o);
    EXPECT_EQ(ex.input_ids, c["input_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(ex.labels, c["labels"].get<std::vector<int32_t>>());
    EXPECT_LE(static_cast<int64_t>(ex.input_ids.size()), o.cutoff_len);
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

// Without truncation, every template golden conversation encodes to its pairs laid end to end,
// with labels -100 on exactly the prompt tokens and equal to the ids on the response tokens
// (efficient_eos: each later prompt starts with a scored EOS, and a final EOS is appended).
TEST(EncodeSupervised, MasksCoverExactlyThePrompts) {
  for (const json& c : template_goldens()["templates"]) {
    if (c.value("discard_history_thought", false)) continue;
    SCOPED_TRACE(c["template"].get<std::string>() + " / " + c["tokenizer"].get<std::string>());
    auto t =
        ChatTemplate::by_name(c["template"], golden_tokenizer(c["tokenizer"]), golden_options(c));
    SupervisedExample ex = encode_supervised(golden_conversation(c), *t, {});
    std::vector<int32_t> ids, labels;
    for (size_t k = 0; k < c["pairs"].size(); ++k) {
      auto prompt = c["pairs"][k][0].get<std::vector<int32_t>>();
      auto response = c["pairs"][k][1].get<std::vector<int32_t>>();
      ids.insert(ids.end(), prompt.begin(), prompt.end());
      ids.insert(ids.end(), response.begin(), response.end());
      std::vector<int32_t> masked(prompt.size(), kIgnoreIndex);
      if (t->efficient_eos() && k > 0 && !masked.empty()) masked[0] = t->eos_id();
      labels.insert(labels.end(), masked.begin(), masked.end());
      labels.insert(labels.end(), response.begin(), response.end());
    }
    if (t->efficient_eos()) {
      ids.push_back(t->eos_id());
      labels.push_back(t->eos_id());
    }
    EXPECT_EQ(ex.input_ids, ids);
    EXPECT_EQ(ex.labels, labels);
  }
}

// For every cutoff_len: equal lengths, never longer than cutoff_len, every label either -100 or
// the id at its position (or EOS for efficient_eos), and mask_history scores a suffix only.
TEST(EncodeSupervised, TruncationInvariantsOverAllCutoffs) {
  for (const char* name : {"llama2", "solar", "default"}) {
    auto t = ChatTemplate::by_name(name, golden_tokenizer("llama2"));
    const json& c = template_goldens()["supervised"][0];  // llama2, three turns, with system
    const Conversation conv = golden_conversation(c);
    for (int64_t cutoff = 1; cutoff <= 130; ++cutoff) {
      for (bool mask_history : {false, true}) {
        SupervisedOptions o;
        o.cutoff_len = cutoff;
        o.mask_history = mask_history;
        SupervisedExample ex = encode_supervised(conv, *t, o);
        ASSERT_EQ(ex.input_ids.size(), ex.labels.size()) << name << " " << cutoff;
        ASSERT_LE(static_cast<int64_t>(ex.input_ids.size()), cutoff) << name;
        for (size_t i = 0; i < ex.labels.size(); ++i)
          ASSERT_TRUE(ex.labels[i] == kIgnoreIndex || ex.labels[i] == ex.input_ids[i] ||
                      (t->efficient_eos() && ex.labels[i] == t->eos_id()))
              << name << " cutoff " << cutoff << " position " << i;
      }
    }
  }
}

TEST(EncodeSupervised, Errors) {
  auto solar = ChatTemplate::by_name("solar", golden_tokenizer("llama2"));
  Conversation c;
  c.messages = {{Role::kUser, "q"}, {Role::kAssistant, "a"}};
  c.source = "train.json line 3";
  SupervisedOptions o;
  o.train_on_prompt = true;
  EXPECT_THROW(encode_supervised(c, *solar, o), ConfigError);  // LLaMA-Factory refuses it too
  c.messages.pop_back();
  try {
    encode_supervised(c, *solar, {});
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("train.json line 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace unillm::data::testing
