#include "client/sample_lengths.h"

#include <spdlog/spdlog.h>

#include "base/clock.h"
#include "base/text.h"
#include "pipeline/ops/audio/audio_decode.h"

namespace prepflow {

absl::StatusOr<std::vector<double>> SampleSeconds(const Dataset& dataset) {
  const int64_t n = dataset.size();
  std::vector<double> seconds(static_cast<size_t>(n), -1);
  int64_t unknown = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (dataset.has_durations()) seconds[i] = dataset.duration(i);
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
    size_t size = 0;
    const absl::Status read = dataset.Read(i, &bytes, &size);
    if (absl::IsUnavailable(read) || absl::IsDeadlineExceeded(read)) return read;
    absl::StatusOr<double> s =
        read.ok() ? AudioSeconds(bytes.data(), size) : absl::StatusOr<double>(read);
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
