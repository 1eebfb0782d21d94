// A whole file mapped into memory, read-only in effect (safetensors and GGUF readers): the
// mapping is private, so a writable one sends writes to copy-on-write pages, never to the file.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace unillm::io {

struct MappedFile {
  std::shared_ptr<void> data;  // null for an empty file; unmapped when the last owner goes
  size_t size = 0;
};

// Maps PATH (a regular file). Throws IoError "COMPONENT PATH: ..." (component: the reader's tag,
// "[safetensors]") when it cannot be opened, is not a regular file or cannot be mapped.
// writable: PROT_WRITE on the private mapping.
MappedFile map_file(const std::string& path, const std::string& component, bool writable = false);

}  // namespace unillm::io
