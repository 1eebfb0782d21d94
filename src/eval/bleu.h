// Sentence BLEU-4 as NLTK 3.x's `sentence_bleu([ref], hyp, smoothing_function=
// SmoothingFunction().method3)` with the default weights (0.25 each): clipped n-gram precisions
// for n = 1..4, zero counts replaced by 1/(2^k * denominator) (k = 1, 2, ... in order), the
// brevity penalty exp(1 - r/c) when c <= r, and 0 when no unigram matches. Tokens are code points
// (LLaMA-Factory passes list(label) and list(pred)). Double precision throughout, with Python's
// exactly rounded math.fsum for the weighted log sum, so results equal NLTK's bit for bit.
#pragma once

#include <string_view>
#include <vector>

namespace unillm::eval {

double sentence_bleu4(std::u32string_view ref, std::u32string_view hyp);

// Python's math.fsum: the correctly rounded sum of XS (finite values).
double py_fsum(const std::vector<double>& xs);

}  // namespace unillm::eval
