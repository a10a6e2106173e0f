// OpenDataset: a local ImageFolder or WebDataset shards (a file, a folder
// or a brace pattern), confined below a data root when asked; URLs go to
// remote_dataset.cc. The layouts are in datasets.h.
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/text.h"
#include "pipeline/core/record.h"
#include "pipeline/data/braces.h"
#include "pipeline/data/dataset.h"
#include "pipeline/data/datasets.h"
#include "pipeline/data/tar.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace prepflow {
namespace {

using detail::ErrnoStatus;
using detail::IsAudioExtension;
using detail::IsImageExtension;
using detail::IsVideoExtension;
using detail::LowerExtension;
using detail::OpenConfined;
using detail::ReadFile;

// A directory's identity, to notice a symlink that leads back to a folder
// being walked.
struct DirId {
  dev_t dev;
  ino_t ino;
  bool operator==(const DirId& o) const { return dev == o.dev && ino == o.ino; }
};

struct DirEntry {
  std::string name;
  DirId id;
};

// Entries of `dir` (no "." or ".."), following symlinks for the type. An
// entry whose target cannot be stat'ed (dangling, a link to itself) is listed
// as a file, as os.walk does: reading it then fails with a clear error.
absl::Status ListDir(const std::string& dir, std::vector<DirEntry>* dirs,
                     std::vector<std::string>* files) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, absl::StrCat("cannot list ", dir));
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (stat(absl::StrCat(dir, "/", name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      if (dirs) dirs->push_back({name, {st.st_dev, st.st_ino}});
    } else if (files) {
      files->push_back(name);
    }
  }
  closedir(d);
  return absl::OkStatus();
}

class ImageFolderDataset : public Dataset {
 public:
  static constexpr size_t kMaxFolders = 1'000'000;  // per class

  static absl::StatusOr<std::unique_ptr<Dataset>> Open(
      const std::string& root, const std::function<void(Dataset*)>& configure) {
    auto ds = std::unique_ptr<ImageFolderDataset>(new ImageFolderDataset);
    configure(ds.get());
    ds->root_ = root;
    std::vector<DirEntry> class_dirs;
    if (absl::Status s = ListDir(root, &class_dirs, nullptr); !s.ok()) return s;
    std::sort(class_dirs.begin(), class_dirs.end(),
              [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    if (class_dirs.empty()) {
      return absl::NotFoundError(absl::StrCat("no class folders in ", root,
                                              " (ImageFolder expects root/<class>/<image>)"));
    }
    Files audio, video;
    for (size_t c = 0; c < class_dirs.size(); ++c) {
      ds->classes_.push_back(class_dirs[c].name);
      const int64_t label = static_cast<int64_t>(c);
      if (absl::Status s = ds->AddClass(class_dirs[c], label, &audio, &video); !s.ok()) return s;
    }
    if (ds->paths_.empty()) {
      ds->paths_ = std::move(audio.paths);
      ds->labels_ = std::move(audio.labels);
      if (audio.transcribed > 0) ds->texts_ = std::move(audio.texts);
      if (audio.transcribed > 0 && audio.transcribed < ds->paths_.size()) {
        ds->warnings_.push_back(absl::StrCat(ds->paths_.size() - audio.transcribed, " of ",
                                             ds->paths_.size(), " audio files under ", root,
                                             " have no line in a .trans.txt; their text is empty"));
      }
    }
    if (ds->paths_.empty()) {  // videos, as UCF101's and Kinetics' folders hold them
      ds->paths_ = std::move(video.paths);
      ds->labels_ = std::move(video.labels);
    }
    if (ds->paths_.empty()) {
      return absl::NotFoundError(
          absl::StrCat("no image files (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp), "
                       "audio files (.wav .flac .ogg .opus .mp3) or videos (.mp4 .m4v .mov "
                       ".webm .mkv .avi) under ",
                       root));
    }
    return ds;
  }

 private:
  struct Files {
    std::vector<std::string> paths;
    std::vector<int64_t> labels;
    std::vector<std::string> texts;  // from .trans.txt files, "" where none
    size_t transcribed = 0;
  };

  // Adds the image files below class folder `dir` with `label`, and keeps
  // its audio files in `audio` (the samples of a folder with no images) and
  // its videos in `video` (those of a folder with neither).
  absl::Status AddClass(const DirEntry& dir, int64_t label, Files* audio, Files* video) {
    const std::string& root = root_;
    // os.walk visits directories; torchvision sorts the (dir, files) tuples
    // by directory path and each directory's files by name. Unlike os.walk
    // with followlinks, a symlink back to a folder on its own path is not
    // followed (it would repeat the folder's images without end).
    struct Visit {
      std::string path;  // relative to root
      DirId id;
      int parent;  // index in `walk`, -1 for the class folder
    };
    std::vector<Visit> walk = {{dir.name, dir.id, -1}};
    for (size_t i = 0; i < walk.size(); ++i) {
      if (walk.size() > kMaxFolders) {
        return absl::ResourceExhaustedError(
            absl::StrCat(root, "/", dir.name, " holds over ", kMaxFolders,
                         " folders (counting each symlinked one as often as it is reached)"));
      }
      std::vector<DirEntry> sub;
      if (absl::Status s = ListDir(absl::StrCat(root, "/", walk[i].path), &sub, nullptr); !s.ok()) {
        return s;
      }
      for (const DirEntry& d : sub) {
        bool loop = false;
        for (int a = static_cast<int>(i); a >= 0 && !loop; a = walk[a].parent) {
          loop = walk[a].id == d.id;
        }
        const std::string path = absl::StrCat(walk[i].path, "/", d.name);
        if (loop) {
          warnings_.push_back(absl::StrCat(root, "/", path,
                                           " leads back to a folder above it (symlink loop); "
                                           "not followed"));
          continue;
        }
        walk.push_back({path, d.id, static_cast<int>(i)});
      }
    }
    std::sort(walk.begin(), walk.end(),
              [](const Visit& a, const Visit& b) { return a.path < b.path; });
    for (const Visit& dir : walk) {
      // Images; and audio files, the samples of a folder with no images.
      std::vector<std::string> files;
      if (absl::Status s = ListDir(absl::StrCat(root, "/", dir.path), nullptr, &files); !s.ok()) {
        return s;
      }
      std::sort(files.begin(), files.end());
      absl::flat_hash_map<std::string, std::string> transcripts;
      if (absl::Status s = ReadTranscripts(dir.path, files, &transcripts); !s.ok()) return s;
      for (const std::string& f : files) {
        const std::string ext = LowerExtension(f);
        if (IsImageExtension(ext)) {
          paths_.push_back(absl::StrCat(dir.path, "/", f));
          labels_.push_back(label);
        } else if (IsAudioExtension(ext)) {
          audio->paths.push_back(absl::StrCat(dir.path, "/", f));
          audio->labels.push_back(label);
          const auto t = transcripts.find(f.substr(0, f.size() - ext.size() - 1));
          audio->texts.push_back(t != transcripts.end() ? t->second : "");
          audio->transcribed += t != transcripts.end();
        } else if (IsVideoExtension(ext)) {
          video->paths.push_back(absl::StrCat(dir.path, "/", f));
          video->labels.push_back(label);
        }
      }
    }
    return absl::OkStatus();
  }

  // LibriSpeech's transcripts: each "<speaker>-<chapter>.trans.txt" among
  // `files` (in folder `dir`, relative to the root) holds lines
  // "<utterance id> <text>", the id being an audio file's name without its
  // extension.
  absl::Status ReadTranscripts(const std::string& dir, const std::vector<std::string>& files,
                               absl::flat_hash_map<std::string, std::string>* out) const {
    for (const std::string& f : files) {
      if (!absl::EndsWith(f, ".trans.txt")) continue;
      const std::string path = absl::StrCat(root_, "/", dir, "/", f);
      struct stat st;
      absl::StatusOr<int> fd = OpenForRead(path, &st);
      if (!fd.ok()) return fd.status();
      Buffer bytes;
      size_t size = 0;
      if (absl::Status s = ReadFile(*fd, st, path, max_file_bytes_, &bytes, &size); !s.ok()) {
        return s;
      }
      const absl::string_view text(reinterpret_cast<const char*>(bytes.data()), size);
      for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
        line = absl::StripTrailingAsciiWhitespace(line);
        const size_t space = line.find(' ');
        if (space == absl::string_view::npos) continue;  // an id with no text
        (*out)[std::string(line.substr(0, space))] = std::string(line.substr(space + 1));
      }
    }
    return absl::OkStatus();
  }

 public:
  const char* format() const override { return "imagefolder"; }
  std::string SamplePath(int64_t i) const override { return absl::StrCat(root_, "/", paths_[i]); }
  std::string Extension(int64_t i) const override { return LowerExtension(paths_[i]); }
  absl::Status Read(int64_t i, Buffer* out, size_t* size) const override {
    uint64_t whole = 0;
    return ReadLocal(SamplePath(i), SIZE_MAX, out, size, &whole);
  }
  absl::Status ReadHead(int64_t i, size_t max_bytes, Buffer* out, size_t* size,
                        uint64_t* whole) const override {
    return ReadLocal(SamplePath(i), max_bytes, out, size, whole);
  }
  uint64_t SourceVersion(int64_t i) const override {
    struct stat st;
    return stat(SamplePath(i).c_str(), &st) == 0 ? FileVersion(st) : 0;
  }

 private:
  std::vector<std::string> paths_;  // relative to root
};

}  // namespace

namespace {

// A brace pattern in `*path` ("shard-{000000..000099}.tar") names a list of
// shards, unless a file has that very name: fills `shards` and makes `*path`
// the folder they share, the dataset's root.
absl::Status ExpandShardPattern(const proto::DatasetSpec& spec, std::string* path,
                                std::vector<std::string>* shards) {
  struct stat literal;
  if (!HasBraces(*path) || stat(path->c_str(), &literal) == 0) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> names = ExpandBraces(*path);
  if (!names.ok()) return names.status();
  if (spec.format() == proto::DatasetSpec::FORMAT_IMAGEFOLDER) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset ", *path, " is a shard pattern, which names WebDataset shards (--format wds)"));
  }
  for (const std::string& name : *names) {
    if (!absl::EndsWith(name, ".tar")) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset ", *path, " names ", name, ", not a .tar shard"));
    }
  }
  *shards = *std::move(names);
  *path = detail::SharedFolder(*shards);
  if (*path == ".") {  // relative names in different folders: below "./"
    for (std::string& shard : *shards) {
      if (!absl::StartsWith(shard, "./")) shard = absl::StrCat("./", shard);
    }
  }
  return absl::OkStatus();
}

bool HasTarFiles(const std::string& dir) {
  std::vector<std::string> files;
  if (!ListDir(dir, nullptr, &files).ok()) return false;
  return std::any_of(files.begin(), files.end(),
                     [](const std::string& f) { return absl::EndsWith(f, ".tar"); });
}

}  // namespace

namespace {

// Confines a dataset at `*path` (and its `*shards`) below
// options.confine_to: both made real paths below the root, `*root` the root's
// real path ("" for /) and `*fd` an O_PATH descriptor of it. PermissionDenied,
// saying the same whether the path is missing or outside.
absl::Status Confine(const DatasetOptions& options, std::string* path,
                     std::vector<std::string>* shards, std::string* root, int* fd) {
  char root_real[PATH_MAX], path_real[PATH_MAX];
  if (realpath(options.confine_to.c_str(), root_real) == nullptr) {
    return ErrnoStatus(errno, absl::StrCat("data root ", options.confine_to));
  }
  if (path->empty() || (*path)[0] != '/') {
    return absl::PermissionDeniedError(absl::StrCat(
        "dataset path '", *path, "' must be absolute (below the data root ", root_real, ")"));
  }
  *root = root_real;
  if (*root == "/") root->clear();
  const bool resolved = realpath(path->c_str(), path_real) != nullptr;
  const std::string resolved_path = resolved ? path_real : "";
  if (!resolved || (resolved_path != root_real &&
                    resolved_path.compare(0, root->size() + 1, *root + "/") != 0)) {
    // Say the same whether the path is missing or outside: nothing about
    // the file system beyond the root leaks to a client.
    return absl::PermissionDeniedError(
        absl::StrCat("dataset path ", *path, " is not below the data root ", root_real));
  }
  for (std::string& shard : *shards) shard = absl::StrCat(path_real, shard.substr(path->size()));
  *path = path_real;
  *fd = open(root_real, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (*fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open data root ", root_real));
  return absl::OkStatus();
}

// Local files, below the confinement root when there is one.
detail::ShardAccess LocalAccess(const std::string& confine_root, int confine_fd) {
  detail::ShardAccess access;
  access.open = [confine_root, confine_fd](
                    const std::string& name) -> absl::StatusOr<std::unique_ptr<ByteSource>> {
    struct stat st;
    absl::StatusOr<int> fd = OpenConfined(confine_root, confine_fd, name, &st);
    if (!fd.ok()) return fd.status();
    return FileSource(*fd, name, static_cast<uint64_t>(st.st_size));
  };
  return access;
}

// The files a dataset of files reads at `path`: those of a brace pattern
// (`files` as given), a folder's files with one of `suffixes`, sorted, or
// the file itself. NotFound, naming `what`, for a folder with none.
absl::Status FilesAt(const std::string& path, bool folder,
                     std::initializer_list<const char*> suffixes, const char* what,
                     std::vector<std::string>* files) {
  if (!files->empty()) return absl::OkStatus();
  if (!folder) {
    files->push_back(path);
    return absl::OkStatus();
  }
  std::vector<std::string> names;
  if (absl::Status s = ListDir(path, nullptr, &names); !s.ok()) return s;
  std::sort(names.begin(), names.end());
  for (const std::string& f : names) {
    for (const char* suffix : suffixes) {
      if (absl::EndsWith(f, suffix)) {
        files->push_back(absl::StrCat(path, "/", f));
        break;
      }
    }
  }
  if (files->empty()) return absl::NotFoundError(absl::StrCat("no ", what, " in ", path));
  return absl::OkStatus();
}

// Shards (or files of lines) at `path`, opened below the confinement.
absl::StatusOr<std::unique_ptr<Dataset>> OpenFilesAt(const std::string& path, bool folder,
                                                     std::vector<std::string> files,
                                                     const std::string& confine_root,
                                                     int confine_fd, bool lines,
                                                     const detail::Configure& configure) {
  const absl::Status listed =
      lines ? FilesAt(path, folder, {".jsonl", ".txt"}, ".jsonl or .txt files", &files)
            : FilesAt(path, folder, {".tar"}, ".tar shards", &files);
  if (!listed.ok()) {
    if (confine_fd >= 0) close(confine_fd);
    return listed;
  }
  const detail::ShardAccess access = LocalAccess(confine_root, confine_fd);
  return lines ? detail::OpenLines(path, files, access, configure)
               : detail::OpenWebDataset(path, files, access, configure);
}

// A dataset on the local file system at `path` (trailing slashes removed).
absl::StatusOr<std::unique_ptr<Dataset>> OpenLocal(const proto::DatasetSpec& spec, std::string path,
                                                   const DatasetOptions& options,
                                                   const detail::Configure& configure_limits) {
  std::vector<std::string> shards;  // named by a brace pattern
  if (absl::Status st = ExpandShardPattern(spec, &path, &shards); !st.ok()) return st;
  std::string confine_root;
  int confine_fd = -1;
  if (!options.confine_to.empty()) {
    if (absl::Status s = Confine(options, &path, &shards, &confine_root, &confine_fd); !s.ok()) {
      return s;
    }
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (confine_fd >= 0) close(confine_fd);
    return ErrnoStatus(errno, absl::StrCat("dataset ", path));
  }
  proto::DatasetSpec::Format format = spec.format();
  if (format == proto::DatasetSpec::FORMAT_AUTO) {
    const bool wds =
        !shards.empty() || (S_ISDIR(st.st_mode) ? HasTarFiles(path) : absl::EndsWith(path, ".tar"));
    const bool manifest =
        !S_ISDIR(st.st_mode) && (absl::EndsWith(path, ".json") || absl::EndsWith(path, ".jsonl") ||
                                 absl::EndsWith(path, ".csv"));
    format = wds        ? proto::DatasetSpec::FORMAT_WEBDATASET
             : manifest ? proto::DatasetSpec::FORMAT_MANIFEST
                        : proto::DatasetSpec::FORMAT_IMAGEFOLDER;
  }
  // The confinement is in place before the first file is opened; the dataset
  // owns confine_fd from here on.
  auto configure = [&](Dataset* ds) {
    configure_limits(ds);
    detail::DatasetSetup::Confine(ds, confine_root, confine_fd);
  };
  if (format == proto::DatasetSpec::FORMAT_MANIFEST) {
    if (!S_ISDIR(st.st_mode)) return detail::OpenManifest(path, configure);
    if (confine_fd >= 0) close(confine_fd);
    return absl::FailedPreconditionError(
        absl::StrCat("dataset ", path, " is a folder, not a manifest (a .jsonl or .csv file)"));
  }
  if (format == proto::DatasetSpec::FORMAT_LINES) {
    return OpenFilesAt(path, S_ISDIR(st.st_mode), std::move(shards), confine_root, confine_fd,
                       /*lines=*/true, configure);
  }
  if (format != proto::DatasetSpec::FORMAT_WEBDATASET && !S_ISDIR(st.st_mode)) {
    if (confine_fd >= 0) close(confine_fd);
    // Exit code 1, as for a missing folder: the flags were fine, the dataset
    // cannot be opened.
    return absl::FailedPreconditionError(
        absl::StrCat("dataset ", path,
                     " is a file, not a folder: an ImageFolder is a folder of class folders "
                     "(root/<class>/<image>), WebDataset shards are .tar files"));
  }
  if (format != proto::DatasetSpec::FORMAT_WEBDATASET)
    return ImageFolderDataset::Open(path, configure);
  return OpenFilesAt(path, S_ISDIR(st.st_mode), std::move(shards), confine_root, confine_fd,
                     /*lines=*/false, configure);
}

// XXH3 over the format, then every sample's path relative to the root, its
// label and where its bytes lie in a shard (the shard index).
uint64_t Fingerprint(const Dataset& ds) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const std::string format_name = ds.format();
  XXH3_64bits_update(&state, format_name.data(), format_name.size());
  for (int64_t i = 0; i < ds.size(); ++i) {
    const std::string rel = ds.SamplePath(i).substr(ds.root().size());
    const int64_t label = ds.label(i);
    uint64_t extent[2];
    ds.Extent(i, &extent[0], &extent[1]);
    XXH3_64bits_update(&state, rel.c_str(), rel.size() + 1);  // with the NUL
    XXH3_64bits_update(&state, &label, sizeof(label));
    XXH3_64bits_update(&state, extent, sizeof(extent));
    if (ds.has_texts()) XXH3_64bits_update(&state, ds.text(i).c_str(), ds.text(i).size() + 1);
    if (ds.has_windows()) {
      const MediaWindow w = ds.window(i);
      const double times[2] = {w.start, w.end};
      const int32_t clip[2] = {w.clip, w.clips};
      XXH3_64bits_update(&state, times, sizeof(times));
      XXH3_64bits_update(&state, clip, sizeof(clip));
    }
  }
  return XXH3_64bits_digest(&state);
}

// Each source opened as a dataset of its own, then as one.
absl::StatusOr<std::unique_ptr<Dataset>> OpenMix(const proto::DatasetSpec& spec,
                                                 const DatasetOptions& options) {
  if (spec.has_materialized()) {
    return absl::InvalidArgumentError("--mix: materialized data cannot be mixed yet");
  }
  if (spec.mix_size() > kMaxMixSources) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mix: at most ", kMaxMixSources, " sources, got ", spec.mix_size()));
  }
  std::vector<std::unique_ptr<Dataset>> sources;
  std::vector<std::string> locations;
  for (int s = 0; s < spec.mix_size(); ++s) {
    proto::DatasetSpec one = spec;
    one.clear_mix();
    one.set_path(spec.mix(s).path());
    absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(one, options);
    if (!ds.ok()) {
      return absl::Status(ds.status().code(),
                          absl::StrCat("--mix: source ", s, " (", SafeText(spec.mix(s).path()),
                                       "): ", ds.status().message()));
    }
    locations.push_back((*ds)->location());
    sources.push_back(*std::move(ds));
  }
  std::unique_ptr<Dataset> mix = MixOf(std::move(sources));
  detail::DatasetSetup::Identify(mix.get(), Fingerprint(*mix), absl::StrJoin(locations, "\n"));
  return mix;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const proto::DatasetSpec& spec,
                                                     const DatasetOptions& options) {
  if (spec.mix_size() > 0) return OpenMix(spec, options);
  std::string path = spec.path();
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty()) return absl::InvalidArgumentError("dataset path is empty (--data)");
  if (spec.max_file_bytes() < 0) {
    return absl::InvalidArgumentError("--max-file-bytes: must be >= 0 (0: the default)");
  }
  if (spec.clips_per_video() < 0 || spec.clips_per_video() > kMaxClipsPerVideo) {
    return absl::InvalidArgumentError(absl::StrCat("--clips-per-video: must be in [0, ",
                                                   kMaxClipsPerVideo, "], got ",
                                                   spec.clips_per_video()));
  }
  for (const std::string& field : spec.require_fields()) {
    if (absl::Status s = CheckFieldName(field); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--require-fields: ", s.message()));
    }
  }
  if (IsUrl(path) && spec.format() == proto::DatasetSpec::FORMAT_LINES) {
    return absl::InvalidArgumentError(
        "--format lines: local files only; a remote corpus goes in WebDataset shards of "
        "key.txt or key.json (text-only records)");
  }
  auto configure = [&](Dataset* ds) { detail::DatasetSetup::Limit(ds, spec, options); };
  absl::StatusOr<std::unique_ptr<Dataset>> ds =
      IsUrl(path) ? detail::OpenRemoteDataset(spec, path, options, configure)
                  : OpenLocal(spec, path, options, configure);
  if (!ds.ok()) return ds;
  if (spec.require_fields_size() > 0 && !(*ds)->has_members()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--require-fields: only WebDataset records have fields; ", path, " is ", (*ds)->format()));
  }
  *ds = ClipsOf(*std::move(ds), spec.clips_per_video());
  std::string location = path;
  if (!IsUrl(path)) {  // a brace pattern is no file: made absolute only
    char* real = realpath(path.c_str(), nullptr);
    std::error_code ignored;
    location = real != nullptr
                   ? std::string(real)
                   : std::filesystem::absolute(path, ignored).lexically_normal().string();
    free(real);
  }
  detail::DatasetSetup::Identify(ds->get(), Fingerprint(**ds), location);
  return ds;
}

namespace {

class DatasetOpData : public OpData {
 public:
  explicit DatasetOpData(std::unique_ptr<Dataset> dataset) : dataset_(std::move(dataset)) {}
  int64_t size() const override { return dataset_->size(); }
  std::string Where(int64_t i) const override { return dataset_->SamplePath(i); }
  absl::Status Read(int64_t i, Buffer* out, size_t* size) const override {
    return dataset_->Read(i, out, size);
  }

 private:
  std::unique_ptr<Dataset> dataset_;
};

}  // namespace

std::unique_ptr<OpData> AsOpData(std::unique_ptr<Dataset> dataset) {
  return std::make_unique<DatasetOpData>(std::move(dataset));
}

OpDataOpener OpDataOpenerFor(DatasetOptions options) {
  return [options = std::move(options)](
             const std::string& path) -> absl::StatusOr<std::unique_ptr<OpData>> {
    proto::DatasetSpec spec;
    spec.set_path(path);
    absl::StatusOr<std::unique_ptr<Dataset>> dataset = OpenDataset(spec, options);
    if (!dataset.ok()) return dataset.status();
    return AsOpData(*std::move(dataset));
  };
}

}  // namespace prepflow
