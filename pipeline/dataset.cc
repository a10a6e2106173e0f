#include "pipeline/dataset.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pipeline/tar.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace prepflow {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(what, ": ", std::strerror(err)));
}

std::string LowerExtension(const std::string& name) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return absl::AsciiStrToLower(name.substr(dot + 1));
}

// torchvision.datasets.folder.IMG_EXTENSIONS
bool IsImageExtension(const std::string& ext) {
  static const char* const kExts[] = {"jpg", "jpeg", "png",  "ppm", "bmp",
                                      "pgm", "tif",  "tiff", "webp"};
  for (const char* e : kExts) {
    if (ext == e) return true;
  }
  return false;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Entries of `dir` (no "." or ".."), following symlinks for the type.
absl::Status ListDir(const std::string& dir, std::vector<std::string>* dirs,
                     std::vector<std::string>* files) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, absl::StrCat("cannot list ", dir));
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (stat(absl::StrCat(dir, "/", name).c_str(), &st) != 0) continue;  // dangling link
    if (S_ISDIR(st.st_mode)) {
      if (dirs) dirs->push_back(name);
    } else if (files) {
      files->push_back(name);
    }
  }
  closedir(d);
  return absl::OkStatus();
}

absl::Status ReadFile(int fd, const std::string& path, int64_t max_bytes, Buffer* out,
                      size_t* size) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot stat ", path));
  }
  if (st.st_size > max_bytes) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s is %d bytes, over the limit of %d (--max-file-bytes)", path, st.st_size, max_bytes));
  }
  const size_t want = static_cast<size_t>(st.st_size);
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

class ImageFolderDataset : public Dataset {
 public:
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(
      const std::string& root, const std::function<void(Dataset*)>& configure) {
    auto ds = std::unique_ptr<ImageFolderDataset>(new ImageFolderDataset);
    configure(ds.get());
    ds->root_ = root;
    std::vector<std::string> class_dirs;
    if (absl::Status s = ListDir(root, &class_dirs, nullptr); !s.ok()) return s;
    std::sort(class_dirs.begin(), class_dirs.end());
    if (class_dirs.empty()) {
      return absl::NotFoundError(absl::StrCat("no class folders in ", root,
                                              " (ImageFolder expects root/<class>/<image>)"));
    }
    for (size_t c = 0; c < class_dirs.size(); ++c) {
      ds->classes_.push_back(class_dirs[c]);
      // os.walk visits directories; torchvision sorts the (dir, files) tuples
      // by directory path and each directory's files by name.
      std::vector<std::string> walk = {class_dirs[c]};
      for (size_t i = 0; i < walk.size() && walk.size() < 1'000'000; ++i) {
        std::vector<std::string> sub;
        if (absl::Status s = ListDir(absl::StrCat(root, "/", walk[i]), &sub, nullptr); !s.ok()) {
          return s;
        }
        for (const std::string& d : sub) walk.push_back(absl::StrCat(walk[i], "/", d));
      }
      std::sort(walk.begin(), walk.end());
      for (const std::string& dir : walk) {
        std::vector<std::string> files;
        if (absl::Status s = ListDir(absl::StrCat(root, "/", dir), nullptr, &files); !s.ok()) {
          return s;
        }
        std::sort(files.begin(), files.end());
        for (const std::string& f : files) {
          if (!IsImageExtension(LowerExtension(f))) continue;
          ds->paths_.push_back(absl::StrCat(dir, "/", f));
          ds->labels_.push_back(static_cast<int64_t>(c));
        }
      }
    }
    if (ds->paths_.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no image files (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp) under ", root));
    }
    return ds;
  }

  const char* format() const override { return "imagefolder"; }
  std::string SamplePath(int64_t i) const override { return absl::StrCat(root_, "/", paths_[i]); }
  std::string Extension(int64_t i) const override { return LowerExtension(paths_[i]); }
  absl::Status Read(int64_t i, Buffer* out, size_t* size) const override {
    const std::string path = SamplePath(i);
    absl::StatusOr<int> fd = OpenForRead(path);
    if (!fd.ok()) return fd.status();
    return ReadFile(*fd, path, max_file_bytes_, out, size);
  }

 private:
  std::vector<std::string> paths_;  // relative to root
};

class WebDataset : public Dataset {
 public:
  ~WebDataset() override {
    for (const Shard& s : shards_) close(s.fd);
  }

  static absl::StatusOr<std::unique_ptr<Dataset>> Open(
      const std::string& path, const std::function<void(Dataset*)>& configure) {
    auto ds = std::unique_ptr<WebDataset>(new WebDataset);
    configure(ds.get());
    ds->root_ = path;
    std::vector<std::string> shard_paths;
    if (IsDirectory(path)) {
      std::vector<std::string> files;
      if (absl::Status s = ListDir(path, nullptr, &files); !s.ok()) return s;
      std::sort(files.begin(), files.end());
      for (const std::string& f : files) {
        if (absl::EndsWith(f, ".tar")) shard_paths.push_back(absl::StrCat(path, "/", f));
      }
      if (shard_paths.empty()) return absl::NotFoundError(absl::StrCat("no .tar shards in ", path));
    } else {
      shard_paths.push_back(path);
    }
    for (const std::string& shard_path : shard_paths) {
      if (absl::Status s = ds->Index(shard_path); !s.ok()) return s;
    }
    if (ds->samples_.empty()) {
      return absl::NotFoundError(
          absl::StrCat("no images (key.jpg, key.png, ...) in the shards at ", path));
    }
    return ds;
  }

  const char* format() const override { return "wds"; }
  std::string SamplePath(int64_t i) const override {
    const Entry& e = samples_[i];
    return absl::StrCat(shards_[e.shard].path, ":", e.name);
  }
  std::string Extension(int64_t i) const override { return LowerExtension(samples_[i].name); }
  absl::Status Read(int64_t i, Buffer* out, size_t* size) const override {
    const Entry& e = samples_[i];
    if (absl::Status s = CheckSize(e.size, SamplePath(i)); !s.ok()) return s;
    uint8_t* p = out->Reserve(e.size == 0 ? 1 : e.size);
    size_t done = 0;
    while (done < e.size) {
      const ssize_t n =
          pread(shards_[e.shard].fd, p + done, e.size - done, static_cast<off_t>(e.offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, absl::StrCat("cannot read ", SamplePath(i)));
      }
      if (n == 0) return absl::DataLossError(absl::StrCat(SamplePath(i), ": shard ends early"));
      done += static_cast<size_t>(n);
    }
    *size = done;
    return absl::OkStatus();
  }

 private:
  struct Shard {
    std::string path;
    int fd;
  };
  struct Entry {
    int shard;
    std::string name;
    uint64_t offset, size;
  };

  absl::Status Index(const std::string& path) {
    absl::StatusOr<int> opened = OpenForRead(path);
    if (!opened.ok()) return opened.status();
    const int fd = *opened;
    const int shard = static_cast<int>(shards_.size());
    shards_.push_back({path, fd});

    // Members of one sample are adjacent; flush a sample when the key changes.
    std::string key;
    Entry image{};
    bool has_image = false;
    int64_t label = -1;
    auto flush = [&]() -> absl::Status {
      if (has_image) {
        samples_.push_back(image);
        labels_.push_back(label);
      }
      has_image = false;
      label = -1;
      return absl::OkStatus();
    };
    absl::Status s = ScanTar(fd, path, [&](const TarMember& m) -> absl::Status {
      const size_t slash = m.name.rfind('/');
      const size_t dot = m.name.find('.', slash == std::string::npos ? 0 : slash + 1);
      const std::string k = m.name.substr(0, dot);
      const std::string ext =
          dot == std::string::npos ? "" : absl::AsciiStrToLower(m.name.substr(dot + 1));
      if (k != key) {
        if (absl::Status f = flush(); !f.ok()) return f;
        key = k;
      }
      if (IsImageExtension(ext) && !has_image) {
        image = Entry{shard, m.name, m.offset, m.size};
        has_image = true;
      } else if (ext == "cls" || ext == "label") {
        char text[32] = {};
        if (m.size == 0 || m.size >= sizeof(text) ||
            pread(fd, text, m.size, static_cast<off_t>(m.offset)) != static_cast<ssize_t>(m.size) ||
            !absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &label) || label < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ":", m.name, ": label is not a non-negative integer"));
        }
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return flush();
  }

  std::vector<Shard> shards_;
  std::vector<Entry> samples_;
};

bool HasTarFiles(const std::string& dir) {
  std::vector<std::string> files;
  if (!ListDir(dir, nullptr, &files).ok()) return false;
  return std::any_of(files.begin(), files.end(),
                     [](const std::string& f) { return absl::EndsWith(f, ".tar"); });
}

}  // namespace

Dataset::~Dataset() {
  if (confine_fd_ >= 0) close(confine_fd_);
}

absl::StatusOr<int> Dataset::OpenForRead(const std::string& path) const {
  int fd;
  if (confine_fd_ < 0) {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } else {
    if (path.compare(0, confine_root_.size() + 1, confine_root_ + "/") != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, " is outside the data root ", confine_root_));
    }
    open_how how = {};
    how.flags = O_RDONLY | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    const std::string rel = path.substr(confine_root_.size() + 1);
    fd = static_cast<int>(syscall(SYS_openat2, confine_fd_, rel.c_str(), &how, sizeof(how)));
    if (fd < 0 && errno == EXDEV) {
      return absl::PermissionDeniedError(absl::StrCat(path, " resolves outside the data root ",
                                                      confine_root_, " (symlink or ..)"));
    }
  }
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", path));
  return fd;
}

absl::Status Dataset::CheckSize(uint64_t size, const std::string& path) const {
  if (size <= static_cast<uint64_t>(max_file_bytes_)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s is %d bytes, over the limit of %d (--max-file-bytes)", path, size, max_file_bytes_));
}

absl::StatusOr<proto::DatasetSpec::Format> ParseDatasetFormat(const std::string& name) {
  if (name == "auto") return proto::DatasetSpec::FORMAT_AUTO;
  if (name == "imagefolder") return proto::DatasetSpec::FORMAT_IMAGEFOLDER;
  if (name == "wds" || name == "webdataset") return proto::DatasetSpec::FORMAT_WEBDATASET;
  return absl::InvalidArgumentError(
      absl::StrCat("--format: '", name, "' is not one of auto, imagefolder, wds"));
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const proto::DatasetSpec& spec,
                                                     const DatasetOptions& options) {
  std::string path = spec.path();
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty()) return absl::InvalidArgumentError("dataset path is empty (--data)");
  std::string confine_root;
  int confine_fd = -1;
  if (!options.confine_to.empty()) {
    char root_real[PATH_MAX], path_real[PATH_MAX];
    if (realpath(options.confine_to.c_str(), root_real) == nullptr) {
      return ErrnoStatus(errno, absl::StrCat("data root ", options.confine_to));
    }
    if (path.empty() || path[0] != '/') {
      return absl::PermissionDeniedError(absl::StrCat(
          "dataset path '", path, "' must be absolute (below the data root ", root_real, ")"));
    }
    confine_root = root_real;
    if (confine_root == "/") confine_root.clear();
    const bool resolved = realpath(path.c_str(), path_real) != nullptr;
    const std::string resolved_path = resolved ? path_real : "";
    if (!resolved || (resolved_path != root_real &&
                      resolved_path.compare(0, confine_root.size() + 1, confine_root + "/") != 0)) {
      // Say the same whether the path is missing or outside: nothing about
      // the file system beyond the root leaks to a client.
      return absl::PermissionDeniedError(
          absl::StrCat("dataset path ", path, " is not below the data root ", root_real));
    }
    path = path_real;
    confine_fd = open(root_real, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (confine_fd < 0)
      return ErrnoStatus(errno, absl::StrCat("cannot open data root ", root_real));
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (confine_fd >= 0) close(confine_fd);
    return ErrnoStatus(errno, absl::StrCat("dataset ", path));
  }
  proto::DatasetSpec::Format format = spec.format();
  if (format == proto::DatasetSpec::FORMAT_AUTO) {
    const bool wds = S_ISDIR(st.st_mode) ? HasTarFiles(path) : absl::EndsWith(path, ".tar");
    format = wds ? proto::DatasetSpec::FORMAT_WEBDATASET : proto::DatasetSpec::FORMAT_IMAGEFOLDER;
  }
  if (spec.max_file_bytes() < 0 ||
      (format != proto::DatasetSpec::FORMAT_WEBDATASET && !S_ISDIR(st.st_mode))) {
    if (confine_fd >= 0) close(confine_fd);
    return spec.max_file_bytes() < 0
               ? absl::InvalidArgumentError("--max-file-bytes: must be >= 0 (0: the default)")
               : absl::InvalidArgumentError(
                     absl::StrCat("dataset ", path, " is not a folder (ImageFolder)"));
  }
  // The confinement is in place before the first file is opened; the dataset
  // owns confine_fd from here on.
  auto configure = [&](Dataset* ds) {
    ds->confine_root_ = confine_root;
    ds->confine_fd_ = confine_fd;
    if (spec.max_file_bytes() > 0) ds->max_file_bytes_ = spec.max_file_bytes();
  };
  absl::StatusOr<std::unique_ptr<Dataset>> ds = format == proto::DatasetSpec::FORMAT_WEBDATASET
                                                    ? WebDataset::Open(path, configure)
                                                    : ImageFolderDataset::Open(path, configure);
  if (!ds.ok()) return ds;
  // Fingerprint: the format, then (relative path, label) of every sample.
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const std::string format_name = (*ds)->format();
  XXH3_64bits_update(&state, format_name.data(), format_name.size());
  for (int64_t i = 0; i < (*ds)->size(); ++i) {
    const std::string rel = (*ds)->SamplePath(i).substr((*ds)->root().size());
    const int64_t label = (*ds)->label(i);
    XXH3_64bits_update(&state, rel.c_str(), rel.size() + 1);  // with the NUL
    XXH3_64bits_update(&state, &label, sizeof(label));
  }
  (*ds)->fingerprint_ = XXH3_64bits_digest(&state);
  return ds;
}

absl::StatusOr<PackStats> PackWebDataset(const Dataset& dataset, const PackOptions& options,
                                         const std::function<void(const PackStats&)>& progress) {
  if (options.samples_per_shard <= 0) {
    return absl::InvalidArgumentError("--shard-samples: must be positive");
  }
  if (mkdir(options.out_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat("cannot create ", options.out_dir));
  }
  PackStats stats;
  Buffer buf;
  TarWriter writer;
  std::string shard_path;
  auto finish_shard = [&]() -> absl::Status {
    if (shard_path.empty()) return absl::OkStatus();
    if (absl::Status s = writer.Close(); !s.ok()) return s;
    stats.bytes += writer.bytes_written();
    const std::string tmp = absl::StrCat(shard_path, ".tmp");
    if (std::rename(tmp.c_str(), shard_path.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("cannot rename ", tmp));
    }
    shard_path.clear();
    return absl::OkStatus();
  };
  for (int64_t i = 0; i < dataset.size(); ++i) {
    if (i % options.samples_per_shard == 0) {
      if (absl::Status s = finish_shard(); !s.ok()) return s;
      shard_path = absl::StrFormat("%s/%s-%06d.tar", options.out_dir, options.prefix, stats.shards);
      if (absl::Status s = writer.Open(absl::StrCat(shard_path, ".tmp")); !s.ok()) return s;
      ++stats.shards;
    }
    size_t size = 0;
    if (absl::Status s = dataset.Read(i, &buf, &size); !s.ok()) return s;
    std::string ext = dataset.Extension(i);
    if (ext.empty()) ext = "jpg";
    const std::string key = absl::StrFormat("%09d", i);
    if (absl::Status s = writer.Add(absl::StrCat(key, ".", ext), buf.data(), size); !s.ok())
      return s;
    const std::string label = absl::StrCat(dataset.label(i));
    if (absl::Status s = writer.Add(absl::StrCat(key, ".cls"), label.data(), label.size());
        !s.ok()) {
      return s;
    }
    ++stats.samples;
    if (progress) progress(stats);
  }
  if (absl::Status s = finish_shard(); !s.ok()) return s;
  return stats;
}

}  // namespace prepflow
