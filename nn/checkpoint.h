// Checkpoint directories: named parts (tensor maps as safetensors files, JSON documents as .json
// files) and a manifest, published atomically. The storage layer only: what goes into the parts
// (model, optimizer, loss scaler, step, RNG states, data position) is the trainer's business.
//
// NOTE [Checkpoint layout]: a checkpoint is a directory
//     <name>/manifest.json           {"format": "trident-checkpoint", "format_version": 1,
//                                     "created": "2024-05-20T12:00:00Z", "created_unix_ns": ...,
//                                     "files": [{"name", "size", "crc32c"}, ...]}
//     <name>/<part>.safetensors     one per tensor part
//     <name>/<part>.json            one per JSON part
// It is written as "<parent>/.<name>.tmp-<unique>", every file fsynced, the manifest last; then
// the directory is renamed to <name> and the parent fsynced. An older <name> is replaced by an
// atomic exchange of the two directories (Linux renameat2 RENAME_EXCHANGE) and then removed, so
// <name> always holds one complete checkpoint or the other; where the file system cannot
// exchange, the old one is renamed aside to "<parent>/.<name>.old-<unique>" first (a crash in
// that short window leaves <name> absent and the old checkpoint under the hidden name). A
// directory counts as a checkpoint only if its name does not start with '.', its manifest is
// valid and every file it lists is there with the listed size; reading also checks each
// file's CRC32C. Part names are [A-Za-z0-9_.-]+ not starting with '.'.
// One writer per target at a time (concurrent writers to the same name are not coordinated).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/safetensors.h"

namespace trident::nn {

inline constexpr int kCheckpointFormatVersion = 1;

class CheckpointWriter {
 public:
  // Starts a checkpoint to be published as directory `path` (its parent must exist): creates the
  // hidden temporary directory next to it.
  explicit CheckpointWriter(std::string path);
  // Removes the temporary directory unless commit() succeeded: a writer abandoned by an
  // exception leaves no trace and the previous checkpoint untouched.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Writes <part>.safetensors now (so parts need not all be held in memory at once).
  void write_tensors(const std::string& part, const StateDict& tensors, const StringMap& metadata = {});
  // The same, the tensors produced one at a time (NOTE [Streamed safetensors]).
  void write_tensor_stream(const std::string& part, const TensorStream& tensors, const StringMap& metadata = {});
  // Writes <part>.json (pretty-printed).
  void write_json(const std::string& part, const nlohmann::json& doc);
  // Writes the manifest and publishes the directory (NOTE [Checkpoint layout]).
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return tmp_; }

 private:
  // "<part>.safetensors", after checking the part's name and that it is new.
  std::string tensor_file(const std::string& part) const;
  void add_file(const std::string& file, const FileDigest& d);
  std::string path_;
  std::string tmp_;
  bool committed_ = false;
  struct Entry {
    uint64_t size;
    uint32_t crc32c;
  };
  std::map<std::string, Entry> files_;
};

struct CheckpointFileInfo {
  std::string name;  // file name inside the checkpoint directory
  uint64_t size = 0;
  uint32_t crc32c = 0;
};

struct CheckpointManifest {
  int format_version = 0;
  std::string created;          // UTC, ISO 8601
  int64_t created_unix_ns = 0;  // orders checkpoints in list_checkpoints
  std::vector<CheckpointFileInfo> files;
};

struct Checkpoint {
  std::string path;
  CheckpointManifest manifest;
  std::map<std::string, SafetensorsFile> tensors;   // by part name
  std::map<std::string, nlohmann::json> documents;  // by part name
};

// Reads and validates <path>/manifest.json (untrusted: every field is checked).
CheckpointManifest read_checkpoint_manifest(const std::string& path);

// Checks every file the manifest lists: present, the listed size, and (with `checksums`) the
// listed CRC32C. Throws a trident::Error naming the checkpoint and the file.
void verify_checkpoint(const std::string& path, bool checksums = true);

// Verifies (with checksums) and then reads every part. Tensors are read with `mode`; the default
// copies, since a checkpoint is usually loaded into existing tensors (load_into) and dropped.
Checkpoint read_checkpoint(const std::string& path, LoadMode mode = LoadMode::Copy);

// The complete checkpoints directly inside `folder` (NOTE [Checkpoint layout]: hidden,
// temporary, manifest-less or short-file directories are skipped; checksums are not read),
// newest first by the manifest's creation time, ties by name, descending. An absent folder has
// none.
std::vector<std::string> list_checkpoints(const std::string& folder);
std::optional<std::string> latest_checkpoint(const std::string& folder);

namespace internal {
// Moves the complete checkpoint directory `tmp` to `path`, replacing a previous one there:
// by an atomic exchange when `use_exchange` and the file system can, else by renaming the old
// one aside first (NOTE [Checkpoint layout]). commit() calls it with use_exchange = true; the
// tests call it both ways.
void publish_checkpoint_directory(const std::string& tmp, const std::string& path, bool use_exchange);
}  // namespace internal

}  // namespace trident::nn
