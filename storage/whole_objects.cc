#include "storage/whole_objects.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeline/data/byte_source.h"

namespace prepflow {

// An object's bytes: in memory, or in an unlinked file (`fd`).
class WholeObjects::Copy {
 public:
  explicit Copy(std::string bytes) : bytes_(std::move(bytes)) {}
  Copy(int fd, uint64_t size) : fd_(fd), size_(size) {}
  ~Copy() {
    if (fd_ >= 0) close(fd_);
  }
  Copy(const Copy&) = delete;
  Copy& operator=(const Copy&) = delete;

  uint64_t size() const { return fd_ >= 0 ? size_ : bytes_.size(); }
  absl::Status Read(const std::string& name, uint64_t offset, size_t length, uint8_t* dst) const {
    if (offset > size() || length > size() - offset) {
      return absl::DataLossError(absl::StrFormat("%s: %d bytes at offset %d run past its end (%d)",
                                                 RedactedUrl(name), length, offset, size()));
    }
    if (fd_ < 0) {
      std::memcpy(dst, bytes_.data() + offset, length);
      return absl::OkStatus();
    }
    for (size_t done = 0; done < length;) {
      const ssize_t n = pread(fd_, dst + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::InternalError(absl::StrCat(RedactedUrl(name), ": reading its whole copy: ",
                                                n < 0 ? std::strerror(errno) : "end of file"));
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  std::string bytes_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

WholeObjects::WholeObjects(WholeObjectOptions options) : options_(std::move(options)) {}

WholeObjects::~WholeObjects() = default;

absl::Status WholeObjects::ReadAt(const std::string& name, const std::string& version,
                                  uint64_t size, uint64_t offset, size_t length, uint8_t* dst,
                                  const Fetch& fetch, bool* fetched) {
  if (fetched != nullptr) *fetched = false;
  if (size > static_cast<uint64_t>(options_.max_bytes)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: its server ignores Range requests, so it is read whole, and its %d bytes are over "
        "--whole-object-bytes (%d)",
        RedactedUrl(name), size, options_.max_bytes));
  }
  absl::StatusOr<std::shared_ptr<const Copy>> copy =
      Get(absl::StrCat(name, "\n", version, "\n", size), size, fetch, fetched);
  if (!copy.ok()) return copy.status();
  return (*copy)->Read(name, offset, length, dst);
}

absl::StatusOr<std::shared_ptr<const WholeObjects::Copy>> WholeObjects::Get(const std::string& key,
                                                                            uint64_t size,
                                                                            const Fetch& fetch,
                                                                            bool* fetched) {
  const std::string name = key.substr(0, key.find('\n'));
  {
    absl::MutexLock lock(&mu_);
    bool waited = false;
    uint64_t awaited = 0;
    while (true) {
      // Looked up again after each wait: a loaded entry may be dropped for
      // room (and made anew) while this thread waits.
      Entry& e = entries_[key];
      if (e.loading) {
        waited = true;
        awaited = e.generation;
        loaded_.Wait(&mu_);
        continue;
      }
      if (e.copy != nullptr) {
        e.last_use = ++clock_;
        return e.copy;
      }
      if (waited && e.generation == awaited && !e.failed.ok()) return e.failed;
      // The bytes of loads in flight count against the budget too: past
      // it, this load waits for another to finish (its copy may then be
      // dropped for room).
      Evict(key, size);
      if (counters_.held_bytes + loading_bytes_ + static_cast<int64_t>(size) > options_.max_bytes &&
          loading_bytes_ > 0) {
        loaded_.Wait(&mu_);
        continue;
      }
      e.loading = true;
      ++e.generation;
      loading_bytes_ += static_cast<int64_t>(size);
      break;
    }
  }
  absl::StatusOr<std::shared_ptr<const Copy>> copy = Load(name, size, fetch);
  absl::MutexLock lock(&mu_);
  Entry& e = entries_[key];
  e.loading = false;
  loading_bytes_ -= static_cast<int64_t>(size);
  loaded_.SignalAll();
  if (!copy.ok()) {
    e.failed = copy.status();
    return copy.status();
  }
  if (fetched != nullptr) *fetched = true;
  e.failed = absl::OkStatus();
  e.copy = *copy;
  e.last_use = ++clock_;
  ++counters_.fetches;
  if (!ever_fetched_.insert(key).second) ++counters_.refetches;
  counters_.held_bytes += static_cast<int64_t>(size);
  Evict(key, 0);
  return copy;
}

absl::StatusOr<std::shared_ptr<const WholeObjects::Copy>> WholeObjects::Load(
    const std::string& name, uint64_t size, const Fetch& fetch) const {
  absl::StatusOr<std::string> body = fetch();
  if (!body.ok()) return body.status();
  if (body->size() != size) {
    return absl::DataLossError(
        absl::StrFormat("%s: fetched whole it has %d bytes, not the %d it had when opened (it "
                        "changed while being read)",
                        RedactedUrl(name), body->size(), size));
  }
  if (options_.dir.empty()) return std::make_shared<const Copy>(*std::move(body));
  const auto failed = [&](const char* what) {
    return absl::InternalError(
        absl::StrCat("--whole-object-dir ", options_.dir, ": ", what, ": ", std::strerror(errno)));
  };
  std::error_code ignored;
  std::filesystem::create_directories(options_.dir, ignored);
  std::string path = options_.dir + "/prepflow-whole-XXXXXX";
  const int fd = mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) return failed("cannot make a file");
  unlink(path.c_str());  // freed when closed, or when the process ends
  auto copy = std::make_shared<const Copy>(fd, size);
  for (size_t done = 0; done < body->size();) {
    const ssize_t n = write(fd, body->data() + done, body->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return failed("cannot write a whole copy");
    done += static_cast<size_t>(n);
  }
  return copy;
}

void WholeObjects::Evict(const std::string& keep, uint64_t more) {
  while (counters_.held_bytes + loading_bytes_ + static_cast<int64_t>(more) > options_.max_bytes) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->first == keep || it->second.copy == nullptr) continue;
      if (oldest == entries_.end() || it->second.last_use < oldest->second.last_use) oldest = it;
    }
    if (oldest == entries_.end()) return;
    counters_.held_bytes -= static_cast<int64_t>(oldest->second.copy->size());
    entries_.erase(oldest);
  }
}

WholeObjects::Counters WholeObjects::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace prepflow
