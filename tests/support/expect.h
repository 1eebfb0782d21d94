// Test helpers: closeness checks on tensors and paths to test data.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/tensor.h"

namespace unillm::testing {

// Max |a - b| over elements (any dtypes, CPU).
double max_abs_diff(const Tensor& a, const Tensor& b);
// Asserts shapes equal and |a - b| <= atol + rtol * |b| elementwise.
void expect_close(const Tensor& a, const Tensor& b, double atol, double rtol = 0.0);
// Path under the source tree, e.g. test_path("tests/data/llama2/tokenizer.model").
std::string source_path(const std::string& rel);
// Registers the CPU backend once (idempotent).
void init_cpu();

}  // namespace unillm::testing
