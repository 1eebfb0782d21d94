// ComputeSimilarity (see similarity.h) and the predictions reader.
#include "eval/similarity.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/bleu.h"
#include "eval/rouge.h"
#include "eval/text.h"

namespace unillm::eval {

double py_round4(double x) {
  // glibc's printf is exact and rounds ties to even in the default mode, as CPython's dtoa.
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.4f", x);
  return std::strtod(buf, nullptr);
}

double numpy_sum(const double* a, size_t n) {
  if (n < 8) {
    double res = 0.;
    for (size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return numpy_sum(a, n2) + numpy_sum(a + n2, n - n2);
}

namespace {
// " ".join(words): the string rouge-chinese receives.
std::u32string join_words(const std::vector<std::u32string>& words) {
  std::u32string s;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i) s.push_back(U' ');
    s += words[i];
  }
  return s;
}
}  // namespace

SampleScores score_sample(const Jieba* jieba, const Prediction& p) {
  const std::u32string pred = utf8_to_u32(p.predict), label = utf8_to_u32(p.label);
  SampleScores s;
  const std::u32string hyp = jieba ? join_words(jieba->cut(pred)) : U"";
  const std::u32string ref = jieba ? join_words(jieba->cut(label)) : U"";
  if (jieba && !py_split_ws(hyp).empty() && !py_split_ws(ref).empty()) {
    const RougeScores r = rouge_scores(hyp, ref);
    s.rouge1 = py_round4(r.rouge1 * 100);
    s.rouge2 = py_round4(r.rouge2 * 100);
    s.rougel = py_round4(r.rougel * 100);
  }
  s.bleu4 = py_round4(sentence_bleu4(label, pred) * 100);
  return s;
}

SampleScores mean_scores(const std::vector<SampleScores>& samples) {
  SampleScores m;
  if (samples.empty()) return m;
  const double n = static_cast<double>(samples.size());
  auto mean = [&](double SampleScores::*field) {
    std::vector<double> v;
    for (const auto& s : samples) v.push_back(s.*field);
    return (0.0 + numpy_sum(v.data(), v.size())) / n;
  };
  m.bleu4 = mean(&SampleScores::bleu4);
  m.rouge1 = mean(&SampleScores::rouge1);
  m.rouge2 = mean(&SampleScores::rouge2);
  m.rougel = mean(&SampleScores::rougel);
  return m;
}

std::vector<Prediction> read_predictions(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) UNILLM_THROW(IoError, "[eval] cannot open ", path);
  std::vector<Prediction> out;
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = UNILLM_MSG("[eval] ", path, " line ", lineno, ": ");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      UNILLM_THROW(ConfigError, where, "invalid JSON (", e.what(), ")");
    }
    if (!j.is_object()) UNILLM_THROW(ConfigError, where, "expected a JSON object");
    Prediction p;
    for (const char* key : {"predict", "label"}) {
      const auto it = j.find(key);
      if (it == j.end()) UNILLM_THROW(ConfigError, where, "key '", key, "' missing");
      if (!it->is_string()) UNILLM_THROW(ConfigError, where, "key '", key, "' is not a string");
      (key[0] == 'p' ? p.predict : p.label) = it->get<std::string>();
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace unillm::eval
