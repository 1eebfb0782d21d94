// Pairwise (rm/dpo) encoding and loading: encode_oneturn against the multiturn pieces, the
// chosen/rejected rows of LLaMA-Factory's PairwiseDatasetProcessor on hand-built expectations
// (llama2 tokenizer, each template slot tokenised on its own as LLaMA-Factory does), its
// truncation rule, load_pairwise_data (pairs side by side, val_size split by examples, packing
// refused) and the bundled data/dpo_en_demo.json.
#include "data/pairwise.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "data/error.h"
#include "data/sft_encode.h"
#include "data/split.h"

namespace unillm::data::testing {

// Defined in template_test.cpp.
const io::Tokenizer& golden_tokenizer(const std::string& key);

namespace {

using Ids = std::vector<int32_t>;

std::string pref_dir() { return std::string(UNILLM_SOURCE_DIR) + "/tests/data/pref"; }

const io::Tokenizer& llama2() { return golden_tokenizer("llama2"); }

Ids enc(const std::string& text) {
  io::EncodeOptions o;
  o.add_special_tokens = false;
  return llama2().encode(text, o);
}

Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Ids masked(size_t n, const Ids& response) {
  Ids out(n, kIgnoreIndex);
  out.insert(out.end(), response.begin(), response.end());
  return out;
}

PreferenceExample example(std::vector<Message> prompt, const std::string& chosen,
                          const std::string& rejected, const std::string& system = "") {
  PreferenceExample ex;
  ex.prompt = std::move(prompt);
  ex.chosen = {Role::kAssistant, chosen};
  ex.rejected = {Role::kAssistant, rejected};
  ex.system = system;
  ex.source = "test line 1";
  return ex;
}

SftOptions pref_options(const std::string& dataset, const std::string& stage = "dpo") {
  SftOptions o;
  o.stage = stage;
  o.data.dataset = {dataset};
  o.data.dataset_dir = pref_dir();
  o.data.packing = false;
  return o;
}

TEST(EncodeOneturn, EqualsTheMultiturnPiecesLaidEndToEnd) {
  const std::vector<Message> msgs = {{Role::kUser, "Hi there"},
                                     {Role::kAssistant, "Hello."},
                                     {Role::kUser, "Count to three"},
                                     {Role::kAssistant, "1 2 3"}};
  for (const std::string name : {"llama2", "alpaca", "default", "vicuna", "solar", "empty"}) {
    SCOPED_TRACE(name);
    auto t = ChatTemplate::by_name(name, llama2());
    for (const std::string system : {"", "Be brief."}) {
      const auto turns = t->encode_multiturn(msgs, system);
      const EncodedTurn one = t->encode_oneturn(msgs, system);
      EXPECT_EQ(one.prompt, cat({turns[0].prompt, turns[0].response, turns[1].prompt}));
      EXPECT_EQ(one.response, turns[1].response);
      // The prompt part is what generation would be prompted with.
      EXPECT_EQ(one.prompt, t->encode_prompt({msgs.begin(), msgs.end() - 1}, system));
    }
  }
  // Reasoning template: earlier thoughts are dropped as with discard_history_thought.
  const io::Tokenizer& qwen = golden_tokenizer("qwen2_think");
  auto q = ChatTemplate::by_name("qwen3", qwen);
  std::vector<Message> think = msgs;
  think[1].content = "<think>\nhmm\n</think>\n\nHello.";
  const auto turns = q->encode_multiturn(think, "", /*discard_history_thought=*/true);
  const EncodedTurn one = q->encode_oneturn(think, "");
  EXPECT_EQ(one.prompt, cat({turns[0].prompt, turns[0].response, turns[1].prompt}));
  EXPECT_EQ(one.response, turns[1].response);
}

// llama2: user = [BOS] "[INST] {{content}} [/INST]" (the system glued before the first user text
// as "<<SYS>>\n…\n<</SYS>>\n\n"), assistant = "{{content}}" [EOS]; each slot tokenised alone.
TEST(Pairwise, Llama2RowsAreTheLlamaFactoryRule) {
  auto t = ChatTemplate::by_name("llama2", llama2());
  const int32_t bos = 1, eos = 2;  // Llama 2's <s>, </s>
  ASSERT_EQ(llama2().bos_id(), bos);
  ASSERT_EQ(t->eos_id(), eos);
  PreferenceExample ex = example(
      {{Role::kUser, "What is 2+2?"}, {Role::kAssistant, "Four."}, {Role::kUser, "And 3+3?"}},
      "Six.", "Seven, I think.", "Be exact.");
  PairwiseExample p = encode_pairwise(ex, *t, 2048);
  const Ids prompt = cat({{bos},
                          enc("[INST] <<SYS>>\nBe exact.\n<</SYS>>\n\nWhat is 2+2? [/INST]"),
                          enc("Four."),
                          {eos},
                          {bos},
                          enc("[INST] And 3+3? [/INST]")});
  const Ids chosen = cat({enc("Six."), {eos}}), rejected = cat({enc("Seven, I think."), {eos}});
  EXPECT_EQ(p.chosen_ids, cat({prompt, chosen}));
  EXPECT_EQ(p.chosen_labels, masked(prompt.size(), chosen));
  EXPECT_EQ(p.rejected_ids, cat({prompt, rejected}));
  EXPECT_EQ(p.rejected_labels, masked(prompt.size(), rejected));
  // Hand-checked ids of the last pieces (Llama 2's SentencePiece vocabulary).
  EXPECT_EQ(enc("Six."), (Ids{18372, 29889}));
  EXPECT_EQ(enc("[INST] And 3+3? [/INST]"), (Ids{518, 25580, 29962, 1126, 29871, 29941, 29974,
                                                 29941, 29973, 518, 29914, 25580, 29962}));
}

// efficient_eos (solar): the assistant format has no EOS; the processor appends it to both.
TEST(Pairwise, EfficientEosAppendsEosToBothResponses) {
  auto t = ChatTemplate::by_name("solar", llama2());
  ASSERT_TRUE(t->efficient_eos());
  PairwiseExample p =
      encode_pairwise(example({{Role::kUser, "Hi"}}, "Hello!", "Go away."), *t, 2048);
  const Ids prompt = enc("### User:\nHi\n\n### Assistant:\n");
  const Ids chosen = cat({enc("Hello!"), {t->eos_id()}});
  const Ids rejected = cat({enc("Go away."), {t->eos_id()}});
  EXPECT_EQ(p.chosen_ids, cat({prompt, chosen}));
  EXPECT_EQ(p.chosen_labels, masked(prompt.size(), chosen));
  EXPECT_EQ(p.rejected_ids, cat({prompt, rejected}));
  EXPECT_EQ(p.rejected_labels, masked(prompt.size(), rejected));
}

// infer_seqlen(|prompt|, max(|chosen|, |rejected|), cutoff): the prompt is cut to source_len,
// both responses to target_len; the shorter response is not padded.
TEST(Pairwise, TruncationKeepsTheResponsesFirst) {
  auto t = ChatTemplate::by_name("empty", llama2());  // user = content, assistant = content
  const std::string user = "one two three four five six seven eight nine ten";
  const Ids prompt = enc(user);
  const Ids chosen = enc("alpha beta gamma delta epsilon zeta");
  const Ids rejected = enc("omega psi");
  ASSERT_GT(chosen.size(), rejected.size() + 2);
  PreferenceExample ex =
      example({{Role::kUser, user}}, "alpha beta gamma delta epsilon zeta", "omega psi");
  const int64_t P = prompt.size(), C = chosen.size(), R = rejected.size();
  for (int64_t cutoff : {int64_t{4}, C, C + 3, 2 * C + 1, P + C}) {
    SCOPED_TRACE(cutoff);
    const auto [s, tl] = infer_seqlen(P, C, cutoff);
    PairwiseExample p = encode_pairwise(ex, *t, cutoff);
    const Ids ps(prompt.begin(), prompt.begin() + s);
    const Ids cs(chosen.begin(), chosen.begin() + tl);
    const Ids rs(rejected.begin(), rejected.begin() + std::min(tl, R));
    EXPECT_EQ(p.chosen_ids, cat({ps, cs}));
    EXPECT_EQ(p.chosen_labels, masked(s, cs));
    EXPECT_EQ(p.rejected_ids, cat({ps, rs}));
    EXPECT_EQ(p.rejected_labels, masked(s, rs));
    EXPECT_LE(static_cast<int64_t>(p.chosen_ids.size()), cutoff);
  }
  // A worked case: P = 10 prompt tokens, C = 8 (chosen), cutoff 12: 2C ≥ 12 and 2P ≥ 12, so
  // target = int(12 · 8/18) = 5, source = 12 − 5 = 7.
  EXPECT_EQ(infer_seqlen(10, 8, 12), (std::pair<int64_t, int64_t>{7, 5}));
}

TEST(Pairwise, TemplateErrorsNameTheRecord) {
  auto t = ChatTemplate::by_name("llama2", llama2());
  PreferenceExample ex =
      example({{Role::kUser, "a"}, {Role::kUser, "b"}, {Role::kUser, "c"}}, "x", "y");
  try {
    encode_pairwise(ex, *t, 64);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[data] test line 1: [template] message 2", 0), 0u)
        << e.what();
  }
}

TEST(PairwiseData, LoadsPairsSideBySide) {
  auto t = ChatTemplate::by_name("llama2", llama2());
  auto [train, eval] = load_pairwise_data(pref_options("sharegpt_pairs"), llama2(), *t);
  EXPECT_EQ(train.group, 2);
  EXPECT_EQ(train.num_rows(), 10);
  EXPECT_EQ(train.num_examples(), 5);
  EXPECT_EQ(train.documents, 5);
  EXPECT_EQ(eval.num_rows(), 0);
  PreferenceSet set =
      read_preferences(resolve_datasets({"sharegpt_pairs"}, pref_dir(), "dpo").at(0), {});
  for (int64_t e = 0; e < 5; ++e) {
    PairwiseExample p = encode_pairwise(set.examples[e], *t, 2048);
    EXPECT_EQ(train.rows[2 * e], p.chosen_ids);
    EXPECT_EQ(train.labels[2 * e], p.chosen_labels);
    EXPECT_EQ(train.rows[2 * e + 1], p.rejected_ids);
    EXPECT_EQ(train.labels[2 * e + 1], p.rejected_labels);
  }
  // Both formattings, datasets in order; stage rm reads the same.
  SftOptions o = pref_options("alpaca_pairs", "rm");
  o.data.dataset = {"alpaca_pairs", "sharegpt_pairs"};
  o.data.max_samples = 3;  // per dataset
  auto [both, none] = load_pairwise_data(o, llama2(), *t);
  EXPECT_EQ(both.num_examples(), 6);
  EXPECT_EQ(both.rows[6], train.rows[0]);  // sharegpt_pairs' first chosen row
}

TEST(PairwiseData, ValSizeSplitsByExamples) {
  auto t = ChatTemplate::by_name("llama2", llama2());
  auto [all, none] = load_pairwise_data(pref_options("sharegpt_pairs"), llama2(), *t);
  SftOptions o = pref_options("sharegpt_pairs");
  o.data.val_size = 0.3;  // ceil(0.3 · 5) = 2 examples
  o.data.seed = 7;
  auto [train, eval] = load_pairwise_data(o, llama2(), *t);
  ASSERT_EQ(eval.num_examples(), 2);
  ASSERT_EQ(train.num_examples(), 3);
  EXPECT_EQ(eval.group, 2);
  EXPECT_EQ(train.group, 2);
  EXPECT_EQ(train.documents, 5);
  const std::vector<int64_t> perm = numpy_permutation(7, 5);  // HF train_test_split's order
  for (int64_t i = 0; i < 5; ++i) {
    const TokenizedDataset& part = i < 2 ? eval : train;
    const int64_t j = i < 2 ? i : i - 2;
    for (int64_t k = 0; k < 2; ++k) {
      EXPECT_EQ(part.rows[2 * j + k], all.rows[2 * perm[i] + k]);
      EXPECT_EQ(part.labels[2 * j + k], all.labels[2 * perm[i] + k]);
    }
  }
  o.data.val_size = 2;  // a count of examples
  auto [train2, eval2] = load_pairwise_data(o, llama2(), *t);
  EXPECT_EQ(eval2.num_examples(), 2);
  EXPECT_EQ(eval2.rows, eval.rows);
}

TEST(PairwiseData, RefusesPackingAndOtherStages) {
  auto t = ChatTemplate::by_name("llama2", llama2());
  auto error_of = [&](const SftOptions& o) {
    try {
      load_pairwise_data(o, llama2(), *t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SftOptions o = pref_options("sharegpt_pairs");
  o.data.packing = true;
  EXPECT_NE(error_of(o).find("packing is not applicable to stage dpo"), std::string::npos);
  o.data.packing = false;
  o.neat_packing = true;
  EXPECT_NE(error_of(o).find("neat_packing is not applicable to stage dpo"), std::string::npos);
  EXPECT_NE(error_of(pref_options("sharegpt_pairs", "sft")).find("stages rm and dpo"),
            std::string::npos);
  EXPECT_NE(error_of(pref_options("not_ranking")).find("is not a ranking dataset"),
            std::string::npos);
}

TEST(PairwiseData, LoadsTheBundledDpoDemo) {
  auto t = ChatTemplate::by_name("llama2", llama2());
  SftOptions o;
  o.stage = "dpo";
  o.data.dataset = {"dpo_en_demo"};
  o.data.dataset_dir = std::string(UNILLM_SOURCE_DIR) + "/data";
  o.data.packing = false;
  o.data.cutoff_len = 1024;
  auto [train, eval] = load_pairwise_data(o, llama2(), *t);
  EXPECT_EQ(train.num_examples(), 300);
  EXPECT_EQ(train.num_rows(), 600);
  EXPECT_EQ(train.documents, 300);
  EXPECT_EQ(train.skipped_records, 0);
  for (int64_t r = 0; r < train.num_rows(); ++r) {
    const Ids& ids = train.rows[r];
    const Ids& lab = train.labels[r];
    ASSERT_EQ(ids.size(), lab.size());
    ASSERT_LE(static_cast<int64_t>(ids.size()), o.data.cutoff_len);
    size_t k = 0;
    while (k < lab.size() && lab[k] == kIgnoreIndex) ++k;
    ASSERT_GT(k, 0u) << "row " << r;          // a masked prompt
    ASSERT_LT(k, lab.size()) << "row " << r;  // a scored response
    EXPECT_TRUE(std::equal(lab.begin() + k, lab.end(), ids.begin() + k)) << "row " << r;
    EXPECT_EQ(ids[0], 1);  // BOS
    if (r % 2 == 1) {      // chosen and rejected share the prompt
      EXPECT_TRUE(std::equal(ids.begin(), ids.begin() + k, train.rows[r - 1].begin()));
    }
  }
}

}  // namespace
}  // namespace unillm::data::testing
