#include "core/error.h"

namespace trident::detail {

void throw_error(const char* file, int line, const char* cond, const std::string& msg) {
  std::string m = msg.empty() ? std::string("check failed: ") + (cond ? cond : "") : msg;
  throw Error(str("trident error at ", file, ":", line, ": ", m), file, line, m);
}

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  std::string m = str("internal assertion '", cond, "' failed", msg.empty() ? "" : ": ", msg,
                      " (this is a bug in Trident; please report it)");
  throw Error(str("trident internal error at ", file, ":", line, ": ", m), file, line, m);
}

}  // namespace trident::detail
