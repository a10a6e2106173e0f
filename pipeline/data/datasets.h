// The dataset layouts behind OpenDataset (internal to pipeline/data/; the public
// interface is dataset.h): ImageFolder and WebDataset over local files
// (open_dataset.cc, webdataset.cc) and over objects in remote storage
// (remote_dataset.cc).
//
// Thread-safety: DatasetSetup runs before a dataset is shared; the layouts
// are then as dataset.h says; the functions here are pure.
#ifndef PREPFLOW_PIPELINE_DATA_DATASETS_H_
#define PREPFLOW_PIPELINE_DATA_DATASETS_H_

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeline/data/byte_source.h"
#include "pipeline/data/dataset.h"

namespace prepflow::detail {

// Sets the new dataset's limits and confinement before it reads anything.
using Configure = std::function<void(Dataset*)>;

// What OpenDataset sets on the datasets it makes.
struct DatasetSetup {
  static void Limit(Dataset* ds, const proto::DatasetSpec& spec, const DatasetOptions& options);
  // Below `root`, open as `fd` (the dataset owns it from here on).
  static void Confine(Dataset* ds, const std::string& root, int fd);
  // The fingerprint and the location (a real path or a URL) that make the
  // dataset's identity.
  static void Identify(Dataset* ds, uint64_t fingerprint, const std::string& location);
  // Remote data: reads ahead with `options` (none when options.requests is 0).
  static void ReadAheadFor(Dataset* ds, const ReadAheadOptions& options);
  // `from`'s index with each sample `clips` times, clip k of N (clips.cc).
  static void Expand(Dataset* to, const Dataset& from, int clips);
  // The sources' indexes one after the other (mix.cc).
  static void Concatenate(Dataset* to, const std::vector<const Dataset*>& from);
};

// How a WebDataset reaches its shards.
struct ShardAccess {
  // Opens the shard (or its sidecar) named `name`; called from several
  // threads at once for remote shards.
  std::function<absl::StatusOr<std::unique_ptr<ByteSource>>(const std::string& name)> open;
  // Remote: look for each shard's sidecar index first, and index a shard
  // without one through a window of `window_bytes` (one streaming pass).
  bool remote = false;
  size_t window_bytes = size_t{8} << 20;
  int parallel = 16;  // remote shards opened and indexed at once
  // Where indexes made by a pass are kept, by (URL, size, version), for the
  // next open; empty: not kept.
  std::string cache_dir;
};

// A WebDataset over `shards` (in order), named below `root`.
absl::StatusOr<std::unique_ptr<Dataset>> OpenWebDataset(const std::string& root,
                                                        const std::vector<std::string>& shards,
                                                        const ShardAccess& access,
                                                        const Configure& configure);

// A corpus of lines over `files` (in order): each non-empty line a sample
// (lines.cc).
absl::StatusOr<std::unique_ptr<Dataset>> OpenLines(const std::string& root,
                                                   const std::vector<std::string>& files,
                                                   const ShardAccess& access,
                                                   const Configure& configure);

// A dataset at a URL: one shard, a brace pattern of shards, or a listed
// prefix (of .tar shards, else an ImageFolder of objects).
absl::StatusOr<std::unique_ptr<Dataset>> OpenRemoteDataset(const proto::DatasetSpec& spec,
                                                           const std::string& url,
                                                           const DatasetOptions& options,
                                                           const Configure& configure);

// Whether a file name's extension is one torchvision's ImageFolder reads,
// and that extension (lower case, no dot; empty when none).
bool IsImageExtension(const std::string& ext);
// Whether it is one decode_audio reads (wav flac ogg opus mp3).
bool IsAudioExtension(const std::string& ext);
// Whether it is a container decode_video reads (mp4 m4v mov webm mkv avi).
bool IsVideoExtension(const std::string& ext);
std::string LowerExtension(const std::string& name);

// An errno as a Status: its code, and "`what`: strerror".
absl::Status ErrnoStatus(int err, const std::string& what);

// Opens `path` for reading as Dataset::OpenForRead says, confined below
// `root` (open as `root_fd`) unless root_fd < 0: a file descriptor of a
// regular file, or PermissionDenied when the path leads outside.
absl::StatusOr<int> OpenConfined(const std::string& root, int root_fd, const std::string& path,
                                 struct stat* st);

// Reads the regular file `fd` of `st.st_size` bytes (as OpenForRead found
// it), or its first `head` bytes, into `out` and closes it; over `max_bytes`
// is ResourceExhausted naming --max-file-bytes.
absl::Status ReadFile(int fd, const struct stat& st, const std::string& path, int64_t max_bytes,
                      Buffer* out, size_t* size, size_t head = SIZE_MAX);

// A JSON Lines manifest of audio (manifest.cc): each line's audio_filepath
// (relative to the manifest's folder), duration, text and label.
absl::StatusOr<std::unique_ptr<Dataset>> OpenManifest(const std::string& path,
                                                      const Configure& configure);

// The deepest folder holding every one of `paths` ("." for relative names
// that share none, "/" for absolute ones; for URLs, below the scheme).
std::string SharedFolder(const std::vector<std::string>& paths);

}  // namespace prepflow::detail

#endif  // PREPFLOW_PIPELINE_DATA_DATASETS_H_
