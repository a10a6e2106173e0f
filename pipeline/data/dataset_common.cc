// What the dataset layouts share (datasets.h): names, extensions,
// confined opens (and Dataset::OpenForRead over them), and the one friend
// that sets a new dataset's limits, confinement, reads ahead and
// fingerprint. Apart from open_dataset.cc, which opens the layouts, so that
// the layouts need not include it.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/text.h"
#include "pipeline/core/rng.h"
#include "pipeline/data/datasets.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace prepflow {

namespace detail {

absl::Status ErrnoStatus(int err, const std::string& what) {
  return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(what, ": ", std::strerror(err)));
}

absl::Status ReadFile(int fd, const struct stat& st, const std::string& path, int64_t max_bytes,
                      Buffer* out, size_t* size, size_t head) {
  if (st.st_size > max_bytes) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s is %d bytes, over the limit of %d (--max-file-bytes)", path, st.st_size, max_bytes));
  }
  const size_t want = std::min(static_cast<size_t>(st.st_size), head);
  uint8_t* p = out->Reserve(want == 0 ? 1 : want);
  size_t done = 0;
  while (done < want) {
    const ssize_t n = read(fd, p + done, want - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return ErrnoStatus(err, absl::StrCat("cannot read ", path));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  if (done != want) {
    return absl::DataLossError(absl::StrFormat("%s: read %d of %d bytes", path, done, want));
  }
  *size = done;
  return absl::OkStatus();
}

absl::StatusOr<int> OpenConfined(const std::string& root, int root_fd, const std::string& path,
                                 struct stat* st) {
  // O_NONBLOCK: opening a FIFO (or a device) named like an image must not
  // wait for a writer; only regular files are read, and for them the flag
  // changes nothing.
  int fd;
  if (root_fd < 0) {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  } else {
    if (path.compare(0, root.size() + 1, root + "/") != 0) {
      return absl::PermissionDeniedError(absl::StrCat(path, " is outside the data root ", root));
    }
    open_how how = {};
    how.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    const std::string rel = path.substr(root.size() + 1);
    fd = static_cast<int>(syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof(how)));
    if (fd < 0 && errno == EXDEV) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, " resolves outside the data root ", root, " (symlink or ..)"));
    }
  }
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", path));
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  return fd;
}

}  // namespace detail

absl::Status Dataset::ReadHead(int64_t i, size_t max_bytes, Buffer* out, size_t* size,
                               uint64_t* whole) const {
  (void)max_bytes;
  if (absl::Status s = Read(i, out, size); !s.ok()) return s;
  *whole = *size;
  return absl::OkStatus();
}

absl::Status Dataset::ReadMember(int64_t i, const std::string& field, Buffer* out,
                                 size_t* size) const {
  if (field.empty()) return Read(i, out, size);
  return absl::NotFoundError(absl::StrCat(SamplePath(i), ": has no member '", SafeText(field),
                                          "' (", format(),
                                          " samples are one file; records of several fields "
                                          "come from WebDataset shards)"));
}

const std::vector<std::string>& MediaOnly() {
  static const auto* const kMedia = new std::vector<std::string>{""};
  return *kMedia;
}

absl::Status ReadRecord(const Dataset& dataset, const std::vector<std::string>& fields,
                        Workspace& ws, Sample& s, size_t* bytes) {
  *bytes = 0;
  s.fields.clear();
  size_t size = 0;
  if (absl::Status st = dataset.ReadMember(s.index, fields[0], &ws.encoded, &size); !st.ok()) {
    return st;
  }
  *bytes += size;
  s.kind = ValueKind::kEncoded;
  s.data = ws.encoded.data();
  s.size = size;
  s.shape = {static_cast<int64_t>(size)};
  s.sample_rate = 0;
  s.view = ImageView();
  // The other members go through a scratch buffer, whose contents the first
  // stage's output will replace anyway.
  for (size_t f = 1; f < fields.size(); ++f) {
    Buffer* buf = ws.ScratchFor(s.data);
    if (absl::Status st = dataset.ReadMember(s.index, fields[f], buf, &size); !st.ok()) return st;
    *bytes += size;
    StoredField stored;
    stored.name = fields[f];
    stored.shape = {static_cast<int64_t>(size)};
    stored.bytes.assign(reinterpret_cast<const char*>(buf->data()), size);
    s.StoreField(std::move(stored));
  }
  return absl::OkStatus();
}

absl::Status Dataset::ReadLocal(const std::string& path, size_t head, Buffer* out, size_t* size,
                                uint64_t* whole) const {
  struct stat st;
  absl::StatusOr<int> fd = OpenForRead(path, &st);
  if (!fd.ok()) return fd.status();
  *whole = static_cast<uint64_t>(st.st_size);
  return detail::ReadFile(*fd, st, path, max_file_bytes_, out, size, head);
}

absl::StatusOr<int> Dataset::OpenForRead(const std::string& path, struct stat* st) const {
  return detail::OpenConfined(confine_root_, confine_fd_, path, st);
}

std::string detail::SharedFolder(const std::vector<std::string>& paths) {
  std::string shared;
  for (size_t i = 0; i < paths.size(); ++i) {
    const size_t slash = paths[i].rfind('/');
    const std::string dir = slash == std::string::npos ? "." : paths[i].substr(0, slash);
    if (i == 0) {
      shared = dir;
      continue;
    }
    size_t n = 0;
    while (n < shared.size() && n < dir.size() && shared[n] == dir[n]) ++n;
    // Back to a whole folder name: both continue with '/' there, or end.
    const auto boundary = [n](const std::string& d) { return n == d.size() || d[n] == '/'; };
    while (n > 0 && !(boundary(shared) && boundary(dir))) --n;
    shared.resize(n);
  }
  if (shared.empty()) return paths.empty() || paths[0][0] != '/' ? "." : "/";
  return shared;
}

std::string detail::LowerExtension(const std::string& name) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return absl::AsciiStrToLower(name.substr(dot + 1));
}

// torchvision.datasets.folder.IMG_EXTENSIONS
bool detail::IsImageExtension(const std::string& ext) {
  // "pfv": a materialized value (pipeline/reuse/materialize.h).
  static const char* const kExts[] = {"jpg", "jpeg", "png",  "ppm",  "bmp",
                                      "pgm", "tif",  "tiff", "webp", "pfv"};
  for (const char* e : kExts) {
    if (ext == e) return true;
  }
  return false;
}

bool detail::IsAudioExtension(const std::string& ext) {
  static const char* const kExts[] = {"wav", "flac", "ogg", "opus", "mp3"};
  for (const char* e : kExts) {
    if (ext == e) return true;
  }
  return false;
}

bool detail::IsVideoExtension(const std::string& ext) {
  static const char* const kExts[] = {"mp4", "m4v", "mov", "webm", "mkv", "avi"};
  for (const char* e : kExts) {
    if (ext == e) return true;
  }
  return false;
}

void detail::DatasetSetup::Limit(Dataset* ds, const proto::DatasetSpec& spec,
                                 const DatasetOptions& options) {
  if (spec.max_file_bytes() > 0) ds->max_file_bytes_ = spec.max_file_bytes();
  ds->require_fields_.assign(spec.require_fields().begin(), spec.require_fields().end());
  ds->store_ = options.store;
}

void detail::DatasetSetup::ReadAheadFor(Dataset* ds, const ReadAheadOptions& options) {
  if (options.requests > 0) ds->read_ahead_ = std::make_unique<ReadAhead>(options);
}

void detail::DatasetSetup::Confine(Dataset* ds, const std::string& root, int fd) {
  ds->confine_root_ = root;
  ds->confine_fd_ = fd;
}

void detail::DatasetSetup::Identify(Dataset* ds, uint64_t fingerprint,
                                    const std::string& location) {
  ds->fingerprint_ = fingerprint;
  ds->location_ = location;
  ds->identity_ = Mix64(fingerprint ^ XXH3_64bits(location.data(), location.size()));
}

}  // namespace prepflow
