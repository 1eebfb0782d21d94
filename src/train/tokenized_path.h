// LLaMA-Factory's tokenized_path (data/loader.py get_dataset) over unillm's own tokenized format
// (data/tokenized_store.h): a dir that holds rows is trained from, the data keys ignored (with
// LLaMA-Factory's warning); otherwise the stage builds its rows, they are saved there and the run
// trains on (LLaMA-Factory exited after saving until March 2025, 478e8194; it now goes on).
#pragma once

#include <functional>
#include <string>

#include "data/tokenized_store.h"
#include "io/tokenizer.h"
#include "train/args.h"
#include "train/stages/stage.h"

namespace unillm::train {

// What this run's rows would be built with (the template as the stage would choose it).
data::TokenizedIdentity run_identity(const TrainArgs& a, const io::Tokenizer& tok,
                                     const std::string& tokenizer_dir);

// A saved identity against this run's: ConfigError naming tokenized_path and the key that differs
// (stage, template, the tokenizer). Data keys that differ (dataset, cutoff_len, packing) are
// returned as one warning ("" when none): LLaMA-Factory ignores them when loading.
std::string check_identity(const data::TokenizedIdentity& saved, const data::TokenizedIdentity& run,
                           const std::string& path);

// The stage's data for this run: stage.load_data, or with a.tokenized_path the saved rows (then
// stage.adopt_data) or the built rows saved there. say: the run log.
StageData stage_data(Stage& stage, const TrainArgs& a, const io::Tokenizer& tok,
                     const std::string& tokenizer_dir,
                     const std::function<void(const std::string&)>& say);

}  // namespace unillm::train
