// Safetensors writing: one file, or a Hugging Face sharded directory (model-0000i-of-0000N +
// model.safetensors.index.json). Every file is written atomically (temp, fsync, rename).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace unillm::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// Called with each tensor just before its bytes are read for writing: a tensor whose memory comes
// and goes (ZeRO-3's gathered units, train/param_shards.h) is made present there.
using BeforeRead = std::function<void(const Tensor&)>;

// Writes tensors (any device, any strides; F32/F64/BF16/F16/I32/I64), the JSON header padded
// with spaces so that the data section starts 64-aligned: first (in the given order) those whose
// byte size is a multiple of 64, so each starts on a cache line of the file (and of a mapping of
// it), then the others in the given order.
// Empty metadata writes no "__metadata__". Throws IoError naming PATH (duplicate or empty names,
// undefined tensors, write failures); PATH is untouched on failure.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}},
                      const BeforeRead& before_read = {});

// What save_safetensors_streamed writes for one tensor before its data exists.
struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
};

// save_safetensors for tensors made one at a time: the same header and layout, fill(i) asked for
// specs[i]'s tensor (of that dtype and shape) when its bytes are due, in the file's layout order
// (so at most one filled tensor lives at a time). Throws IoError as save_safetensors, and for a
// filled tensor that does not match its spec.
void save_safetensors_streamed(const std::string& path, const std::vector<TensorSpec>& specs,
                               const std::function<Tensor(size_t)>& fill,
                               const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// save_safetensors_streamed for large tensors made a part at a time: tensor i's flat elements
// [lo, hi) are asked for in windows of at most part_elements (in order, tensors in the file's
// layout order), so at most one window lives at a time; fill_part returns them as a tensor of
// specs[i]'s dtype and hi − lo elements (any shape).
void save_safetensors_parts(const std::string& path, const std::vector<TensorSpec>& specs, int64_t part_elements,
                            const std::function<Tensor(size_t i, int64_t lo, int64_t hi)>& fill_part,
                            const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Writes DIR/model.safetensors when all tensors fit in max_shard_bytes, else HF-named shards
// model-00001-of-0000N.safetensors (greedy in the given order; a tensor larger than the limit
// gets a shard of its own) and model.safetensors.index.json {metadata.total_size, weight_map}.
// Creates DIR; removes stale model.safetensors / index / model-*-of-*.safetensors left from an
// earlier save in DIR so readers cannot pick up an old layout.
void save_sharded(const std::string& dir, const NamedTensors& tensors, size_t max_shard_bytes,
                  const BeforeRead& before_read = {});

// HF's shard file name: shard_file_name(1, 3) == "model-00001-of-00003.safetensors".
std::string shard_file_name(size_t index, size_t count);
// True for the names of a weight layout: model.safetensors, its index, or a shard.
bool is_weight_file_name(const std::string& name);

}  // namespace unillm::io
