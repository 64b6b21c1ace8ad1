// safetensors files (huggingface/safetensors): an 8-byte little-endian header length N, N bytes
// of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the data buffer (offsets are relative to it): every tensor contiguous, row-major,
// little-endian, the tensors covering the buffer with no gap and no overlap.
//
// Dtypes: F64 F32 F16 BF16 I64 I32 U8 BOOL (Trident's eight). The format's other types (I8, I16,
// U16, U32, U64, the 8-bit floats) have no Trident dtype and are refused with an error naming
// them; converting them silently would change what the file means.
//
// NOTE [safetensors validation]: files are untrusted. Reading checks everything before touching
// the data and reports, as a trident::Error naming the file, any of: a file shorter than 8 bytes;
// a header length past the end of the file or over 100,000,000 bytes (the reference
// implementation's limit); invalid JSON (UTF-8 included; a NUL byte anywhere in the header, which
// nlohmann-json would take for the end of its input), JSON nested deeper than 64 levels, or a
// duplicate key at any level; a header that is not an object; an entry that is not an object or
// lacks dtype/shape/data_offsets or has them with the wrong JSON type; an unknown or unsupported
// dtype; a dimension that is negative, fractional or above 2^63-1; dims whose product (zeros
// counted as ones: Trident's strides are those products even for an empty tensor) exceeds
// 2^63-1, or a byte count over 64 bits; data_offsets that are reversed, run past the buffer,
// disagree with dtype x shape, overlap another tensor, or leave a gap; bytes after the last
// tensor; "__metadata__" that is not an object of strings; a BOOL element other than 0 or 1 (any
// other byte is not a valid C++ bool). Like the reference implementation, gaps and trailing bytes
// are errors (its "InvalidOffset" and "MetadataIncompleteBuffer"), and unknown keys inside an
// entry are ignored. A fuzz test feeds mutated files through the reader, also under
// AddressSanitizer and UBSan (tests/nn/safetensors_fuzz_test.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nn/file_io.h"
#include "nn/state_dict.h"

namespace trident::nn {

using StringMap = std::map<std::string, std::string>;

// What a file holds: tensors by name and the optional "__metadata__" strings.
struct SafetensorsFile {
  StateDict tensors;
  StringMap metadata;
};

// One tensor's header entry, validated.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data buffer, [begin, end)
  uint64_t end = 0;
};

// A validated header: entries sorted by offset, the metadata, and where the data buffer starts
// in the file (8 + header length).
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;
  StringMap metadata;
  uint64_t data_start = 0;
  uint64_t data_size = 0;
};

enum class LoadMode {
  // The file is memory-mapped and each tensor is a view of the mapping: nothing is read until
  // touched, and the mapping lives as long as any tensor from it (its Storage's deleter holds
  // it), well after the file is closed. Writes to these tensors stay in this process (the
  // mapping is private). A tensor whose data is not aligned to its element size (a writer that
  // did not pad the header to 8 bytes) is copied instead. Another process truncating the file
  // while it is mapped would fault (SIGBUS) on access; Trident's own writers never modify a
  // file in place (they write a new file and rename it).
  Mmap,
  // Every tensor is read into memory of its own (positioned reads, no second copy).
  Copy,
};

// Writes tensors (any device, any strides: each is made contiguous on the CPU one at a time)
// and optional metadata atomically (a temporary file in the same directory, fsync, rename,
// fsync of the directory). The layout follows the reference writer, byte for byte: tensors
// sorted by dtype (widest alignment first) then name, compact JSON with keys dtype, shape,
// data_offsets, "__metadata__" first, the header padded with spaces to a multiple of 8 bytes so
// every tensor is aligned. Names must be valid UTF-8 and not "__metadata__". Returns the file's
// size and CRC32C.
FileDigest save_safetensors(const std::string& path, const StateDict& tensors, const StringMap& metadata = {});

// NOTE [Streamed safetensors]: tensors described before their data exists, for a writer that
// must not hold them all at once (a model-parallel checkpoint's full tensors, gathered one at a
// time from other ranks: parallel/checkpoint.h). The header is written from the specs; then
// produce(i) is called once for each spec, in safetensors_order(specs), and its tensor (any
// device, any strides) written and dropped before the next call. A produced tensor of another
// dtype or shape than its spec is an error naming it. The file's bytes are those
// save_safetensors writes for the same tensors as a state dict.
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
};
struct TensorStream {
  std::vector<TensorSpec> specs;
  std::function<Tensor(size_t)> produce;  // spec i's tensor
};

// The order the writer lays tensors out in (and calls produce): widest alignment first (the
// reference writer's dtype order), then by name. Indices into `specs`; a pure function of the
// specs, so ranks that build the same specs agree on it.
std::vector<size_t> safetensors_order(const std::vector<TensorSpec>& specs);

FileDigest save_safetensors_streamed(const std::string& path, const TensorStream& tensors, const StringMap& metadata = {});

// The same bytes, in memory.
std::vector<uint8_t> serialize_safetensors(const StateDict& tensors, const StringMap& metadata = {});

// Reads a file (NOTE [safetensors validation]).
SafetensorsFile load_safetensors(const std::string& path, LoadMode mode = LoadMode::Mmap);

// Reads a whole file held in memory (copying each tensor out); `source` names it in errors.
SafetensorsFile parse_safetensors(const void* data, size_t size, const std::string& source = "<memory>");

// Reads and validates only the header (the data is not read, but its size is checked against
// the file's).
SafetensorsHeader read_safetensors_header(const std::string& path);

// The format's name of a dtype ("F32", "BOOL", ...).
const char* safetensors_dtype_name(DType dtype);

}  // namespace trident::nn
