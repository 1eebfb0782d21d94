// JSON file reading with located errors, and atomic file writes (temp + fsync + rename).
#include "io/json_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace unillm::io {
namespace {

std::string errno_str() { return std::strerror(errno); }

// Line and column (1-based) of byte offset pos in text.
std::string line_col(const std::string& text, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return UNILLM_MSG("line ", line, ", column ", col);
}

template <typename Json>
Json parse_json_text(const std::string& path, const std::string& text) {
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based and points just past the offending character.
    size_t pos = e.byte > 0 ? e.byte - 1 : 0;
    std::string what = e.what();
    auto colon = what.rfind(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    UNILLM_THROW(IoError, "[json] ", path, ": invalid JSON at byte ", pos, " (",
                 line_col(text, pos), "): ", what);
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number overflows a double
    UNILLM_THROW(IoError, "[json] ", path, ": invalid JSON: ", e.what());
  }
}

void fsync_dir_of(const std::string& path) {
  auto dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd < 0) return;  // best effort: some filesystems refuse directory fds
  ::fsync(dfd);
  ::close(dfd);
}

}  // namespace

std::string read_file_bytes(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    UNILLM_THROW(IoError, "[io] ", path, ": is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) UNILLM_THROW(IoError, "[io] ", path, ": cannot open (", errno_str(), ")");
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) UNILLM_THROW(IoError, "[io] ", path, ": read failed");
  return os.str();
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json_text<nlohmann::json>(path, read_file_bytes(path));
}

nlohmann::ordered_json read_ordered_json_file(const std::string& path) {
  return parse_json_text<nlohmann::ordered_json>(path, read_file_bytes(path));
}

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path) {
  std::string tmpl = path + ".tmp-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  fd_ = ::mkstemp(buf.data());
  if (fd_ < 0) UNILLM_THROW(IoError, "[io] ", path, ": cannot create a temp file (", errno_str(), ")");
  tmp_path_ = buf.data();
  ::fchmod(fd_, 0644);  // mkstemp makes 0600; checkpoints are meant to be shared like any file
}

AtomicFileWriter::~AtomicFileWriter() { abandon(); }

void AtomicFileWriter::abandon() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!tmp_path_.empty()) {
    ::unlink(tmp_path_.c_str());
    tmp_path_.clear();
  }
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  if (fd_ < 0) UNILLM_THROW(IoError, "[io] ", path_, ": write after commit or failure");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = errno_str();
      abandon();
      UNILLM_THROW(IoError, "[io] ", path_, ": write failed (", why, ")");
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) UNILLM_THROW(IoError, "[io] ", path_, ": commit after failure");
  if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
    std::string why = errno_str();
    fd_ = -1;
    abandon();
    UNILLM_THROW(IoError, "[io] ", path_, ": fsync/close failed (", why, ")");
  }
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    std::string why = errno_str();
    abandon();
    UNILLM_THROW(IoError, "[io] ", path_, ": rename from temp file failed (", why, ")");
  }
  tmp_path_.clear();
  fsync_dir_of(path_);
}

void append_file(const std::string& path, const std::string& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) UNILLM_THROW(IoError, "[io] ", path, ": cannot open for appending (", errno_str(), ")");
  struct stat st {};
  const off_t before = ::fstat(fd, &st) == 0 ? st.st_size : -1;
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = n < 0 ? errno_str() : "no space written";
      if (before >= 0 && ::ftruncate(fd, before) != 0) why += "; could not cut the partial write back";
      ::close(fd);
      UNILLM_THROW(IoError, "[io] ", path, ": write failed (", why, ")");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::close(fd) != 0) UNILLM_THROW(IoError, "[io] ", path, ": close failed (", errno_str(), ")");
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFileWriter w(path);
  w.write(bytes);
  w.commit();
}

}  // namespace unillm::io
