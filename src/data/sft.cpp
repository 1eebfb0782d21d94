// SFT data end to end (see sft.h): read → render (template or PaddleNLP rule) → pack → split.
#include "data/sft.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "data/dataset_info.h"
#include "data/mix.h"
#include "data/error.h"
#include "data/jinja_template.h"
#include "data/num_samples.h"
#include "data/packing.h"
#include "data/template_export.h"
#include "data/sft_encode.h"
#include "data/sft_reader.h"
#include "data/split.h"

namespace unillm::data {

namespace {

// The Jinja chat_template of a model dir ("" when none).
std::string read_chat_template(const std::string& model_dir) {
  auto path = std::filesystem::path(model_dir) / "tokenizer_config.json";
  std::ifstream f(path);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("chat_template")) return "";
  const auto& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())  // a list of {name, template}: transformers renders "default"
    for (const auto& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
          e["template"].is_string())
        return e["template"].get<std::string>();
  return "";
}

void add_skips(TokenizedDataset& out, ConversationSet& set) {
  out.skipped_records += set.skipped_records;
  for (auto& m : set.skip_messages) out.skip_messages.push_back(std::move(m));
}

// LLaMA-Factory's rendering of every conversation (SupervisedDatasetProcessor).
TokenizedDataset render_lf(ConversationSet&& set, const SftOptions& o, const ChatTemplate& t) {
  TokenizedDataset out;
  out.documents = static_cast<int64_t>(set.conversations.size());
  add_skips(out, set);
  SupervisedOptions so{o.data.cutoff_len, o.train_on_prompt, o.mask_history};
  const int64_t n = static_cast<int64_t>(set.conversations.size());
  out.rows.resize(static_cast<size_t>(n));
  out.labels.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    SupervisedExample e = encode_supervised(set.conversations[i], t, so);
    out.rows[i] = std::move(e.input_ids);
    out.labels[i] = std::move(e.labels);
  }
  return out;
}

// PaddleNLP's multi-round rendering with a chat template (tokenize_rounds_example): rounds are
// kept newest first while they fit max_length; the newest round is cut to src_length /
// max_length when it alone is too long; every round's response is scored. The system prompt is
// part of the first round's prompt here.
std::pair<std::vector<int32_t>, std::vector<int32_t>> encode_rounds(const Conversation& c,
                                                                    const ChatTemplate& t,
                                                                    const SftOptions& o) {
  auto turns = t.encode_multiturn(c.messages, c.system);
  std::vector<int32_t> ids, labels;
  for (int64_t i = static_cast<int64_t>(turns.size()) - 1; i >= 0; --i) {
    std::vector<int32_t> user = turns[i].prompt, bot = turns[i].response;
    bool last = false;
    if (static_cast<int64_t>(ids.size() + user.size() + bot.size()) > o.max_length) {
      if (i < static_cast<int64_t>(turns.size()) - 1) break;
      if (static_cast<int64_t>(user.size()) > o.src_length) user.resize(o.src_length);
      if (static_cast<int64_t>(bot.size()) > o.max_length - static_cast<int64_t>(user.size()))
        bot.resize(o.max_length - user.size());
      last = true;
    }
    std::vector<int32_t> row = user, lab(user.size(), kIgnoreIndex);
    row.insert(row.end(), bot.begin(), bot.end());
    lab.insert(lab.end(), bot.begin(), bot.end());
    row.insert(row.end(), ids.begin(), ids.end());
    lab.insert(lab.end(), labels.begin(), labels.end());
    ids = std::move(row);
    labels = std::move(lab);
    if (last) break;
  }
  return {std::move(ids), std::move(labels)};
}

TokenizedDataset render_paddle(ConversationSet&& set, const SftOptions& o, const io::Tokenizer& tok,
                               const ChatTemplate* t) {
  TokenizedDataset out;
  out.documents = static_cast<int64_t>(set.conversations.size());
  add_skips(out, set);
  for (const auto& c : set.conversations) {
    auto [ids, labels] =
        t ? encode_rounds(c, *t, o)
          : encode_src_tgt_plain(c.messages[0].content, c.messages[1].content, tok, o.src_length,
                                 o.max_length);
    out.rows.push_back(std::move(ids));
    out.labels.push_back(std::move(labels));
  }
  return out;
}

TokenizedDataset read_lf(const std::vector<std::string>& names, const SftOptions& o,
                         const ChatTemplate& t, NumpyRandomState& rng) {
  ConversationSet all;
  ReadOptions ro{o.data.max_samples, o.data.skip_bad_records, &rng};
  std::vector<std::vector<Conversation>> parts;
  for (const auto& attr : resolve_datasets(names, o.data.dataset_dir, "sft")) {
    ConversationSet s = read_conversations(attr, ro);
    parts.push_back(std::move(s.conversations));
    all.skipped_records += s.skipped_records;
    for (auto& m : s.skip_messages) all.skip_messages.push_back(std::move(m));
  }
  all.conversations = mix_datasets(std::move(parts), o.data.mix_strategy, o.data.interleave_probs, o.data.seed);
  return render_lf(std::move(all), o, t);
}

TokenizedDataset pack(TokenizedDataset&& d, const SftOptions& o, bool paddle) {
  const bool packing = paddle ? o.zero_padding : o.data.packing;
  if (!packing) return std::move(d);
  PackingOptions po;
  po.pad_id = o.pad_id;
  po.group_size = o.data.preprocessing_batch_size;
  if (paddle) {  // PaddleNLP zero_padding: in-order rows of max_length, samples kept apart
    po.cutoff_len = o.max_length;
    po.neat = true;
    po.grouping = PackGrouping::kSequential;
    po.pad_to_cutoff = false;
  } else {  // LLaMA-Factory: knapsack rows of cutoff_len
    po.cutoff_len = o.data.cutoff_len;
    po.neat = o.neat_packing;
    po.positions_continue = !o.neat_packing;  // plain packing: one sequence, positions continue
  }
  PackedRows p = pack_samples(d, po);
  p.data.skipped_records = d.skipped_records;
  p.data.skip_messages = std::move(d.skip_messages);
  return std::move(p.data);
}

}  // namespace

void split_val_examples(TokenizedDataset& train, TokenizedDataset& eval, double val_size,
                        uint64_t seed) {
  const int64_t g = train.group;
  UNILLM_CHECK(g >= 1 && train.num_rows() % g == 0, "[data] ", train.num_rows(),
               " rows do not form groups of ", g);
  const int64_t n = train.num_examples();
  SplitSizes sz = split_sizes(val_size, n);
  std::vector<int64_t> perm = numpy_permutation(seed, n);
  std::vector<int64_t> te, tr;  // row indices, an example's rows together
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < g; ++k) (i < sz.test ? te : tr).push_back(perm[i] * g + k);
  eval = select_rows(train, te);
  eval.group = g;
  TokenizedDataset kept = select_rows(train, tr);
  kept.group = g;
  if (!train.tags.empty()) {  // per example, in the same permutation order
    UNILLM_CHECK(static_cast<int64_t>(train.tags.size()) == n, "[data] ", train.tags.size(),
                 " tags for ", n, " examples");
    for (int64_t i = 0; i < n; ++i) (i < sz.test ? eval : kept).tags.push_back(train.tags[perm[i]]);
  }
  kept.documents = train.documents;
  kept.skipped_records = train.skipped_records;
  kept.skip_messages = std::move(train.skip_messages);
  train = std::move(kept);
}

std::pair<std::vector<int32_t>, std::vector<int32_t>> encode_src_tgt_plain(
    const std::string& src, const std::string& tgt, const io::Tokenizer& tok, int64_t src_length,
    int64_t max_length) {
  io::EncodeOptions plain;
  plain.add_special_tokens = false;
  std::vector<int32_t> content = tok.encode(src, plain);
  const bool bos = tok.adds_bos() && tok.bos_id() >= 0;
  // HF truncation on the left keeps room for the special tokens it adds.
  const int64_t keep = std::max<int64_t>(src_length - (bos ? 1 : 0), 0);
  if (static_cast<int64_t>(content.size()) > keep) content.erase(content.begin(), content.end() - keep);
  std::vector<int32_t> ids;
  if (bos) ids.push_back(tok.bos_id());
  ids.insert(ids.end(), content.begin(), content.end());
  std::vector<int32_t> labels(ids.size(), kIgnoreIndex);
  const int64_t tgt_max = max_length - static_cast<int64_t>(ids.size());
  std::vector<int32_t> target = tok.encode(tgt, plain);
  if (static_cast<int64_t>(target.size()) > tgt_max) target.resize(std::max<int64_t>(tgt_max, 0));
  if (static_cast<int64_t>(target.size()) < tgt_max) target.push_back(tok.eos_id());
  ids.insert(ids.end(), target.begin(), target.end());
  labels.insert(labels.end(), target.begin(), target.end());
  return {std::move(ids), std::move(labels)};
}

std::pair<TokenizedDataset, TokenizedDataset> load_sft_data(const SftOptions& o,
                                                            const io::Tokenizer& tok,
                                                            const ChatTemplate* tmpl) {
  TokenizedDataset train, eval;
  const bool paddle = !o.dataset_name_or_path.empty();
  if (paddle) {
    ReadOptions ro{o.data.max_samples, o.data.skip_bad_records};
    SrcTgtData d = read_src_tgt(o.dataset_name_or_path, ro);
    if (!tmpl && tok.eos_id() < 0)
      UNILLM_THROW(ConfigError, "[data] the tokenizer has no EOS token for {src,tgt} rendering");
    train = pack(render_paddle(std::move(d.train), o, tok, tmpl), o, true);
    if (d.has_dev) eval = pack(render_paddle(std::move(d.dev), o, tok, tmpl), o, true);
  } else {
    if (o.data.dataset.empty()) UNILLM_THROW(ConfigError, "[data] no training dataset given ('dataset')");
    UNILLM_CHECK(tmpl != nullptr, "[data] LLaMA-Factory SFT data needs a template");
    NumpyRandomState rng(o.data.seed);  // num_samples' draws: train datasets, then eval ones
    train = pack(read_lf(o.data.dataset, o, *tmpl, rng), o, false);
    if (!o.data.eval_dataset.empty()) eval = pack(read_lf(o.data.eval_dataset, o, *tmpl, rng), o, false);
  }
  if (train.rows.empty()) UNILLM_THROW(DataError, "[data] the training data holds no usable sample");
  if (o.data.val_size > 1e-6) split_val_examples(train, eval, o.data.val_size, o.data.seed);
  return {std::move(train), std::move(eval)};
}

bool has_chat_template(const std::string& model_dir) { return !read_chat_template(model_dir).empty(); }

TemplateChoice choose_template(const std::string& requested, const std::string& model_dir) {
  if (requested == kJinjaTemplateName) {
    if (read_chat_template(model_dir).empty())
      UNILLM_THROW(ConfigError, "[data] template '", kJinjaTemplateName,
                   "' renders the model's own chat_template, but ", model_dir,
                   "/tokenizer_config.json has none; name a template (e.g. default, qwen, llama3)");
    return {requested, {}, model_dir};
  }
  if (!requested.empty()) return {requested, {}, ""};
  const std::string jinja = read_chat_template(model_dir);
  if (jinja.empty()) return {"empty", {}, ""};  // LLaMA-Factory's fallback
  TemplateChoice c{recognize_jinja_template(jinja), {}, ""};
  if (c.name.empty()) {  // a template exported by unillm or LLaMA-Factory (template_export.h)
    try {
      c.name = template_of_exported_jinja(jinja, *io::Tokenizer::load(model_dir));
    } catch (const Error&) {  // no loadable tokenizer here: the Jinja itself is used below
    }
    if (!c.name.empty()) return c;
  }
  // A Jinja no built-in row reproduces: render it as transformers does.
  if (c.name.empty()) return {kJinjaTemplateName, {}, model_dir};
  if (auto sys = jinja_default_system(jinja); sys && !sys->empty()) c.options.default_system = sys;
  return c;
}

std::unique_ptr<ChatTemplate> make_chat_template(const TemplateChoice& choice,
                                                 const io::Tokenizer& tok,
                                                 const TemplateOptions& options) {
  if (choice.name == kJinjaTemplateName)
    return JinjaChatTemplate::load(choice.model_dir, tok, options);
  return ChatTemplate::by_name(choice.name, tok, options);
}

}  // namespace unillm::data
