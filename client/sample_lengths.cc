#include "client/sample_lengths.h"

#include <spdlog/spdlog.h>

#include <string>

#include "base/clock.h"
#include "base/text.h"
#include "pipeline/ops/audio/audio_decode.h"

namespace prepflow {

namespace {

// What a WAV's or FLAC's header needs: its chunks before the samples, or
// STREAMINFO and the metadata blocks before the frames (album art may make
// those longer, and then the whole file is read).
constexpr size_t kHeadBytes = 64 << 10;

// Sample i's length from its first bytes where its header holds it, else
// from the whole file.
absl::StatusOr<double> Seconds(const Dataset& dataset, int64_t i, const std::string& field,
                               Buffer* bytes) {
  size_t size = 0;
  uint64_t whole = 0;
  if (!field.empty()) {  // a shard's member: its bytes are at hand
    absl::Status read = dataset.ReadMember(i, field, bytes, &size);
    if (!read.ok()) return read;
    return AudioSeconds(bytes->data(), size);
  }
  // MP3 and Ogg say their length only in their stream: one read, whole.
  const std::string ext = dataset.Extension(i);
  const bool stream = ext == "mp3" || ext == "ogg" || ext == "oga" || ext == "opus";
  absl::Status read = stream ? dataset.Read(i, bytes, &size)
                             : dataset.ReadHead(i, kHeadBytes, bytes, &size, &whole);
  if (stream) whole = size;
  if (!read.ok()) return read;
  if (whole > size) {
    if (HeaderHoldsLength(bytes->data(), size)) {
      absl::StatusOr<double> s = AudioSeconds(bytes->data(), size, whole);
      if (s.ok()) return s;
    }
    read = dataset.Read(i, bytes, &size);
    if (!read.ok()) return read;
  }
  return AudioSeconds(bytes->data(), size);
}

}  // namespace

absl::StatusOr<std::vector<double>> SampleSeconds(const Dataset& dataset,
                                                  const std::string& field) {
  const int64_t n = dataset.size();
  std::vector<double> seconds(static_cast<size_t>(n), -1);
  int64_t unknown = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (dataset.has_durations() && field.empty()) seconds[i] = dataset.duration(i);
    unknown += seconds[i] < 0;
  }
  if (unknown == 0) return seconds;
  spdlog::info("batching by length: reading the headers of {} of {} samples ({})", unknown, n,
               dataset.has_durations() ? "the manifest lacks their durations"
                                       : "the dataset gives no durations");
  Buffer bytes;
  int64_t done = 0, unreadable = 0, last_log = WallNanos();
  for (int64_t i = 0; i < n; ++i) {
    if (seconds[i] >= 0) continue;
    absl::StatusOr<double> s = Seconds(dataset, i, field, &bytes);
    if (absl::IsUnavailable(s.status()) || absl::IsDeadlineExceeded(s.status())) return s.status();
    if (!s.ok() && ++unreadable <= 3) {
      spdlog::warn("batching by length: {}: {}; counted as 0 s", SafeText(dataset.SamplePath(i)),
                   SafeText(s.status().message()));
    }
    seconds[i] = s.ok() ? *s : 0;
    if (++done % 1000 == 0 && WallNanos() - last_log > int64_t{10'000'000'000}) {
      last_log = WallNanos();
      spdlog::info("batching by length: {} of {} headers read", done, unknown);
    }
  }
  if (unreadable > 3) {
    spdlog::warn("batching by length: {} files in all whose length did not read", unreadable);
  }
  return seconds;
}

}  // namespace prepflow
