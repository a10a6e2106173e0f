#include "pipeline/data/pack.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeline/data/braces.h"
#include "pipeline/data/shard_index.h"
#include "pipeline/data/tar.h"

namespace prepflow {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(what, ": ", std::strerror(err)));
}

// The names in folder `dir` (no "." or "..").
absl::StatusOr<std::vector<std::string>> Names(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, absl::StrCat("cannot list ", dir));
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Makes `dir` ready for new shards: created if missing (parents too); refused when it holds
// anything, unless `overwrite`, which removes its shards and sidecars.
absl::Status PrepareOutput(const std::string& dir, bool overwrite) {
  std::error_code error;
  if (std::filesystem::create_directories(dir, error)) return absl::OkStatus();
  if (error) return ErrnoStatus(error.value(), absl::StrCat("cannot create ", dir));
  absl::StatusOr<std::vector<std::string>> names = Names(dir);
  if (!names.ok()) return names.status();
  if (names->empty()) return absl::OkStatus();
  if (!overwrite) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is not empty (%d entries, e.g. %s): shards left there would be read back with the "
        "new ones; choose an empty folder or pass --overwrite to replace its shards",
        dir, names->size(), names->front()));
  }
  for (const std::string& name : *names) {
    if (!absl::EndsWith(name, ".tar") && !absl::EndsWith(name, ".tar.idx")) continue;
    const std::string path = absl::StrCat(dir, "/", name);
    if (std::remove(path.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("cannot remove ", path));
    }
  }
  return absl::OkStatus();
}

// A shard being written, with its index.
class ShardWriter {
 public:
  absl::Status Open(const std::string& path) {
    path_ = path;
    index_ = ShardIndex();
    return writer_.Open(absl::StrCat(path, ".tmp"));
  }
  bool open() const { return !path_.empty(); }
  absl::Status Add(const std::string& name, const void* data, size_t size,
                   const std::string& text) {
    if (absl::Status s = writer_.Add(name, data, size); !s.ok()) return s;
    const TarMember& m = writer_.members().back();
    index_.members.push_back({m.name, m.offset, m.size, text});
    return absl::OkStatus();
  }
  // Completes the shard and its sidecar, handing each to `finished` (when
  // set); adds the shard's bytes to `*bytes`.
  absl::Status Finish(uint64_t* bytes,
                      const std::function<absl::Status(const std::string&)>& finished) {
    if (absl::Status s = writer_.Close(); !s.ok()) return s;
    const std::string tmp = absl::StrCat(path_, ".tmp");
    if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("cannot rename ", tmp));
    }
    index_.shard_bytes = writer_.bytes_written();
    *bytes += writer_.bytes_written();
    const std::string path = path_;
    path_.clear();
    if (absl::Status s = WriteFileAtomically(SidecarName(path), FormatShardIndex(index_));
        !s.ok()) {
      return s;
    }
    if (!finished) return absl::OkStatus();
    if (absl::Status s = finished(path); !s.ok()) return s;
    return finished(SidecarName(path));
  }
  // After a failure: the partial shard is removed.
  void Abandon() {
    if (path_.empty()) return;
    writer_.Abandon();
    std::remove(absl::StrCat(path_, ".tmp").c_str());
    path_.clear();
  }

 private:
  TarWriter writer_;
  std::string path_;
  ShardIndex index_;
};

// The local shards `spec` names: a .tar file, a folder's .tar files, or a
// brace pattern's.
absl::StatusOr<std::vector<std::string>> LocalShards(const std::string& spec) {
  struct stat st;
  if (HasBraces(spec) && stat(spec.c_str(), &st) != 0) {
    absl::StatusOr<std::vector<std::string>> names = ExpandBraces(spec);
    return names;
  }
  if (stat(spec.c_str(), &st) != 0) return ErrnoStatus(errno, spec);
  if (!S_ISDIR(st.st_mode)) return std::vector<std::string>{spec};
  absl::StatusOr<std::vector<std::string>> names = Names(spec);
  if (!names.ok()) return names.status();
  std::vector<std::string> shards;
  for (const std::string& name : *names) {
    if (absl::EndsWith(name, ".tar")) shards.push_back(absl::StrCat(spec, "/", name));
  }
  if (shards.empty()) return absl::NotFoundError(absl::StrCat("no .tar shards in ", spec));
  return shards;
}

// Sample i's members: "%09d.<ext>" (`bytes`), "%09d.txt" (its transcript,
// where the dataset has them), "%09d.cls" (its label, where it has one) and
// "%09d.class" (its class's name, where the dataset has names).
absl::Status AddSample(const Dataset& dataset, int64_t i, const std::string& bytes,
                       const std::string& ext, ShardWriter* shard) {
  const std::string key = absl::StrFormat("%09d", i);
  if (absl::Status s = shard->Add(absl::StrCat(key, ".", ext), bytes.data(), bytes.size(), "");
      !s.ok()) {
    return s;
  }
  if (dataset.has_texts()) {
    const std::string& text = dataset.text(i);
    if (text.size() > kMaxTranscriptBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(dataset.SamplePath(i), ": its transcript of ", text.size(),
                       " bytes is over the ", kMaxTranscriptBytes, " a shard index carries"));
    }
    if (absl::Status s = shard->Add(absl::StrCat(key, ".txt"), text.data(), text.size(), text);
        !s.ok()) {
      return s;
    }
  }
  if (dataset.label(i) < 0) return absl::OkStatus();  // none: no .cls
  const std::string label = absl::StrCat(dataset.label(i));
  if (absl::Status s = shard->Add(absl::StrCat(key, ".cls"), label.data(), label.size(), label);
      !s.ok()) {
    return s;
  }
  // The class's name too, so that the shards keep what the folder names.
  if (const std::vector<std::string>& classes = dataset.classes();
      dataset.label(i) >= 0 && dataset.label(i) < static_cast<int64_t>(classes.size())) {
    const std::string& name = classes[dataset.label(i)];
    if (name.size() <= kMaxClassNameBytes) {
      return shard->Add(absl::StrCat(key, ".class"), name.data(), name.size(), name);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  // Unique per process and call: two writers of one path (two workers
  // caching the same index) never share a temporary file.
  static std::atomic<uint64_t> calls{0};
  const std::string tmp = absl::StrCat(path, ".", getpid(), ".", calls++, ".tmp");
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return ErrnoStatus(errno, absl::StrCat("cannot create ", tmp));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !written) {
    std::remove(tmp.c_str());
    return ErrnoStatus(written ? errno : err, absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    std::remove(tmp.c_str());
    return ErrnoStatus(rename_err, absl::StrCat("cannot rename ", tmp));
  }
  return absl::OkStatus();
}

namespace {

// Sample i's member: the file as it is, or what options.make makes of it.
absl::Status MakeMember(const Dataset& dataset, const PackOptions& options, int64_t i,
                        Workspace& ws, std::string* bytes, std::string* ext) {
  if (options.make) return options.make(i, ws, bytes, ext);
  size_t size = 0;
  if (absl::Status s = dataset.Read(i, &ws.encoded, &size); !s.ok()) return s;
  bytes->assign(reinterpret_cast<const char*>(ws.encoded.data()), size);
  *ext = dataset.Extension(i);
  if (ext->empty()) *ext = "jpg";
  return absl::OkStatus();
}

// Makes the members of samples [begin, end) on `threads` threads.
absl::Status MakeMembers(const Dataset& dataset, const PackOptions& options, int64_t begin,
                         int64_t end, std::vector<std::unique_ptr<Workspace>>& workspaces,
                         std::vector<std::string>* bytes, std::vector<std::string>* exts) {
  const auto n = static_cast<size_t>(end - begin);
  bytes->assign(n, "");
  exts->assign(n, "");
  std::vector<absl::Status> status(n);
  std::atomic<size_t> next{0};
  auto work = [&](Workspace& ws) {
    for (size_t k = next++; k < n; k = next++) {
      status[k] = MakeMember(dataset, options, begin + static_cast<int64_t>(k), ws, &(*bytes)[k],
                             &(*exts)[k]);
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workspaces.size(); ++t)
    threads.emplace_back(work, std::ref(*workspaces[t]));
  work(*workspaces[0]);
  for (std::thread& t : threads) t.join();
  for (size_t k = 0; k < n; ++k) {
    if (!status[k].ok()) {
      if (!options.make) return status[k];  // a read's error names the file
      const int64_t i = begin + static_cast<int64_t>(k);
      return absl::Status(status[k].code(), absl::StrCat("sample ", i, " (", dataset.SamplePath(i),
                                                         "): ", status[k].message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PackStats> PackWebDataset(const Dataset& dataset, const PackOptions& options,
                                         const std::function<void(const PackStats&)>& progress) {
  if (options.samples_per_shard <= 0) {
    return absl::InvalidArgumentError("--shard-samples: must be positive");
  }
  if (!options.make && dataset.has_windows()) {
    // (Materializing decodes each window's clip first; the bytes alone
    // would lose them.)
    return absl::FailedPreconditionError(
        "the dataset's samples are parts of videos (start and end times, --clips-per-video), "
        "which shards of whole files cannot keep: pack the videos, and keep the manifest");
  }
  if (absl::Status s = PrepareOutput(options.out_dir, options.overwrite); !s.ok()) return s;
  PackStats stats;
  ShardWriter shard;
  // On any failure (a full disk, an unreadable sample) the partial shard is
  // removed: finished shards stay, and no .tmp file is left behind.
  auto abandon = [&](absl::Status s) {
    shard.Abandon();
    return s;
  };
  std::vector<std::unique_ptr<Workspace>> workspaces;
  for (int t = 0; t < std::max(1, options.threads); ++t) {
    workspaces.push_back(std::make_unique<Workspace>());
  }
  // Members are made a chunk at a time, in parallel, and written in order.
  const int64_t chunk = 64 * static_cast<int64_t>(workspaces.size());
  std::vector<std::string> bytes, exts;
  for (int64_t begin = 0; begin < dataset.size(); begin += chunk) {
    const int64_t end = std::min(dataset.size(), begin + chunk);
    if (absl::Status s = MakeMembers(dataset, options, begin, end, workspaces, &bytes, &exts);
        !s.ok()) {
      return abandon(s);
    }
    for (int64_t i = begin; i < end; ++i) {
      if (i % options.samples_per_shard == 0) {
        if (shard.open()) {
          if (absl::Status s = shard.Finish(&stats.bytes, options.finished); !s.ok()) {
            return abandon(s);
          }
        }
        const std::string path =
            absl::StrFormat("%s/%s-%06d.tar", options.out_dir, options.prefix, stats.shards);
        if (absl::Status s = shard.Open(path); !s.ok()) return abandon(s);
        ++stats.shards;
      }
      if (absl::Status s = AddSample(dataset, i, bytes[i - begin], exts[i - begin], &shard);
          !s.ok()) {
        return abandon(s);
      }
      ++stats.samples;
      if (progress) progress(stats);
    }
  }
  if (shard.open()) {
    if (absl::Status s = shard.Finish(&stats.bytes, options.finished); !s.ok()) return abandon(s);
  }
  return stats;
}

absl::StatusOr<int64_t> IndexShards(const std::vector<std::string>& specs,
                                    const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<std::string> shards;
  for (const std::string& spec : specs) {
    absl::StatusOr<std::vector<std::string>> found = LocalShards(spec);
    if (!found.ok()) return found.status();
    shards.insert(shards.end(), found->begin(), found->end());
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string& path = shards[i];
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat st;
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", path));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
    }
    std::unique_ptr<ByteSource> source = FileSource(fd, path, static_cast<uint64_t>(st.st_size));
    absl::StatusOr<ShardIndex> index = IndexShard(*source);
    if (!index.ok()) return index.status();
    if (!index->broken.ok()) return index->broken;
    if (absl::Status s = WriteFileAtomically(SidecarName(path), FormatShardIndex(*index));
        !s.ok()) {
      return s;
    }
    if (progress) progress(static_cast<int64_t>(i) + 1, static_cast<int64_t>(shards.size()));
  }
  return static_cast<int64_t>(shards.size());
}

}  // namespace prepflow
