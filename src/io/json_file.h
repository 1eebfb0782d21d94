// Small file helpers shared by the io readers and writers: read a JSON file with errors that name
// the file and the parse position, and write files atomically (temp file, fsync, rename) so a
// crash never leaves a half-written checkpoint or config behind.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace unillm::io {

// Parses PATH as JSON. Throws IoError "[json] PATH: cannot open ..." or
// "[json] PATH: invalid JSON at byte N (line L, column C): ...".
nlohmann::json read_json_file(const std::string& path);
// Same, keeping the key order of the file.
nlohmann::ordered_json read_ordered_json_file(const std::string& path);

// Reads a whole file into a string; IoError naming the file when it cannot be read.
std::string read_file_bytes(const std::string& path);

// Writes bytes to PATH atomically: PATH.tmp-XXXXXX in the same directory, fsync, rename over PATH,
// fsync of the directory. On any failure the temp file is removed and IoError names PATH.
void write_file_atomic(const std::string& path, const std::string& bytes);

// Appends bytes to PATH (created when absent), checking every write: on failure (a full disk)
// the file is cut back to its previous length, so a log never keeps half a line, and IoError
// names PATH and the reason.
void append_file(const std::string& path, const std::string& bytes);

// Streams a large file atomically (e.g. a safetensors shard): write() pieces, then commit().
// Destroying it without commit() removes the temp file and leaves PATH untouched.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void write(const std::string& s) { write(s.data(), s.size()); }
  // fsync + close + rename onto the final path + fsync of the directory.
  void commit();
  const std::string& path() const { return path_; }

 private:
  void abandon() noexcept;
  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
};

}  // namespace unillm::io
