// Tokens added for training and the matching vocabulary growth (see vocab.h).
#include "train/vocab.h"

#include <algorithm>

#include "core/error.h"
#include "data/template.h"
#include "models/resize_vocab.h"
#include "models/save.h"

namespace unillm::train {

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::vector<std::string> missing(const io::Tokenizer& tok, const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  for (const auto& t : tokens)
    if (!tok.token_to_id(t) && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  return out;
}

// LLaMA-Factory's Template.fix_special_tokens, for the tokens it adds. model_rows: the base
// model's embedding rows. Without resize_vocab, a missing stop word that would get an id beyond
// them is left out: LLaMA-Factory adds it and only warns, but such a token is never encoded (a
// stop word only ends generation; the EOS, which is encoded, still has to fit), and a saved
// tokenizer larger than the model would make chat and serve refuse the output (the Llama 3
// tokenizer lacks llama3's <|eom_id|>).
void fix_template_tokens(io::Tokenizer& tok, const TrainArgs& a, int64_t model_rows,
                         std::vector<std::string>& notes) {
  const data::TemplateDef* def =
      a.template_name.empty() ? nullptr : data::find_template_def(a.template_name);
  if (def == nullptr) return;  // no template, a Jinja one, or an unknown name (refused elsewhere)
  std::vector<std::string> stop = def->stop_words;
  if (def->replace_eos && !stop.empty()) {
    if (!tok.token_to_id(stop[0]) && tok.set_eos_token(stop[0]))
      notes.push_back("template '" + a.template_name + "': added EOS token " + stop[0]);
    stop.erase(stop.begin());
  }
  if (tok.eos_id() < 0 && tok.set_eos_token("<|endoftext|>"))
    notes.push_back("template '" + a.template_name + "': added EOS token <|endoftext|>");
  auto add = missing(tok, stop);
  if (!wants_resize(a) && !add.empty() &&
      tok.vocab_size() + static_cast<int64_t>(add.size()) > model_rows) {
    notes.push_back("template '" + a.template_name + "': stop words " + joined(add) +
                    " are not in the tokenizer and the model has no rows for them; left out (set "
                    "resize_vocab: true to add them)");
    add.clear();
  }
  if (!add.empty() && tok.add_tokens(add, true) > 0)
    notes.push_back("template '" + a.template_name + "': added stop words " + joined(add) +
                    " as special tokens");
}

std::unique_ptr<io::Tokenizer> augmented(const std::string& dir, const TrainArgs& a,
                                         int64_t model_rows, std::vector<std::string>& notes) {
  auto tok = io::Tokenizer::load(dir);
  // LLaMA-Factory passes its value (default false) to from_pretrained, over tokenizer_config.json's.
  tok->set_split_special_tokens(a.split_special_tokens);
  if (!a.add_tokens.empty() && tok->add_tokens(a.add_tokens, false) > 0)
    notes.push_back("add_tokens: added " + joined(a.add_tokens));
  if (!a.add_special_tokens.empty() && tok->add_tokens(a.add_special_tokens, true) > 0)
    notes.push_back("add_special_tokens: added " + joined(a.add_special_tokens));
  fix_template_tokens(*tok, a, model_rows, notes);
  return tok;
}

// desc_init[_w_noise]: each described token's id and its description's ids, as LLaMA-Factory
// tokenizes it (no BOS/EOS, special-token strings recognised). A token without an id is skipped
// with a note, as LLaMA-Factory warns and skips it. Returns the notes ("" or lines ending "\n").
std::string describe_tokens(const io::Tokenizer& tok, const TrainArgs& a,
                            models::ResizeVocabOptions& o) {
  if (a.init_special_tokens == "noise_init") return "";
  o.noise = a.init_special_tokens == "desc_init_w_noise";
  io::EncodeOptions eo;
  eo.add_special_tokens = false;
  eo.parse_special = true;
  std::string notes;
  for (const auto& [token, text] : a.special_token_descriptions) {
    const auto id = tok.token_to_id(token);
    if (!id) {
      notes += "desc_init: token '" + token + "' not found, skipped\n";
      continue;
    }
    o.described.push_back({*id, tok.encode(text, eo)});
  }
  if (o.described.empty()) o.noise = true;  // nothing described: noise_init's rows, as before
  return notes;
}

}  // namespace

bool wants_resize(const TrainArgs& a) {
  return a.resize_vocab || !a.add_tokens.empty() || !a.add_special_tokens.empty();
}

TrainingTokenizer load_training_tokenizer(const std::string& dir, const TrainArgs& a,
                                          const models::ModelConfig& config,
                                          const std::string& config_path) {
  // The preference stages' reference model is loaded apart and would not be grown.
  if (wants_resize(a) && (a.stage == "dpo" || a.stage == "kto"))
    UNILLM_THROW(NotImplemented, "[config] ", a.config_path,
                 ": resize_vocab / add_tokens / add_special_tokens with stage ", a.stage,
                 " (the reference model would need the same grown vocabulary) is not implemented");
  TrainingTokenizer t;
  t.tokenizer = augmented(dir, a, config.vocab_size, t.notes);
  const io::Tokenizer& tok = *t.tokenizer;
  const auto added = tok.added_since_load();
  if (tok.vocab_size() > config.vocab_size && !added.empty() && !wants_resize(a)) {
    std::vector<std::string> names;
    for (int32_t id : added)
      names.push_back(tok.id_to_token(id) + " (id " + std::to_string(id) + ")");
    UNILLM_THROW(ConfigError, "[config] ", a.config_path, ": ", joined(names),
                 " added to the tokenizer",
                 a.template_name.empty() ? std::string()
                                         : " (template '" + a.template_name + "' stop words)",
                 " are beyond the model's ", config.vocab_size, " embedding rows (", config_path,
                 "): set resize_vocab: true to grow embed_tokens and lm_head for them");
  }
  if (!wants_resize(a)) models::check_tokenizer_fits(tok, config, config_path);
  return t;
}

std::string grow_vocab(models::CausalLM& model, const io::Tokenizer& tok, const TrainArgs& a) {
  if (!wants_resize(a)) return "";
  models::ResizeVocabOptions o;
  o.tokenizer_size = tok.vocab_size();
  o.initializer_range = model.config().initializer_range;
  for (const auto* list : {&a.add_tokens, &a.add_special_tokens})
    for (const auto& t : *list)
      if (auto id = tok.token_to_id(t)) o.new_token_ids.push_back(*id);
  std::string skipped = describe_tokens(tok, a, o);
  // Its own stream, so the LoRA init keeps a.seed's; a LoRA resume redraws the same rows.
  Rng rng(static_cast<uint64_t>(a.seed) ^ 0x7e5153e0ULL);
  const auto r = models::resize_token_embeddings(model, o, rng);
  if (r.new_rows == r.old_rows && r.initialised.empty()) return skipped;
  const std::string how = o.described.empty() ? "the mean of the others + noise"
                          : o.noise
                              ? "the mean of their descriptions' rows + noise (desc_init_w_noise)"
                              : "the mean of their descriptions' rows (desc_init)";
  return skipped + "resize_vocab: embed_tokens" +
         std::string(model.config().tie_word_embeddings ? " (tied lm_head)" : " and lm_head") +
         " " + std::to_string(r.old_rows) + " -> " + std::to_string(r.new_rows) + " rows, " +
         std::to_string(r.initialised.size()) + " initialised to " + how;
}

std::vector<std::string> modules_to_save(const TrainArgs& a) {
  if (!a.additional_target.empty()) return a.additional_target;
  if (wants_resize(a)) return {"embed_tokens", "lm_head"};
  return {};
}

void save_training_tokenizer(const std::string& tokenizer_dir, const TrainArgs& a,
                             int64_t model_rows, const std::string& dst_dir) {
  std::vector<std::string> notes;
  const auto tok = augmented(tokenizer_dir, a, model_rows, notes);
  if (!tok->modified_since_load())
    models::copy_tokenizer_files(tokenizer_dir, dst_dir);
  else
    tok->save_files(tokenizer_dir, dst_dir);
}

}  // namespace unillm::train
