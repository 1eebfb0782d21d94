// Expert parallelism as the sparse layers see it (docs/ARCHITECTURE.md, "Mixture of experts"):
// the data-parallel processes of an expert group each route their own tokens, and rank r of the
// group runs experts [r·E/size, (r+1)·E/size) for the tokens of the whole group. Two autograd
// collectives carry the rows between them: ep_gather (all-gather forward, reduce-scatter
// backward) and ep_scatter (reduce-scatter forward, all-gather backward). Ranks hold different
// numbers of rows, so each rank's block is padded to the group's largest count (`rows`).
//
// Every rank must run the same collectives in the same order, backward included, whatever its
// experts were given: so each call is one collective (ep_gather moves several tensors in one
// buffer), and ep_scatter ties the gathered tensors into the graph (a zero gradient to each) so
// their backward runs on a rank whose experts got no token.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/tensor_parallel.h"

namespace unillm::nn {

// Every rank's row count n, in rank order (a collective over the group).
std::vector<int64_t> ep_counts(int64_t n, Collective& group);

// Every rank's rows of each xs[i] ([n, c_i], one dtype, n the same for all) -> [size · rows, c_i]:
// rank r's rows at [r · rows, r · rows + n_r), zeros after them. One all-gather. Backward: each
// gradient summed over the group, this rank's n rows (one reduce-scatter).
std::vector<Tensor> ep_gather(const std::vector<Tensor>& xs, int64_t rows, Collective& group);

// An integer tensor [n, c] (i32) gathered the same way, outside autograd.
Tensor ep_gather_ints(const Tensor& ids, int64_t rows, Collective& group);

// y [size · rows, c] (laid out as ep_gather's) -> the first n of this rank's `rows` rows of the
// sum of y over the group. Backward: the gradient padded to `rows` and gathered; each of `ties`
// (ep_gather's outputs) gets a zero gradient, so their backward runs on every rank.
Tensor ep_scatter(const Tensor& y, int64_t rows, int64_t n, Collective& group, const std::vector<Tensor>& ties);

// Rank r's experts [begin, end) of `experts` split evenly over the group (experts % size == 0).
std::pair<int64_t, int64_t> ep_experts(int64_t experts, const Collective& group);

}  // namespace unillm::nn
