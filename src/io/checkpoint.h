// CheckpointReader: the tensors of a Hugging Face checkpoint directory, from model.safetensors or
// from model.safetensors.index.json and its shards (each shard mmapped once). Refuses pickled
// PyTorch checkpoints with a conversion hint: unpickling runs arbitrary code.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace unillm::io {

class CheckpointReader {
 public:
  // DIR may also be the path of one .safetensors file. Throws IoError naming DIR (or the index
  // file / shard) when nothing loadable is there, a shard is missing or does not hold a tensor the
  // index maps to it, or the directory holds only a pickled checkpoint.
  static CheckpointReader open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // Names in a stable order: shard by shard (shards sorted by file name), file order within.
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  TensorInfo info(const std::string& name) const;
  // Zero-copy CPU tensor (see SafetensorsFile::tensor). IoError naming DIR when absent.
  Tensor get(const std::string& name) const;
  // See SafetensorsFile::drop_pages: after copying a tensor out of get().
  void drop_pages(const std::string& name) const;
  // The files opened, in order (one, or the shards).
  std::vector<std::string> files() const;

 private:
  const SafetensorsFile& file_of(const std::string& name) const;
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index in files_
  std::vector<std::string> order_;
};

}  // namespace unillm::io
