// KTO feedback data: dataset_info's kto_tag column for stage kto, the alpaca / sharegpt feedback
// reader (bool kto_tag, bad records naming file and line), LLaMA-Factory's
// FeedbackDatasetProcessor (target and KL rows, each with its own infer_seqlen cut; the KL
// response taken from the previous example of the preprocessing batch), tags through the
// val_size split and the loader, and the bundled data/kto_en_demo.json.
#include "data/feedback.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "data/batch_loader.h"
#include "data/error.h"
#include "data/sft_encode.h"
#include "data/split.h"

namespace unillm::data::testing {

// Defined in template_test.cpp.
const io::Tokenizer& golden_tokenizer(const std::string& key);

namespace {

using Ids = std::vector<int32_t>;

std::string kto_dir() { return std::string(UNILLM_SOURCE_DIR) + "/tests/data/kto"; }

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

std::string error_of_resolve(const std::string& name, const std::string& stage) {
  try {
    resolve_datasets({name}, kto_dir(), stage);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

DatasetAttr kto_attr(const std::string& name) {
  return resolve_datasets({name}, kto_dir(), "kto").at(0);
}

SftOptions kto_options(const std::string& dataset) {
  SftOptions o;
  o.stage = "kto";
  o.data.dataset = {dataset};
  o.data.dataset_dir = kto_dir();
  o.data.packing = false;
  return o;
}

FeedbackExample example(std::vector<Message> prompt, const std::string& response,
                        const std::string& system = "") {
  FeedbackExample ex;
  ex.prompt = std::move(prompt);
  ex.response = {Role::kAssistant, response};
  ex.system = system;
  ex.source = "test line 1";
  return ex;
}

TEST(DatasetInfoKto, KtoTagIsRequiredByKtoAndRefusedElsewhere) {
  DatasetAttr a = kto_attr("sharegpt_kto");
  EXPECT_EQ(a.columns.kto_tag, "label");
  EXPECT_EQ(a.formatting, "sharegpt");
  EXPECT_FALSE(a.ranking);
  EXPECT_EQ(kto_attr("alpaca_kto").columns.kto_tag, "kto_tag");
  const std::string info = kto_dir() + "/dataset_info.json";
  EXPECT_EQ(error_of_resolve("no_tag", "kto"),
            "[data] " + info +
                " dataset 'no_tag': stage kto needs columns.kto_tag (a bool column: true = "
                "desirable response); without it LLaMA-Factory drops every example");
  EXPECT_NE(error_of_resolve("ranking_kto", "kto").find("not applicable to stage kto"),
            std::string::npos);
  for (const std::string stage : {"sft", "dpo", "rm"}) {
    const std::string name = stage == "sft" ? "sharegpt_kto" : "ranking_kto";
    EXPECT_EQ(error_of_resolve(name, stage),
              "[data] " + info + " dataset '" + name +
                  "': kto_tag is only used by stage kto (not stage " + stage + ")");
  }
  // The bundled demo is registered as LLaMA-Factory registers it.
  DatasetAttr demo =
      resolve_datasets({"kto_en_demo"}, std::string(UNILLM_SOURCE_DIR) + "/data", "kto").at(0);
  EXPECT_EQ(demo.columns.messages, "messages");
  EXPECT_EQ(demo.columns.kto_tag, "label");
  EXPECT_EQ(demo.tags.role_tag, "role");
  EXPECT_EQ(demo.tags.assistant_tag, "assistant");
  EXPECT_FALSE(demo.tags.system_tag.has_value());  // a tags map names every tag
}

TEST(FeedbackReader, SharegptAndAlpacaFollowTheConverter) {
  FeedbackSet s = read_feedback(kto_attr("sharegpt_kto"), {});
  ASSERT_EQ(s.examples.size(), 7u);
  EXPECT_EQ(s.rows, 7);
  const std::vector<bool> want_tags = {true, false, true, false, true, true, false};
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(s.examples[i].desirable, want_tags[i]) << i;
    EXPECT_EQ(s.examples[i].response.role, Role::kAssistant);
    EXPECT_EQ(s.examples[i].source,
              kto_dir() + "/sharegpt_kto.jsonl line " + std::to_string(i + 1));
  }
  EXPECT_EQ(s.examples[0].response.content, "alpha answer");
  ASSERT_EQ(s.examples[0].prompt.size(), 1u);
  EXPECT_EQ(s.examples[0].prompt[0].content, "zero question");
  EXPECT_EQ(s.examples[2].system, "Be kind.");   // the leading system message
  EXPECT_EQ(s.examples[4].system, "Be brief.");  // the system column
  ASSERT_EQ(s.examples[3].prompt.size(), 3u);    // every earlier turn is prompt
  EXPECT_EQ(s.examples[3].prompt[1].content, "earlier reply");
  EXPECT_EQ(s.examples[3].response.content, "delta answer");

  FeedbackSet a = read_feedback(kto_attr("alpaca_kto"), {});
  ASSERT_EQ(a.examples.size(), 3u);
  EXPECT_TRUE(a.examples[0].desirable);
  EXPECT_FALSE(a.examples[1].desirable);
  EXPECT_EQ(a.examples[1].prompt.at(0).content, "Add the numbers.\n2 and 3");
  EXPECT_EQ(a.examples[1].response.content, "Six.");
  EXPECT_EQ(a.examples[1].system, "You are a calculator.");
  ASSERT_EQ(a.examples[2].prompt.size(), 3u);  // history pair + the instruction
  EXPECT_EQ(a.examples[2].prompt[1].content, "Two.");
}

TEST(FeedbackReader, KtoTagMustBeABoolNamingFileAndLine) {
  const std::string file = kto_dir() + "/bad_tags.jsonl";
  try {
    read_feedback(kto_attr("bad_tags"), {});
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "[data] " + file +
                                         " line 2: key 'label' is not a bool (got string), "
                                         "expected true or false");
  }
  FeedbackSet s = read_feedback(kto_attr("bad_tags"), {std::nullopt, /*skip_bad_records=*/true});
  ASSERT_EQ(s.examples.size(), 2u);
  EXPECT_EQ(s.examples[0].response.content, "fine");
  EXPECT_FALSE(s.examples[1].desirable);
  EXPECT_EQ(s.rows, 7);
  EXPECT_EQ(s.skipped_records, 5);
  ASSERT_EQ(s.skip_messages.size(), 5u);
  EXPECT_EQ(s.skip_messages[1], "[data] " + file +
                                    " line 3: key 'label' is not a bool (got number), expected "
                                    "true or false");
  EXPECT_EQ(s.skip_messages[2], "[data] " + file +
                                    " line 4: key 'label' is not a bool (got null), expected "
                                    "true or false");
  EXPECT_EQ(s.skip_messages[3],
            "[data] " + file + " line 5: key 'label' missing (the kto_tag: true or false)");
  EXPECT_EQ(s.skip_messages[4], "[data] " + file +
                                    " line 7: sharegpt conversation has 1 turns, expected an "
                                    "even number ending with an assistant turn");
  // max_samples counts records, bad ones included.
  FeedbackSet two = read_feedback(kto_attr("bad_tags"), {2, true});
  EXPECT_EQ(two.rows, 2);
  EXPECT_EQ(two.examples.size(), 1u);
}

// llama2: target = prompt + response, KL = the same prompt + the other response; each with EOS.
TEST(FeedbackEncode, TargetAndKlRowsShareThePrompt) {
  auto t = ChatTemplate::by_name("llama2", llama2());
  const int32_t bos = 1, eos = 2;
  FeedbackExample ex = example(
      {{Role::kUser, "What is 2+2?"}, {Role::kAssistant, "Four."}, {Role::kUser, "And 3+3?"}},
      "Six.", "Be exact.");
  FeedbackRows r = encode_feedback(ex, {Role::kAssistant, "Seven, I think."}, *t, 2048);
  const Ids prompt = cat({{bos},
                          enc("[INST] <<SYS>>\nBe exact.\n<</SYS>>\n\nWhat is 2+2? [/INST]"),
                          enc("Four."),
                          {eos},
                          {bos},
                          enc("[INST] And 3+3? [/INST]")});
  const Ids target = cat({enc("Six."), {eos}}), kl = cat({enc("Seven, I think."), {eos}});
  EXPECT_EQ(r.target_ids, cat({prompt, target}));
  EXPECT_EQ(r.target_labels, masked(prompt.size(), target));
  EXPECT_EQ(r.kl_ids, cat({prompt, kl}));
  EXPECT_EQ(r.kl_labels, masked(prompt.size(), kl));
  // efficient_eos (solar): EOS appended to both responses by the processor.
  auto solar = ChatTemplate::by_name("solar", llama2());
  ASSERT_TRUE(solar->efficient_eos());
  FeedbackRows s = encode_feedback(example({{Role::kUser, "Hi"}}, "Hello!"),
                                   {Role::kAssistant, "Go away."}, *solar, 2048);
  const Ids sp = enc("### User:\nHi\n\n### Assistant:\n");
  EXPECT_EQ(s.target_ids, cat({sp, enc("Hello!"), {solar->eos_id()}}));
  EXPECT_EQ(s.kl_labels, masked(sp.size(), cat({enc("Go away."), {solar->eos_id()}})));
}

// Unlike the pairwise rule (one cut from the longer response), each row has its own cut.
TEST(FeedbackEncode, EachRowHasItsOwnInferSeqlenCut) {
  auto t = ChatTemplate::by_name("empty", llama2());  // user = content, assistant = content
  const std::string user = "one two three four five six seven eight nine ten";
  const Ids prompt = enc(user);
  const Ids longer = enc("alpha beta gamma delta epsilon zeta"), shorter = enc("omega psi");
  const int64_t P = prompt.size(), L = longer.size(), S = shorter.size();
  const FeedbackExample ex = example({{Role::kUser, user}}, "alpha beta gamma delta epsilon zeta");
  for (int64_t cutoff : {int64_t{4}, L, L + 3, 2 * L + 1, P + L}) {
    SCOPED_TRACE(cutoff);
    FeedbackRows r = encode_feedback(ex, {Role::kAssistant, "omega psi"}, *t, cutoff);
    const auto [ts, tt] = infer_seqlen(P, L, cutoff);
    const auto [ks, kt] = infer_seqlen(P, S, cutoff);
    EXPECT_EQ(r.target_ids, cat({Ids(prompt.begin(), prompt.begin() + ts),
                                 Ids(longer.begin(), longer.begin() + tt)}));
    EXPECT_EQ(r.target_labels, masked(ts, Ids(longer.begin(), longer.begin() + tt)));
    EXPECT_EQ(r.kl_ids, cat({Ids(prompt.begin(), prompt.begin() + ks),
                             Ids(shorter.begin(), shorter.begin() + kt)}));
    EXPECT_EQ(r.kl_labels, masked(ks, Ids(shorter.begin(), shorter.begin() + kt)));
    EXPECT_LE(static_cast<int64_t>(r.kl_ids.size()), cutoff);
  }
  // cutoff 12, P = 10, L = 9: 2L ≥ 12 and 2P ≥ 12, so the target keeps int(12 · 9/19) = 5
  // response and 7 prompt tokens; the KL row (2S < 12) keeps its S response tokens and
  // 12 − S prompt tokens.
  ASSERT_EQ(P, 10);
  ASSERT_EQ(L, 9);
  ASSERT_EQ(S, 4);
  FeedbackRows r = encode_feedback(ex, {Role::kAssistant, "omega psi"}, *t, 12);
  EXPECT_EQ(std::count(r.target_labels.begin(), r.target_labels.end(), kIgnoreIndex), 7);
  EXPECT_EQ(r.target_labels.size(), 12u);
  EXPECT_EQ(std::count(r.kl_labels.begin(), r.kl_labels.end(), kIgnoreIndex), 8);
  EXPECT_EQ(r.kl_labels.size(), 12u);
}

TEST(FeedbackEncode, TemplateErrorsNameTheRecord) {
  auto t = ChatTemplate::by_name("llama2", llama2());
  FeedbackExample ex = example({{Role::kUser, "a"}, {Role::kUser, "b"}, {Role::kUser, "c"}}, "x");
  try {
    encode_feedback(ex, {Role::kAssistant, "y"}, *t, 64);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[data] test line 1: [template] message 2", 0), 0u)
        << e.what();
  }
}

// LLaMA-Factory's preprocess_dataset, per batch of preprocessing_batch_size examples:
// kl_response = [examples["_response"][-1]] + examples["_response"][:-1], transcribed literally.
std::vector<int64_t> llama_factory_rule(int64_t n, int64_t batch_size) {
  std::vector<int64_t> out;
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    std::vector<int64_t> responses;  // examples["_response"] as indices
    for (int64_t i = begin; i < std::min(n, begin + batch_size); ++i) responses.push_back(i);
    std::vector<int64_t> kl = {responses.back()};
    kl.insert(kl.end(), responses.begin(), responses.end() - 1);
    out.insert(out.end(), kl.begin(), kl.end());
  }
  return out;
}

TEST(FeedbackData, KlPartnersRotateWithinEachPreprocessingBatch) {
  // 7 examples in batches of 3: [0, 1, 2] [3, 4, 5] [6].
  EXPECT_EQ(kl_partners(7, 3), (std::vector<int64_t>{2, 0, 1, 5, 3, 4, 6}));
  EXPECT_EQ(kl_partners(4, 1000), (std::vector<int64_t>{3, 0, 1, 2}));
  for (int64_t n = 0; n <= 12; ++n)
    for (int64_t bs = 1; bs <= 13; ++bs)
      EXPECT_EQ(kl_partners(n, bs), llama_factory_rule(n, bs)) << n << " " << bs;
  EXPECT_THROW(kl_partners(3, 0), ConfigError);
}

TEST(FeedbackData, RowsTagsAndKlResponsesFollowTheProcessor) {
  auto t = ChatTemplate::by_name("llama2", llama2());
  SftOptions o = kto_options("sharegpt_kto");
  o.data.preprocessing_batch_size = 3;
  auto [train, eval] = load_feedback_data(o, llama2(), *t);
  EXPECT_EQ(train.group, 2);
  EXPECT_EQ(train.num_examples(), 7);
  EXPECT_EQ(train.documents, 7);
  EXPECT_EQ(eval.num_rows(), 0);
  EXPECT_EQ(train.tags, (std::vector<uint8_t>{1, 0, 1, 0, 1, 1, 0}));
  FeedbackSet set = read_feedback(kto_attr("sharegpt_kto"), {});
  const std::vector<int64_t> partner = {2, 0, 1, 5, 3, 4, 6};
  const char* kl_text[] = {"gamma answer", "alpha answer",   "beta answer", "zeta answer",
                           "delta answer", "epsilon answer", "eta answer"};
  for (int64_t e = 0; e < 7; ++e) {
    SCOPED_TRACE(e);
    FeedbackRows r = encode_feedback(set.examples[e], set.examples[partner[e]].response, *t, 2048);
    EXPECT_EQ(train.rows[2 * e], r.target_ids);
    EXPECT_EQ(train.labels[2 * e], r.target_labels);
    EXPECT_EQ(train.rows[2 * e + 1], r.kl_ids);
    EXPECT_EQ(train.labels[2 * e + 1], r.kl_labels);
    // The scored part of the KL row is the partner's response + EOS.
    const Ids& kl = train.labels[2 * e + 1];
    const auto first =
        std::find_if(kl.begin(), kl.end(), [](int32_t l) { return l != kIgnoreIndex; });
    EXPECT_EQ(Ids(first, kl.end()), cat({enc(kl_text[e]), {2}}));
  }
  // The default batch (1000) rotates over all seven: example 0 takes example 6's response.
  auto [whole, none] = load_feedback_data(kto_options("sharegpt_kto"), llama2(), *t);
  FeedbackRows r0 = encode_feedback(set.examples[0], set.examples[6].response, *t, 2048);
  EXPECT_EQ(whole.rows[1], r0.kl_ids);
  EXPECT_EQ(whole.rows[0], train.rows[0]);
  EXPECT_EQ(feedback_balance_warning(whole), "");
  // Datasets are laid end to end before batching: alpaca's 3 then sharegpt's 7.
  SftOptions both = kto_options("alpaca_kto");
  both.data.dataset = {"alpaca_kto", "sharegpt_kto"};
  auto [merged, none2] = load_feedback_data(both, llama2(), *t);
  EXPECT_EQ(merged.num_examples(), 10);
  EXPECT_EQ(merged.tags, (std::vector<uint8_t>{1, 0, 1, 1, 0, 1, 0, 1, 1, 0}));
  FeedbackSet alpaca = read_feedback(kto_attr("alpaca_kto"), {});
  EXPECT_EQ(merged.rows[1],  // alpaca's first example takes sharegpt's last response
            encode_feedback(alpaca.examples[0], set.examples[6].response, *t, 2048).kl_ids);
}

TEST(FeedbackData, TagsSurviveTheSplitAndTheLoader) {
  auto t = ChatTemplate::by_name("llama2", llama2());
  auto [all, none] = load_feedback_data(kto_options("sharegpt_kto"), llama2(), *t);
  SftOptions o = kto_options("sharegpt_kto");
  o.data.val_size = 0.3;  // ceil(0.3 · 7) = 3 examples
  o.data.seed = 11;
  auto [train, eval] = load_feedback_data(o, llama2(), *t);
  ASSERT_EQ(eval.num_examples(), 3);
  ASSERT_EQ(train.num_examples(), 4);
  ASSERT_EQ(eval.tags.size(), 3u);
  ASSERT_EQ(train.tags.size(), 4u);
  const std::vector<int64_t> perm = numpy_permutation(11, 7);
  for (int64_t i = 0; i < 7; ++i) {
    const TokenizedDataset& part = i < 3 ? eval : train;
    const int64_t j = i < 3 ? i : i - 3;
    EXPECT_EQ(part.tags[j], all.tags[perm[i]]);
    EXPECT_EQ(part.rows[2 * j], all.rows[2 * perm[i]]);
    EXPECT_EQ(part.rows[2 * j + 1], all.rows[2 * perm[i] + 1]);
  }
  // The loader: batch tags in the batch's example order; target rows, then KL rows.
  LoaderOptions lo;
  lo.batch_size = 3;
  lo.seed = 5;
  BatchLoader loader(all, lo);
  const std::vector<int64_t> order = loader.epoch_order(0);
  for (int64_t k = 0; k < loader.batches_per_epoch(); ++k) {
    Batch b = loader.next();
    const int64_t n = b.rows / 2;
    ASSERT_EQ(static_cast<int64_t>(b.tags.size()), n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t e = order[3 * k + i];
      EXPECT_EQ(b.tags[i], all.tags[e]);
      EXPECT_EQ(b.row_indices[i], 2 * e);          // target row
      EXPECT_EQ(b.row_indices[n + i], 2 * e + 1);  // its KL row
    }
  }
  // Evaluation batches in dataset order, and a dataset without tags gives none.
  Batch ev = make_batch(eval, group_rows(eval, 1, 2), lo);
  EXPECT_EQ(ev.tags, (std::vector<uint8_t>{eval.tags[1], eval.tags[2]}));
  TokenizedDataset untagged = all;
  untagged.tags.clear();
  EXPECT_TRUE(make_batch(untagged, group_rows(untagged, 0, 2), lo).tags.empty());
  untagged.tags = {1, 0};  // not one per example
  EXPECT_THROW(BatchLoader(untagged, lo), DataError);
  EXPECT_THROW(make_batch(untagged, group_rows(untagged, 0, 2), lo), DataError);
}

TEST(FeedbackData, RefusesPackingOtherStagesAndEmptyData) {
  auto t = ChatTemplate::by_name("llama2", llama2());
  auto error_of = [&](const SftOptions& o) {
    try {
      load_feedback_data(o, llama2(), *t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SftOptions o = kto_options("sharegpt_kto");
  o.data.packing = true;
  EXPECT_NE(error_of(o).find("packing is not applicable to stage kto"), std::string::npos);
  o.data.packing = false;
  o.neat_packing = true;
  EXPECT_NE(error_of(o).find("neat_packing is not applicable to stage kto"), std::string::npos);
  o = kto_options("sharegpt_kto");
  o.stage = "dpo";
  EXPECT_NE(error_of(o).find("feedback data is for stage kto"), std::string::npos);
  EXPECT_NE(error_of(kto_options("no_tag")).find("stage kto needs columns.kto_tag"),
            std::string::npos);
  o = kto_options("bad_tags");
  EXPECT_NE(error_of(o).find("bad_tags.jsonl line 2: key 'label' is not a bool"),
            std::string::npos);
  o.data.skip_bad_records = true;
  auto [train, eval] = load_feedback_data(o, llama2(), *t);
  EXPECT_EQ(train.num_examples(), 2);
  EXPECT_EQ(train.skipped_records, 5);
  EXPECT_EQ(train.tags, (std::vector<uint8_t>{1, 0}));
  o.data.max_samples = 1;
  auto [one, none] = load_feedback_data(o, llama2(), *t);
  EXPECT_EQ(one.rows[1], one.rows[0]);  // a batch of one: its own response
  EXPECT_EQ(feedback_balance_warning(one),
            "[data] Your dataset only has one preference type (1 desirable, 0 undesirable "
            "examples).");
}

TEST(FeedbackData, LoadsTheBundledKtoDemo) {
  auto t = ChatTemplate::by_name("llama2", llama2());
  SftOptions o;
  o.stage = "kto";
  o.data.dataset = {"kto_en_demo"};
  o.data.dataset_dir = std::string(UNILLM_SOURCE_DIR) + "/data";
  o.data.packing = false;
  o.data.cutoff_len = 1024;
  auto [train, eval] = load_feedback_data(o, llama2(), *t);
  EXPECT_EQ(train.num_examples(), 300);
  EXPECT_EQ(train.num_rows(), 600);
  EXPECT_EQ(train.documents, 300);
  EXPECT_EQ(train.skipped_records, 0);
  EXPECT_EQ(std::count(train.tags.begin(), train.tags.end(), 1), 150);
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
  }
  // Example 1's KL row scores example 0's response (one preprocessing batch of 300).
  FeedbackSet set =
      read_feedback(resolve_datasets({"kto_en_demo"}, o.data.dataset_dir, "kto").at(0), {});
  EXPECT_EQ(train.rows[3],
            encode_feedback(set.examples[1], set.examples[0].response, *t, 1024).kl_ids);
}

}  // namespace
}  // namespace unillm::data::testing
