// ROUGE-1/2/L F scores as rouge-chinese 1.0.3's `Rouge().get_scores(hyp, ref)[0][m]["f"]`: the
// strings are cut into sentences at Chinese/ASCII sentence ends (Rouge.cut_sent), whitespace
// is normalised, and words are the space-separated pieces of all sentences together. ROUGE-1/2:
// F of the sets of distinct n-grams; ROUGE-L: F of the longest common subsequence of the word
// lists. F = 2*p*r/(p + r + 1e-8), as the package computes it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace unillm::eval {

struct RougeScores {
  double rouge1 = 0, rouge2 = 0, rougel = 0;  // F in [0, 1]
};

// Rouge.cut_sent then [" ".join(p.split()) for p in pieces if p]; the sentences of a text.
std::vector<std::u32string> rouge_sentences(std::u32string_view text);

// Throws unillm::Error when HYP or REF has no sentence (rouge-chinese raises ValueError there).
RougeScores rouge_scores(std::u32string_view hyp, std::u32string_view ref);

}  // namespace unillm::eval
