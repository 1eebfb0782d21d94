// Error types thrown inside the library. Messages start with the component in brackets and say
// what was expected, e.g. "[rms_norm] weight has 4095 elements, expected 4096". The CLI and the
// server convert them at the edge; nothing inside calls exit().
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace unillm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class ShapeError : public Error { using Error::Error; };
class DTypeError : public Error { using Error::Error; };
class DeviceError : public Error { using Error::Error; };
class OutOfMemory : public Error { using Error::Error; };
class IoError : public Error { using Error::Error; };
class ConfigError : public Error { using Error::Error; };
class NotImplemented : public Error { using Error::Error; };
// A NaN or inf where a finite value is needed (logits, a loss, a gradient norm, weights).
class NumericError : public Error { using Error::Error; };

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Builds a message from any streamable pieces: UNILLM_MSG("[io] ", path, ": bad header").
#define UNILLM_MSG(...) ::unillm::detail::concat(__VA_ARGS__)

// Throws ErrorType with the message pieces. Use at the edges for user-input errors.
#define UNILLM_THROW(ErrorType, ...) throw ErrorType(::unillm::detail::concat(__VA_ARGS__))

// Internal invariant: throws unillm::Error with file:line and the condition text.
#define UNILLM_CHECK(cond, ...)                                                        \
  do {                                                                                 \
    if (!(cond))                                                                       \
      throw ::unillm::Error(::unillm::detail::concat(__FILE__, ":", __LINE__, ": ",    \
                                                     "check failed: " #cond " ",       \
                                                     ##__VA_ARGS__));                  \
  } while (0)

}  // namespace unillm
