// tokenized_path: load the saved rows, or build and save them (see tokenized_path.h).
#include "train/tokenized_path.h"

#include <cstdio>

#include "core/error.h"
#include "data/error.h"
#include "data/sft.h"
#include "data/token_corpus.h"

namespace unillm::train {

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

// Every id (and scored label) must have an embedding row of this run's tokenizer.
void check_ids(const data::TokenizedDataset& d, int64_t vocab, const std::string& path) {
  auto scan = [&](const std::vector<std::vector<int32_t>>& rows, const char* what) {
    for (size_t r = 0; r < rows.size(); ++r)
      for (int32_t id : rows[r])
        if (id >= vocab)
          UNILLM_THROW(data::DataError, "[data] tokenized_path '", path, "': row ", r, " holds ",
                       what, " ", id, ", beyond this run's tokenizer (", vocab, " ids)");
  };
  scan(d.rows, "id");
  scan(d.labels, "label");
}

}  // namespace

data::TokenizedIdentity run_identity(const TrainArgs& a, const io::Tokenizer& tok,
                                     const std::string& tokenizer_dir) {
  data::TokenizedIdentity id;
  id.stage = a.stage;
  // pt reads the template only for llama3's EOS; {src,tgt} data without one renders none.
  const bool plain_paddle = !a.dataset_name_or_path.empty() && a.template_name.empty() &&
                            !data::has_chat_template(tokenizer_dir);
  id.template_name = a.stage == "pt" || plain_paddle
                         ? a.template_name
                         : data::choose_template(a.template_name, tokenizer_dir).name;
  id.tokenizer = data::tokenizer_fingerprint(tok);
  id.vocab_size = tok.vocab_size();
  id.cutoff_len = a.dataset_name_or_path.empty() ? a.data_cutoff_len() : a.max_length;
  id.packing = a.packing;
  id.neat_packing = a.neat_packing;
  id.dataset =
      a.dataset_name_or_path.empty() ? a.dataset : std::vector<std::string>{a.dataset_name_or_path};
  id.eval_dataset = a.eval_dataset;
  return id;
}

std::string check_identity(const data::TokenizedIdentity& saved, const data::TokenizedIdentity& run,
                           const std::string& path) {
  auto refuse = [&](const std::string& key, const std::string& was, const std::string& now) {
    UNILLM_THROW(ConfigError, "[train] tokenized_path '", path, "' holds rows built with ", key,
                 " ", was, "; this run has ", key, " ", now,
                 ": use another tokenized_path, or remove this one to rebuild it");
  };
  auto tokenizer = [](const data::TokenizedIdentity& i) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(i.tokenizer));
    return std::to_string(i.vocab_size) + " ids, fingerprint " + hex;
  };
  if (saved.stage != run.stage) refuse("stage", "'" + saved.stage + "'", "'" + run.stage + "'");
  if (saved.template_name != run.template_name)
    refuse("template", "'" + saved.template_name + "'", "'" + run.template_name + "'");
  // The tokenizer comes from model_name_or_path (or tokenizer_name_or_path) plus add_tokens /
  // add_special_tokens and the template's added stop words.
  if (saved.tokenizer != run.tokenizer || saved.vocab_size != run.vocab_size)
    refuse("tokenizer", "(" + tokenizer(saved) + ")", "(" + tokenizer(run) + ")");
  std::string differ;
  auto note = [&](const std::string& key, const std::string& was, const std::string& now) {
    if (was != now)
      differ += (differ.empty() ? "" : ", ") + key + " " + was + " (this config: " + now + ")";
  };
  note("dataset", joined(saved.dataset), joined(run.dataset));
  note("eval_dataset", joined(saved.eval_dataset), joined(run.eval_dataset));
  note("cutoff_len", std::to_string(saved.cutoff_len), std::to_string(run.cutoff_len));
  note("packing", saved.packing ? "true" : "false", run.packing ? "true" : "false");
  note("neat_packing", saved.neat_packing ? "true" : "false", run.neat_packing ? "true" : "false");
  return differ.empty() ? "" : "warning: the saved rows were built with " + differ;
}

StageData stage_data(Stage& stage, const TrainArgs& a, const io::Tokenizer& tok,
                     const std::string& tokenizer_dir,
                     const std::function<void(const std::string&)>& say) {
  const std::string& path = a.tokenized_path;
  if (path.empty()) return stage.load_data(tok, tokenizer_dir);
  const data::TokenizedIdentity run = run_identity(a, tok, tokenizer_dir);
  if (data::has_tokenized_data(path)) {
    data::SavedRows s = data::load_tokenized(path);
    const std::string differ = check_identity(s.identity, run, path);
    check_ids(s.train, tok.vocab_size(), path);
    check_ids(s.eval, tok.vocab_size(), path);
    say("warning: loading dataset from disk will ignore other data arguments (LLaMA-Factory's "
        "rule)");
    if (!differ.empty()) say(differ);
    StageData d;
    d.train = std::move(s.train);
    d.eval = std::move(s.eval);
    d.pad_id = s.pad_id;
    d.mask_label_id = s.mask_label_id;
    d.description = s.description + " (from tokenized_path)";
    stage.adopt_data(d);
    say("Loaded tokenized dataset from " + path + ".");
    return d;
  }
  StageData d = stage.load_data(tok, tokenizer_dir);
  data::SavedRows s;
  s.identity = run;
  s.pad_id = d.pad_id;
  s.mask_label_id = d.mask_label_id;
  s.description = d.description;
  s.train = std::move(d.train);
  s.eval = std::move(d.eval);
  data::save_tokenized(path, s);
  d.train = std::move(s.train);
  d.eval = std::move(s.eval);
  say("Tokenized dataset is saved at " + path + ".");
  say("A later run with `tokenized_path: " + path +
      "` trains from it without reading the datasets.");
  return d;
}

}  // namespace unillm::train
