// map_file: open, fstat, mmap (MAP_PRIVATE), close; the mapping outlives the descriptor.
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace unillm::io {

MappedFile map_file(const std::string& path, const std::string& component, bool writable) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) UNILLM_THROW(IoError, component, " ", path, ": cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    UNILLM_THROW(IoError, component, " ", path, ": not a regular file");
  }
  MappedFile m;
  m.size = static_cast<size_t>(st.st_size);
  if (m.size == 0) {  // mmap refuses a zero length; the readers report an empty file themselves
    ::close(fd);
    return m;
  }
  const int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  void* base = ::mmap(nullptr, m.size, prot, MAP_PRIVATE, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);
  if (base == MAP_FAILED) UNILLM_THROW(IoError, component, " ", path, ": mmap failed (", std::strerror(mmap_errno), ")");
  const size_t size = m.size;
  m.data = std::shared_ptr<void>(base, [size](void* p) { ::munmap(p, size); });
  return m;
}

}  // namespace unillm::io
