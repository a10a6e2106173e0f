// What a video file's container declares, read from its headers without
// decoding a frame (libavformat's demuxer over the file's bytes): what the
// epoch order, clip sampling and the planner will know each video by.
//
// Hostile input: the bytes are read from memory only (no protocol, no
// file names the container names are followed), the demuxer's probing is
// bounded, and a container with too many streams, dimensions over the
// pixel limit, a duration over the limit or a declared frame count out of
// proportion to it is refused naming the limit.
//
// Thread-safety: ProbeVideo is reentrant (each call has its own demuxer).
#ifndef PREPFLOW_PIPELINE_OPS_VIDEO_VIDEO_PROBE_H_
#define PREPFLOW_PIPELINE_OPS_VIDEO_VIDEO_PROBE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace prepflow {

struct VideoLimits {
  int64_t max_pixels = int64_t{1} << 26;  // width x height of a frame
  double max_seconds = 3600;              // a video's duration
  int max_streams = 16;                   // streams in the container
  int max_frames = 1000;                  // frames decoded for one clip (video_decode.h)
};

struct VideoInfo {
  std::string container;  // libavformat's name: "mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm"
  std::string codec;      // the video stream's: "h264", "vp9", "av1"
  int width = 0, height = 0;
  // The video stream's average frame rate as the header gives it (0: not
  // given: a variable-rate stream without one), its duration in seconds
  // (the container's where the stream gives none) and its frame count (0:
  // not given).
  double fps = 0;
  double seconds = 0;
  int64_t frames = 0;
  int streams = 0;         // in the container
  int video_stream = -1;   // the index of the first video stream
  bool has_audio = false;  // an audio stream beside it
};

// InvalidArgument for bytes libavformat cannot read as a container with a
// video stream; ResourceExhausted over a limit, naming it.
absl::StatusOr<VideoInfo> ProbeVideo(const uint8_t* bytes, size_t size,
                                     const VideoLimits& limits = {});

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_VIDEO_VIDEO_PROBE_H_
