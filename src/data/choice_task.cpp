// load_choice_task, choice_format, choice_messages (data/choice_task.h).
#include "data/choice_task.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/csv.h"
#include "data/error.h"

namespace unillm::data {

namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) UNILLM_THROW(ConfigError, "[eval] cannot read ", p.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// The file of one subject's split, or "" when there is none.
fs::path split_file(const fs::path& dir, const std::string& key, const std::string& s) {
  for (const fs::path& p : {dir / "data" / s / (key + "_" + s + ".csv"), dir / s / (key + "_" + s + ".csv"),
                            dir / s / (key + ".csv"), dir / "data" / s / (key + ".csv")})
    if (fs::is_regular_file(p)) return p;
  return {};
}

std::vector<ChoiceQuestion> read_questions(const fs::path& file) {
  const std::vector<CsvRow> rows = parse_csv(read_all(file), file.string());
  // Columns by name after a header row, else MMLU's headerless order.
  std::vector<size_t> col = {0, 1, 2, 3, 4, 5};  // question, A, B, C, D, answer
  size_t first = 0;
  if (!rows.empty()) {
    const auto& h = rows.front().fields;
    auto at = [&](const std::string& name) {
      for (size_t i = 0; i < h.size(); ++i)
        if (lower(h[i]) == name) return i;
      UNILLM_THROW(DataError, "[eval] ", file.string(), " line 1: the header has no column '", name, "'");
    };
    if (std::any_of(h.begin(), h.end(), [](const std::string& f) { return lower(f) == "question"; })) {
      col = {at("question"), at("a"), at("b"), at("c"), at("d"), at("answer")};
      first = 1;
    }
  }
  const size_t need = *std::max_element(col.begin(), col.end()) + 1;
  std::vector<ChoiceQuestion> out;
  for (size_t r = first; r < rows.size(); ++r) {
    const CsvRow& row = rows[r];
    if (row.fields.size() < need)
      UNILLM_THROW(DataError, "[eval] ", file.string(), " line ", row.line, ": ", row.fields.size(),
                   " fields, expected at least ", need, " (question, A, B, C, D, answer)");
    ChoiceQuestion q;
    q.question = row.fields[col[0]];
    for (int c = 1; c <= 4; ++c) q.choices.push_back(row.fields[col[static_cast<size_t>(c)]]);
    q.answer = row.fields[col[5]];
    out.push_back(std::move(q));
  }
  return out;
}

}  // namespace

std::vector<ChoiceSubject> load_choice_task(const std::string& task_dir, const std::string& task) {
  const size_t us = task.rfind('_');
  if (us == std::string::npos || us == 0 || us + 1 == task.size())
    UNILLM_THROW(ConfigError, "[eval] task '", task, "': expected <dataset>_<split>, e.g. mmlu_test");
  const std::string name = task.substr(0, us), split = task.substr(us + 1);
  static const std::vector<std::pair<std::string, std::string>> kSplits = {
      {"train", "dev"}, {"validation", "val"}, {"test", "test"}};
  std::string files_split;
  for (const auto& [lf, f] : kSplits)
    if (split == lf) files_split = f;
  if (files_split.empty())
    UNILLM_THROW(ConfigError, "[eval] task '", task, "': split '", split, "' is not train, validation or test");
  const fs::path dir = fs::path(task_dir) / name;
  if (!fs::is_directory(dir))
    UNILLM_THROW(ConfigError, "[eval] task_dir: ", dir.string(), " is not a directory (task '", task, "')");
  const fs::path mapping = dir / "mapping.json";
  if (!fs::is_regular_file(mapping))
    UNILLM_THROW(ConfigError, "[eval] ", mapping.string(), " does not exist");
  nlohmann::ordered_json m;
  try {
    m = nlohmann::ordered_json::parse(read_all(mapping));
  } catch (const nlohmann::json::exception& e) {
    UNILLM_THROW(ConfigError, "[eval] ", mapping.string(), ": not JSON (", e.what(), ")");
  }
  if (!m.is_object() || m.empty())
    UNILLM_THROW(ConfigError, "[eval] ", mapping.string(), ": expected {subject: {\"name\", \"category\"}}");
  std::vector<ChoiceSubject> out;
  for (const auto& [key, v] : m.items()) {
    if (!v.is_object() || !v.contains("name") || !v.contains("category") || !v["name"].is_string() ||
        !v["category"].is_string())
      UNILLM_THROW(ConfigError, "[eval] ", mapping.string(), ": subject '", key, "' needs string \"name\" and \"category\"");
    ChoiceSubject s{key, v["name"].get<std::string>(), v["category"].get<std::string>(), {}, {}};
    for (const std::string& sp : {std::string("dev"), files_split}) {
      const fs::path f = split_file(dir, key, sp);
      if (f.empty()) {
        std::string zips;
        for (const auto& e : fs::directory_iterator(dir))
          if (e.path().extension() == ".zip") zips += " " + e.path().filename().string();
        UNILLM_THROW(ConfigError, "[eval] ", dir.string(), ": no ", sp, " file for subject '", key, "' (looked for data/",
                     sp, "/", key, "_", sp, ".csv, ", sp, "/", key, "_", sp, ".csv, ", sp, "/", key, ".csv)",
                     zips.empty() ? "" : "; extract" + zips + " there first (unzip), unillm reads the CSV files");
      }
      (sp == "dev" ? s.shots : s.questions) = read_questions(f);
    }
    if (split == "train") s.questions = s.shots;
    out.push_back(std::move(s));
  }
  return out;
}

ChoiceFormat choice_format(const std::string& lang) {
  if (lang == "en")
    return {"The following are multiple choice questions (with answers) about {subject}.\n\n", "\n{choice}. {content}",
            "\nAnswer:"};
  if (lang == "zh")
    return {"以下是中国关于{subject}考试的单项选择题，请选出其中的正确答案。\n\n", "\n{choice}. {content}", "\n答案："};
  UNILLM_THROW(ConfigError, "[eval] lang '", lang, "' is not en or zh");
}

std::vector<Message> choice_messages(const ChoiceFormat& f, const std::vector<ChoiceQuestion>& shots,
                                     const ChoiceQuestion& target, const std::string& subject_name) {
  auto prompt = [&f](const ChoiceQuestion& q) {
    std::string s = q.question;
    for (size_t c = 0; c < q.choices.size(); ++c)
      s += replace_all(replace_all(f.choice, "{choice}", std::string(1, static_cast<char>('A' + c))), "{content}",
                       q.choices[c]);
    return s + f.answer;
  };
  std::vector<Message> m;
  for (const ChoiceQuestion& q : shots) {
    m.push_back({Role::kUser, prompt(q)});
    m.push_back({Role::kAssistant, q.answer});
  }
  m.push_back({Role::kUser, prompt(target)});
  m.push_back({Role::kAssistant, target.answer});
  m.front().content = replace_all(f.system, "{subject}", subject_name) + m.front().content;
  return m;
}

}  // namespace unillm::data
