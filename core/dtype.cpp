#include "core/dtype.h"

#include <string>

namespace trident {

DType dtype_from_string(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "float" || s == "F32") return DType::F32;
  if (s == "f64" || s == "float64" || s == "double" || s == "F64") return DType::F64;
  if (s == "f16" || s == "float16" || s == "half" || s == "F16") return DType::F16;
  if (s == "bf16" || s == "bfloat16" || s == "BF16") return DType::BF16;
  if (s == "i32" || s == "int32" || s == "I32") return DType::I32;
  if (s == "i64" || s == "int64" || s == "long" || s == "I64") return DType::I64;
  if (s == "u8" || s == "uint8" || s == "U8") return DType::U8;
  if (s == "bool" || s == "BOOL") return DType::Bool;
  TRIDENT_FAIL("unknown dtype '", std::string(s), "' (expected one of f32, f64, f16, bf16, i32, i64, u8, bool)");
}

}  // namespace trident
