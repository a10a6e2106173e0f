#include "pipeline/ops/video/video_probe.h"

#include "pipeline/ops/video/video_demux.h"

namespace prepflow {

absl::StatusOr<VideoInfo> ProbeVideo(const uint8_t* bytes, size_t size, const VideoLimits& limits) {
  video::QuietAvLog();
  video::Demuxer demuxer;
  if (absl::Status s = demuxer.Open(bytes, size); !s.ok()) return s;
  return video::ReadVideoInfo(*demuxer.format(), limits);
}

}  // namespace prepflow
