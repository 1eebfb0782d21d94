// LLaMA-Factory's ComputeSimilarity (train/sft/metric.py) on decoded predictions: per sample
// ROUGE-1/2/L F of the jieba-segmented texts (all 0 when either segments to nothing but
// whitespace) and character BLEU-4, each x100 and rounded to 4 decimals as Python's round(); the
// result is numpy's mean of each list. Also the reader of generated_predictions.jsonl.
#pragma once

#include <string>
#include <vector>

#include "eval/jieba.h"

namespace unillm::eval {

struct Prediction {
  std::string predict, label;  // UTF-8
};

struct SampleScores {
  double bleu4 = 0, rouge1 = 0, rouge2 = 0, rougel = 0;  // x100, rounded to 4 decimals
};

// One sample, as the body of ComputeSimilarity.__call__'s loop. JIEBA null: BLEU only (ROUGE 0).
SampleScores score_sample(const Jieba* jieba, const Prediction& p);
// The means over the samples (numpy's pairwise float64 sum / n); zeros for no sample.
SampleScores mean_scores(const std::vector<SampleScores>& samples);

// generated_predictions.jsonl: one JSON object a line with string "predict" and "label" (other
// keys ignored, blank lines skipped). ConfigError "[eval] FILE line N: ..." on a bad line.
std::vector<Prediction> read_predictions(const std::string& path);

// Python's round(x, 4) for a double: the exactly rounded decimal (ties to even), read back.
double py_round4(double x);
// numpy's float64 add.reduce: pairwise summation in blocks of 8, below 128 elements a plain
// 8-way unrolled loop.
double numpy_sum(const double* a, size_t n);

}  // namespace unillm::eval
