// Multiple-choice benchmarks as LLaMA-Factory's `llamafactory-cli eval` runs them (MMLU, CMMLU,
// C-Eval; its eval/evaluator.py and eval/template.py): a task directory holding mapping.json
// ({subject: {"name", "category"}}, in the order the subjects are evaluated) and each subject's
// questions as CSV per split; the few-shot examples come from the "train" split (the dev files).
// Each question becomes a conversation — the n shots as (user, assistant) turns, then the
// question — whose first user turn opens with the subject's system line.
#pragma once

#include <string>
#include <vector>

#include "data/template.h"

namespace unillm::data {

struct ChoiceQuestion {
  std::string question;
  std::vector<std::string> choices;  // A, B, C, D
  std::string answer;  // "A" … "D"
};

struct ChoiceSubject {
  std::string key;  // mapping.json's key, the files' stem
  std::string name;  // "abstract algebra": what the system line says
  std::string category;  // "STEM", "Humanities", …
  std::vector<ChoiceQuestion> shots;  // the train (dev) split
  std::vector<ChoiceQuestion> questions;  // the evaluated split
};

// LLaMA-Factory's task name "<dataset>_<split>" (mmlu_test, cmmlu_test, ceval_validation): reads
// task_dir/<dataset>/mapping.json and each subject's CSV files. Split names are LLaMA-Factory's
// (train = dev files, validation = val, test = test). A file is looked up as
// data/<s>/<key>_<s>.csv, <s>/<key>_<s>.csv, <s>/<key>.csv or data/<s>/<key>.csv with s = dev,
// val or test (MMLU's, C-Eval's and CMMLU's layouts once their zip is extracted). A header row
// (one field named "question") maps columns by name; otherwise they are question, A, B, C, D,
// answer. ConfigError for a missing directory, mapping or file (naming it; a task whose data is
// still a .zip is told to extract it), DataError naming file and line for a bad row.
std::vector<ChoiceSubject> load_choice_task(const std::string& task_dir, const std::string& task);

// LLaMA-Factory's EvalTemplate of `lang` ("en" | "zh"): ConfigError otherwise.
struct ChoiceFormat {
  std::string system;  // with {subject}
  std::string choice;  // with {choice} and {content}
  std::string answer;
};
ChoiceFormat choice_format(const std::string& lang);

// The conversation for `target` after `shots` (user: question + choices + answer cue; assistant:
// the answer letter), the first user turn prefixed with the system line for subject_name.
std::vector<Message> choice_messages(const ChoiceFormat& f, const std::vector<ChoiceQuestion>& shots,
                                     const ChoiceQuestion& target, const std::string& subject_name);

}  // namespace unillm::data
