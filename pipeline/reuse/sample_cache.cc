#include "pipeline/reuse/sample_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "pipeline/core/rng.h"
#include "pipeline/core/wire.h"
#include "proto/pipeline.pb.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace prepflow {
namespace {

constexpr char kMagic[8] = {'P', 'F', 'C', 'A', 'C', 'H', 'E', '2'};
constexpr char kSuffix[] = ".pfc";

// What every entry file starts with; the value's bytes follow.
struct FileHeader {
  char magic[8];
  uint64_t space;
  int64_t index;
  uint64_t size;
  uint64_t hash;     // XXH3-64 of the value's bytes
  uint64_t version;  // of the source the value was made from
};

// A sample's fixed rank: higher stays.
uint64_t Priority(const CacheKey& key) {
  return Mix64(Mix64(key.space) ^ static_cast<uint64_t>(key.index));
}

bool WriteAll(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t size, off_t offset) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = pread(fd, p, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    offset += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// "<index>-<file id hex>.pfc"
bool ParseFileName(const std::string& name, int64_t* index, uint64_t* file_id) {
  if (name.size() <= sizeof(kSuffix) - 1 ||
      name.compare(name.size() - (sizeof(kSuffix) - 1), std::string::npos, kSuffix) != 0) {
    return false;
  }
  const std::vector<std::string> parts =
      absl::StrSplit(name.substr(0, name.size() - (sizeof(kSuffix) - 1)), '-');
  return parts.size() == 2 && absl::SimpleAtoi(parts[0], index) && *index >= 0 &&
         absl::SimpleHexAtoi(parts[1], file_id);
}

std::vector<std::string> ListFolder(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return names;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  }
  closedir(dir);
  return names;
}

}  // namespace

uint64_t CacheSpace(uint64_t dataset_identity, uint64_t prefix_fingerprint) {
  return Mix64(dataset_identity ^ Mix64(prefix_fingerprint));
}

absl::StatusOr<std::unique_ptr<SampleCache>> SampleCache::Open(const SampleCacheOptions& options) {
  if (options.ram_bytes < 0) return absl::InvalidArgumentError("--cache-bytes must be >= 0");
  if (options.disk_bytes < 0) {
    return absl::InvalidArgumentError("--cache-disk-bytes must be >= 0");
  }
  std::unique_ptr<SampleCache> cache(new SampleCache(options));
  cache->capacity_[kRam] = options.ram_bytes;
  if (!options.dir.empty()) {
    if (absl::Status s = cache->OpenDisk(); !s.ok()) return s;
  }
  return cache;
}

SampleCache::~SampleCache() {
  if (lock_fd_ >= 0) close(lock_fd_);  // releases the flock
}

absl::Status SampleCache::OpenDisk() {
  const std::string& dir = options_.dir;
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("--cache-dir ", dir, ": cannot create it: ", std::strerror(errno)));
  }
  const std::string lock = dir + "/lock";
  lock_fd_ = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--cache-dir ", dir, ": cannot open ", lock, ": ", std::strerror(errno)));
  }
  if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--cache-dir ", dir, " is in use by another process (", lock,
                     " is locked); give each worker or job on a machine its own folder"));
  }
  capacity_[kDisk] = options_.disk_bytes;
  if (capacity_[kDisk] == 0) {
    struct statvfs fs;
    if (statvfs(dir.c_str(), &fs) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("--cache-dir ", dir, ": ", std::strerror(errno)));
    }
    capacity_[kDisk] = static_cast<int64_t>(fs.f_bavail * fs.f_frsize / 2);
  }
  IndexDisk();
  return absl::OkStatus();
}

void SampleCache::IndexDisk() {
  std::vector<std::string> unlinks;
  absl::MutexLock lock(&mu_);
  for (const std::string& sub : ListFolder(options_.dir)) {
    uint64_t space = 0;
    if (sub.size() != 16 || !absl::SimpleHexAtoi(sub, &space)) continue;
    const std::string folder = absl::StrCat(options_.dir, "/", sub);
    for (const std::string& name : ListFolder(folder)) {
      const std::string path = absl::StrCat(folder, "/", name);
      int64_t index = 0;
      uint64_t file_id = 0;
      struct stat st;
      if (absl::EndsWith(name, ".tmp")) {  // a write a crash cut short
        unlinks.push_back(path);
        continue;
      }
      if (!ParseFileName(name, &index, &file_id) || stat(path.c_str(), &st) != 0 ||
          st.st_size < static_cast<off_t>(sizeof(FileHeader))) {
        continue;
      }
      const CacheKey key{space, index};
      if (entries_.contains(key)) {
        unlinks.push_back(path);
        continue;
      }
      Entry& e = entries_[key];
      e.tier = kDisk;
      e.priority = Priority(key);
      e.size = st.st_size - static_cast<int64_t>(sizeof(FileHeader));
      e.file_id = file_id;
      e.version_known = false;  // in its header, read with the value
      ranked_[kDisk].insert({e.priority, key});
      used_[kDisk] += e.size;
      next_file_id_ = std::max(next_file_id_, file_id + 1);
    }
  }
  // A smaller budget than last time: the lowest go.
  while (used_[kDisk] > capacity_[kDisk]) {
    const CacheKey key = ranked_[kDisk].begin()->second;
    Remove(key, &unlinks);
  }
  for (const std::string& path : unlinks) unlink(path.c_str());
}

std::string SampleCache::FilePath(const CacheKey& key, uint64_t file_id) const {
  return absl::StrFormat("%s/%016x/%d-%x%s", options_.dir, key.space, key.index, file_id, kSuffix);
}

bool SampleCache::Victims(Tier tier, uint64_t priority, int64_t size,
                          std::vector<CacheKey>* victims) const {
  if (size > capacity_[tier]) return false;
  int64_t need = used_[tier] + size - capacity_[tier];
  for (auto it = ranked_[tier].begin(); need > 0; ++it) {
    if (it == ranked_[tier].end() || it->first >= priority) return false;
    need -= entries_.at(it->second).size;
    victims->push_back(it->second);
  }
  return true;
}

void SampleCache::Remove(const CacheKey& key, std::vector<std::string>* unlinks) {
  auto it = entries_.find(key);
  const Entry& e = it->second;
  ranked_[e.tier].erase({e.priority, key});
  used_[e.tier] -= e.size;
  if (e.tier == kDisk) unlinks->push_back(FilePath(key, e.file_id));
  entries_.erase(it);
}

bool SampleCache::Admit(Tier tier, const CacheKey& key, const Entry& value,
                        std::vector<PendingWrite>* writes, std::vector<std::string>* unlinks) {
  std::vector<CacheKey> victims;
  if (!Victims(tier, value.priority, value.size, &victims)) return false;
  for (const CacheKey& v : victims) {
    const Entry moved = entries_.at(v);
    Remove(v, unlinks);
    // RAM's lowest move down to disk, when they rank there.
    const bool kept =
        tier == kRam && capacity_[kDisk] > 0 && Admit(kDisk, v, moved, writes, unlinks);
    if (!kept) ++counters_.evictions;
  }
  Entry& e = entries_[key];
  e = Entry{};
  e.tier = tier;
  e.priority = value.priority;
  e.size = value.size;
  e.version = value.version;
  if (tier == kRam) {
    e.blob = value.blob;
  } else {
    e.file_id = next_file_id_++;
    e.writing = true;
    writes->push_back({key, e.file_id, value.version, value.blob});
  }
  ranked_[tier].insert({value.priority, key});
  used_[tier] += value.size;
  return true;
}

void SampleCache::Insert(const CacheKey& key, uint64_t version, Blob value) {
  std::vector<PendingWrite> writes;
  std::vector<std::string> unlinks;
  {
    absl::MutexLock lock(&mu_);
    if (entries_.contains(key)) return;
    Entry e;
    e.priority = Priority(key);
    e.size = static_cast<int64_t>(value->size());
    e.version = version;
    e.blob = std::move(value);
    const bool kept = Admit(kRam, key, e, &writes, &unlinks) ||
                      (capacity_[kDisk] > 0 && Admit(kDisk, key, e, &writes, &unlinks));
    ++(kept ? counters_.insertions : counters_.rejected);
  }
  Apply(std::move(writes), std::move(unlinks));
}

bool SampleCache::Wants(const CacheKey& key, int64_t size) const {
  absl::MutexLock lock(&mu_);
  if (entries_.contains(key)) return false;
  const uint64_t priority = Priority(key);
  std::vector<CacheKey> ram, disk;
  return Victims(kRam, priority, size, &ram) ||
         (capacity_[kDisk] > 0 && Victims(kDisk, priority, size, &disk));
}

void SampleCache::Apply(std::vector<PendingWrite> writes, std::vector<std::string> unlinks) {
  for (const std::string& path : unlinks) unlink(path.c_str());
  for (PendingWrite& w : writes) {
    const std::string path = FilePath(w.key, w.file_id);
    const std::string tmp = path + ".tmp";
    const FileHeader header{{},
                            w.key.space,
                            w.key.index,
                            w.blob->size(),
                            XXH3_64bits(w.blob->data(), w.blob->size()),
                            w.version};
    std::memcpy(const_cast<char*>(header.magic), kMagic, sizeof(kMagic));
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT) {  // the space's folder, made on first use
      mkdir(absl::StrFormat("%s/%016x", options_.dir, w.key.space).c_str(), 0755);
      fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    bool ok = fd >= 0 && WriteAll(fd, &header, sizeof(header)) &&
              WriteAll(fd, w.blob->data(), w.blob->size());
    if (fd >= 0) ok = close(fd) == 0 && ok;
    ok = ok && rename(tmp.c_str(), path.c_str()) == 0;
    if (!ok) unlink(tmp.c_str());
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(w.key);
    const bool current =
        it != entries_.end() && it->second.tier == kDisk && it->second.file_id == w.file_id;
    if (!current) {  // evicted while it was written
      if (ok) unlink(path.c_str());
      continue;
    }
    if (ok) {
      it->second.writing = false;
    } else {
      ++counters_.disk_errors;
      std::vector<std::string> none;
      Remove(w.key, &none);
    }
  }
}

SampleCache::Blob SampleCache::ReadFile(const CacheKey& key, uint64_t file_id, int64_t size,
                                        uint64_t version, bool* stale) {
  *stale = false;
  const int fd = open(FilePath(key, file_id).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  FileHeader header;
  auto value = std::make_shared<std::string>();
  bool ok = ReadAll(fd, &header, sizeof(header), 0) &&
            std::memcmp(header.magic, kMagic, sizeof(kMagic)) == 0 && header.space == key.space &&
            header.index == key.index && header.size == static_cast<uint64_t>(size);
  if (ok && header.version != version) {
    *stale = true;
    ok = false;
  }
  if (ok) {
    value->resize(static_cast<size_t>(size));
    ok = ReadAll(fd, value->data(), value->size(), sizeof(header)) &&
         XXH3_64bits(value->data(), value->size()) == header.hash;
  }
  close(fd);
  return ok ? value : nullptr;
}

SampleCache::Blob SampleCache::Find(const CacheKey& key, uint64_t version) {
  Entry found;
  std::vector<std::string> unlinks;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.writing) {
      ++counters_.misses;
      return nullptr;
    }
    if (it->second.version_known && it->second.version != version) {
      ++counters_.misses;
      ++counters_.stale;
      Remove(key, &unlinks);
    } else if (it->second.tier == kRam) {
      ++counters_.hits;
      return it->second.blob;
    } else {
      found = it->second;
    }
  }
  if (!unlinks.empty()) {
    Apply({}, std::move(unlinks));
    return nullptr;
  }
  bool stale = false;
  found.blob = ReadFile(key, found.file_id, found.size, version, &stale);
  found.version = version;
  std::vector<PendingWrite> writes;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    const bool current =
        it != entries_.end() && it->second.tier == kDisk && it->second.file_id == found.file_id;
    if (found.blob == nullptr) {
      ++counters_.misses;
      if (current) {  // stale, damaged, or removed behind our back
        ++(stale ? counters_.stale : counters_.disk_errors);
        Remove(key, &unlinks);
      }
    } else {
      ++counters_.hits;
      if (current) it->second.version_known = true;
      // After a restart RAM starts empty: what ranks there moves up.
      std::vector<CacheKey> victims;
      if (current && Victims(kRam, found.priority, found.size, &victims)) {
        Remove(key, &unlinks);
        Admit(kRam, key, found, &writes, &unlinks);
      }
    }
  }
  Apply(std::move(writes), std::move(unlinks));
  return found.blob;
}

bool SampleCache::Holds(const CacheKey& key) const {
  absl::MutexLock lock(&mu_);
  return entries_.contains(key);
}

std::vector<int64_t> SampleCache::NotHeld(uint64_t space, absl::Span<const int64_t> indices) const {
  std::vector<int64_t> out;
  absl::MutexLock lock(&mu_);
  for (int64_t i : indices) {
    if (!entries_.contains(CacheKey{space, i})) out.push_back(i);
  }
  return out;
}

SampleCache::Stats SampleCache::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s = counters_;
  s.ram_bytes = used_[kRam];
  s.ram_entries = static_cast<int64_t>(ranked_[kRam].size());
  s.disk_bytes = used_[kDisk];
  s.disk_entries = static_cast<int64_t>(ranked_[kDisk].size());
  return s;
}

// ------------------------------------------------------------ BoundaryCache

bool BoundaryCache::Restore(Sample& s, Workspace& ws) {
  s.source_version = source_ != nullptr ? source_->SourceVersion(s.index) : 0;
  const SampleCache::Blob blob = cache_->Find({space_, s.index}, s.source_version);
  const bool ok = blob != nullptr && FromValueBytes(*blob, ws, s).ok();
  (ok ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
  return ok;
}

void BoundaryCache::Keep(const Sample& s) {
  const CacheKey key{space_, s.index};
  // Most misses of a settled cache are not admitted: no copy for those.
  if (!cache_->Wants(key, static_cast<int64_t>(s.size + 64))) return;
  cache_->Insert(key, s.source_version, std::make_shared<const std::string>(ValueBytes(s)));
}

std::vector<int64_t> BoundaryCache::NotHeld(absl::Span<const int64_t> indices) const {
  return cache_->NotHeld(space_, indices);
}

}  // namespace prepflow
