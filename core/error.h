// Errors. Two kinds of check, as in PyTorch:
//   TRIDENT_CHECK(cond, ...)  a user mistake: throws trident::Error with file:line and a message
//                             built from the arguments (name the shapes, dtypes, devices).
//   TRIDENT_ASSERT(cond, ...) a broken internal invariant (a bug in Trident). Also throws, so
//                             that no mistake aborts the process, but says it is a bug.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace trident {

class Error : public std::runtime_error {
 public:
  Error(std::string what, std::string file, int line, std::string message)
      : std::runtime_error(std::move(what)), file_(std::move(file)), line_(line), message_(std::move(message)) {}
  // The message without the location prefix.
  const std::string& message() const { return message_; }
  const std::string& file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string file_;
  int line_;
  std::string message_;
};

namespace detail {

inline void stream_one(std::ostream& os, const char* s) { os << s; }
template <typename T>
void stream_one(std::ostream& os, const T& v) { os << v; }
// Shapes and index lists print as [2, 3, 4].
template <typename T>
void stream_one(std::ostream& os, const std::vector<T>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) os << ", ";
    stream_one(os, v[i]);
  }
  os << ']';
}

template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (stream_one(os, args), ...);
  return os.str();
}
inline std::string str() { return {}; }

[[noreturn]] void throw_error(const char* file, int line, const char* cond, const std::string& msg);
[[noreturn]] void throw_internal(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace detail
}  // namespace trident

#define TRIDENT_CHECK(cond, ...)                                                              \
  do {                                                                                        \
    if (!(cond)) [[unlikely]] {                                                               \
      ::trident::detail::throw_error(__FILE__, __LINE__, #cond, ::trident::detail::str(__VA_ARGS__)); \
    }                                                                                         \
  } while (0)

#define TRIDENT_ASSERT(cond, ...)                                                             \
  do {                                                                                        \
    if (!(cond)) [[unlikely]] {                                                               \
      ::trident::detail::throw_internal(__FILE__, __LINE__, #cond, ::trident::detail::str(__VA_ARGS__)); \
    }                                                                                         \
  } while (0)

// Unconditional failure with a message: a dtype or device an op has no kernel for, etc.
#define TRIDENT_FAIL(...) ::trident::detail::throw_error(__FILE__, __LINE__, nullptr, ::trident::detail::str(__VA_ARGS__))
