// A re-implementation of jieba 0.42.1's default segmenter, `jieba.cut(s, cut_all=False, HMM=True)`:
// the text is split into runs of [\u4E00-\u9FD5a-zA-Z0-9+#&._%-] (each segmented by the
// max-probability route through the DAG of dictionary words, unknown runs of single characters
// going to the HMM) and the rest (one token per character, "\r\n" one token). LLaMA-Factory
// segments predictions and labels with it before ROUGE (sft/metric.py).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "eval/jieba_hmm.h"

namespace unillm::eval {

class Jieba {
 public:
  // Reads DIR/dict.txt (lines "word freq [tag]") and DIR/hmm.tsv (assets/jieba). IoError when a
  // file cannot be read, ConfigError naming file and line for a bad entry. Takes ~0.3 s.
  static Jieba load(const std::string& dir);

  // jieba.cut(s) as a list, on code points / on UTF-8 (each token UTF-8).
  std::vector<std::u32string> cut(std::u32string_view s) const;
  std::vector<std::string> cut_utf8(std::string_view s) const;

  // A word's dictionary frequency; 0 for a prefix of a word or an unknown string.
  int64_t freq(std::u32string_view w) const;

 private:
  void cut_block(std::u32string_view s, std::vector<std::u32string>& out) const;
  void flush_singles(const std::u32string& buf, std::vector<std::u32string>& out) const;

  // Every word and every prefix of a word (prefixes not themselves words with 0), as gen_pfdict.
  std::unordered_map<std::u32string, int64_t> freq_;
  double log_total_ = 0;  // log(sum of all dictionary frequencies)
  JiebaHmm hmm_;
};

}  // namespace unillm::eval
