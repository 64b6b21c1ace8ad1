#include "nn/checkpoint.h"

#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <set>
#include <system_error>

namespace trident::nn {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kFormat = "trident-checkpoint";

std::string os_error(int err) { return std::system_category().message(err); }

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 200 || s[0] == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
  });
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

namespace internal {
void publish_checkpoint_directory(const std::string& tmp, const std::string& path, bool use_exchange) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    TRIDENT_CHECK(errno == ENOENT, "checkpoint '", path, "': cannot stat: ", os_error(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      TRIDENT_FAIL("checkpoint '", path, "': cannot rename '", tmp, "' to it: ", os_error(errno));
    return;
  }
  TRIDENT_CHECK(S_ISDIR(st.st_mode), "checkpoint '", path, "' exists and is not a directory; not replacing it");
#ifdef RENAME_EXCHANGE
  // One atomic step: <path> holds the new checkpoint and tmp the old one.
  if (use_exchange) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) {
      std::error_code ec;
      fs::remove_all(tmp, ec);  // the old checkpoint; failing to delete it is not an error
      return;
    }
    const int err = errno;
    TRIDENT_CHECK(err == EINVAL || err == ENOSYS || err == EOPNOTSUPP, "checkpoint '", path, "': cannot exchange it with '",
                  tmp, "': ", os_error(err));
  }
#else
  (void)use_exchange;
#endif
  // No exchange on this file system: move the old one aside, the new one in, then delete.
  const std::string aside = temporary_sibling(path, "old");
  if (::rename(path.c_str(), aside.c_str()) != 0)
    TRIDENT_FAIL("checkpoint '", path, "': cannot move the previous checkpoint aside to '", aside, "': ", os_error(errno));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    (void)::rename(aside.c_str(), path.c_str());  // put the previous one back
    TRIDENT_FAIL("checkpoint '", path, "': cannot rename '", tmp, "' to it: ", os_error(e));
  }
  std::error_code ec;
  fs::remove_all(aside, ec);
}
}  // namespace internal

namespace {

std::string utc_iso8601(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

template <typename... Args>
[[noreturn]] void bad_manifest(const std::string& dir, const Args&... args) {
  TRIDENT_FAIL("checkpoint '", dir, "': ", kManifest, ": ", args...);
}

uint64_t manifest_u64(const json& v, const std::string& dir, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  bad_manifest(dir, what, " must be a non-negative integer, got ", v.dump());
}

}  // namespace

// ---- writing ------------------------------------------------------------------------------

CheckpointWriter::CheckpointWriter(std::string path) : path_(std::move(path)) {
  while (path_.size() > 1 && path_.back() == '/') path_.pop_back();
  const fs::path parent = fs::path(path_).parent_path();
  std::error_code ec;
  TRIDENT_CHECK(parent.empty() || fs::is_directory(parent, ec), "checkpoint '", path_, "': the folder '", parent.string(),
                "' does not exist");
  TRIDENT_CHECK(!fs::exists(fs::symlink_status(path_, ec)) || fs::is_directory(fs::symlink_status(path_, ec)),
                "checkpoint '", path_, "' exists and is not a directory");
  tmp_ = temporary_sibling(path_, "tmp");
  TRIDENT_CHECK(::mkdir(tmp_.c_str(), 0755) == 0, "checkpoint '", path_, "': cannot create the temporary directory '", tmp_,
                "': ", os_error(errno));
}

CheckpointWriter::~CheckpointWriter() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
}

void CheckpointWriter::add_file(const std::string& file, const FileDigest& d) { files_[file] = {d.size, d.crc32c}; }

void CheckpointWriter::write_tensors(const std::string& part, const StateDict& tensors, const StringMap& metadata) {
  const std::string file = tensor_file(part);
  add_file(file, save_safetensors((fs::path(tmp_) / file).string(), tensors, metadata));
}

void CheckpointWriter::write_tensor_stream(const std::string& part, const TensorStream& tensors, const StringMap& metadata) {
  const std::string file = tensor_file(part);
  add_file(file, save_safetensors_streamed((fs::path(tmp_) / file).string(), tensors, metadata));
}

std::string CheckpointWriter::tensor_file(const std::string& part) const {
  TRIDENT_CHECK(!committed_, "checkpoint '", path_, "': write_tensors after commit");
  TRIDENT_CHECK(valid_name(part), "checkpoint '", path_, "': bad part name '", part,
                "' (use letters, digits, '_', '.', '-', not starting with '.')");
  const std::string file = part + ".safetensors";
  TRIDENT_CHECK(!files_.count(file), "checkpoint '", path_, "': part '", part, "' written twice");
  return file;
}

void CheckpointWriter::write_json(const std::string& part, const json& doc) {
  TRIDENT_CHECK(!committed_, "checkpoint '", path_, "': write_json after commit");
  TRIDENT_CHECK(valid_name(part) && part != "manifest", "checkpoint '", path_, "': bad part name '", part,
                "' (use letters, digits, '_', '.', '-', not starting with '.'; 'manifest' is reserved)");
  const std::string file = part + ".json";
  TRIDENT_CHECK(!files_.count(file), "checkpoint '", path_, "': part '", part, "' written twice");
  std::string text;
  try {
    text = doc.dump(2) + "\n";
  } catch (const json::exception& e) {
    TRIDENT_FAIL("checkpoint '", path_, "': JSON part '", part, "' cannot be written: ", e.what());
  }
  add_file(file, write_file_atomically((fs::path(tmp_) / file).string(),
                                       [&](OutputFile& f) { f.write(text.data(), text.size()); }));
}

void CheckpointWriter::commit() {
  TRIDENT_CHECK(!committed_, "checkpoint '", path_, "': committed twice");
  const auto now = std::chrono::system_clock::now();
  json manifest = json::object();
  manifest["format"] = kFormat;
  manifest["format_version"] = kCheckpointFormatVersion;
  manifest["created"] = utc_iso8601(now);
  manifest["created_unix_ns"] =
      static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
  json files = json::array();
  for (const auto& [name, e] : files_) files.push_back({{"name", name}, {"size", e.size}, {"crc32c", e.crc32c}});
  manifest["files"] = std::move(files);
  const std::string text = manifest.dump(2) + "\n";
  // The manifest goes last: a directory with a valid manifest has every file complete.
  write_file_atomically((fs::path(tmp_) / kManifest).string(), [&](OutputFile& f) { f.write(text.data(), text.size()); });
  internal::publish_checkpoint_directory(tmp_, path_, true);
  committed_ = true;
  const fs::path parent = fs::path(path_).parent_path();
  fsync_directory(parent.empty() ? "." : parent.string());
}

// ---- reading ------------------------------------------------------------------------------

CheckpointManifest read_checkpoint_manifest(const std::string& dir) {
  const std::string file = (fs::path(dir) / kManifest).string();
  std::string text;
  {
    std::error_code ec;
    TRIDENT_CHECK(fs::is_directory(dir, ec), "checkpoint '", dir, "' is not a directory");
    TRIDENT_CHECK(fs::exists(file, ec), "checkpoint '", dir, "' has no ", kManifest, " (incomplete or not a checkpoint)");
    InputFile f(file);
    TRIDENT_CHECK(f.size() <= (uint64_t(64) << 20), "checkpoint '", dir, "': ", kManifest, " is ", f.size(),
                  " bytes, more than a manifest can be");
    text.resize(static_cast<size_t>(f.size()));
    f.read_at(0, text.data(), text.size());
  }
  json m;
  try {
    m = json::parse(text);
  } catch (const json::exception& e) {
    bad_manifest(dir, "not valid JSON: ", e.what());
  }
  if (!m.is_object()) bad_manifest(dir, "must be a JSON object");
  if (!m.contains("format") || m.at("format") != kFormat) bad_manifest(dir, "\"format\" is not \"", kFormat, "\"");
  CheckpointManifest out;
  const uint64_t version = manifest_u64(m.value("format_version", json()), dir, "\"format_version\"");
  if (version > static_cast<uint64_t>(kCheckpointFormatVersion))
    bad_manifest(dir, "format version ", version, " is newer than this build reads (", kCheckpointFormatVersion, ")");
  out.format_version = static_cast<int>(version);
  if (m.contains("created") && m.at("created").is_string()) out.created = m.at("created").get<std::string>();
  const json ns = m.value("created_unix_ns", json());
  if (!ns.is_number_integer()) bad_manifest(dir, "\"created_unix_ns\" must be an integer");
  out.created_unix_ns = ns.is_number_unsigned() && ns.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : ns.get<int64_t>();
  if (!m.contains("files") || !m.at("files").is_array()) bad_manifest(dir, "\"files\" must be an array");
  std::set<std::string> seen;
  for (const json& f : m.at("files")) {
    if (!f.is_object() || !f.contains("name") || !f.at("name").is_string())
      bad_manifest(dir, "every entry of \"files\" needs a string \"name\", got ", f.dump());
    CheckpointFileInfo info;
    info.name = f.at("name").get<std::string>();
    // Names come from a file: nothing that could leave the directory ('/', "..") is accepted.
    if (!valid_name(info.name) || !(ends_with(info.name, ".safetensors") || ends_with(info.name, ".json")) ||
        info.name == kManifest)
      bad_manifest(dir, "bad file name '", info.name, "'");
    if (!seen.insert(info.name).second) bad_manifest(dir, "file '", info.name, "' listed twice");
    info.size = manifest_u64(f.value("size", json()), dir, "size of '" + info.name + "'");
    const uint64_t crc = manifest_u64(f.value("crc32c", json()), dir, "crc32c of '" + info.name + "'");
    if (crc > 0xFFFFFFFFull) bad_manifest(dir, "crc32c of '", info.name, "' is ", crc, ", not a 32-bit value");
    info.crc32c = static_cast<uint32_t>(crc);
    out.files.push_back(std::move(info));
  }
  return out;
}

namespace {
void verify_files(const std::string& dir, const CheckpointManifest& m, bool checksums) {
  for (const CheckpointFileInfo& f : m.files) {
    const std::string path = (fs::path(dir) / f.name).string();
    struct stat st {};
    TRIDENT_CHECK(::stat(path.c_str(), &st) == 0, "checkpoint '", dir, "': file '", f.name, "' listed in the manifest is missing");
    TRIDENT_CHECK(S_ISREG(st.st_mode), "checkpoint '", dir, "': '", f.name, "' is not a regular file");
    TRIDENT_CHECK(static_cast<uint64_t>(st.st_size) == f.size, "checkpoint '", dir, "': file '", f.name, "' is ",
                  st.st_size, " bytes, the manifest says ", f.size, " (truncated or replaced)");
    if (checksums) {
      const FileDigest d = digest_file(path);
      TRIDENT_CHECK(d.size == f.size && d.crc32c == f.crc32c, "checkpoint '", dir, "': file '", f.name,
                    "' is corrupt: CRC32C ", d.crc32c, ", the manifest says ", f.crc32c);
    }
  }
}
}  // namespace

void verify_checkpoint(const std::string& path, bool checksums) {
  verify_files(path, read_checkpoint_manifest(path), checksums);
}

Checkpoint read_checkpoint(const std::string& path, LoadMode mode) {
  Checkpoint c;
  c.path = path;
  c.manifest = read_checkpoint_manifest(path);
  verify_files(path, c.manifest, true);
  for (const CheckpointFileInfo& f : c.manifest.files) {
    const std::string file = (fs::path(path) / f.name).string();
    if (ends_with(f.name, ".safetensors")) {
      c.tensors.emplace(f.name.substr(0, f.name.size() - 12), load_safetensors(file, mode));
    } else {
      InputFile in(file);
      std::string text(static_cast<size_t>(in.size()), '\0');
      in.read_at(0, text.data(), text.size());
      try {
        c.documents.emplace(f.name.substr(0, f.name.size() - 5), json::parse(text));
      } catch (const json::exception& e) {
        TRIDENT_FAIL("checkpoint '", path, "': '", f.name, "' is not valid JSON: ", e.what());
      }
    }
  }
  return c;
}

std::vector<std::string> list_checkpoints(const std::string& folder) {
  std::error_code ec;
  if (!fs::exists(folder, ec)) return {};
  TRIDENT_CHECK(fs::is_directory(folder, ec), "list_checkpoints: '", folder, "' is not a directory");
  struct Found {
    int64_t created;
    std::string name;
    std::string path;
  };
  std::vector<Found> found;
  for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || !e.is_directory(ec)) continue;
    try {
      const CheckpointManifest m = read_checkpoint_manifest(e.path().string());
      verify_files(e.path().string(), m, false);
      found.push_back({m.created_unix_ns, name, e.path().string()});
    } catch (const Error&) {
      // Incomplete or foreign: not a checkpoint.
    }
  }
  TRIDENT_CHECK(!ec, "list_checkpoints: cannot list '", folder, "': ", ec.message());
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.created != b.created ? a.created > b.created : a.name > b.name;
  });
  std::vector<std::string> out;
  for (Found& f : found) out.push_back(std::move(f.path));
  return out;
}

std::optional<std::string> latest_checkpoint(const std::string& folder) {
  std::vector<std::string> all = list_checkpoints(folder);
  if (all.empty()) return std::nullopt;
  return all.front();
}

}  // namespace trident::nn
