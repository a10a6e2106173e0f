// Fuzz target: arbitrary bytes as a video file through ProbeVideo and,
// where a header reads, VideoReader::DecodeClip (libavformat's MP4,
// Matroska/WebM and AVI demuxers and the decoders behind them, behind
// prepflow's limits). Whatever the bytes, the result is a VideoInfo and
// frames or an error Status; never a crash, a hang, a file opened, or
// memory read or written out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "pipeline/ops/video/video_decode.h"
#include "pipeline/ops/video/video_probe.h"
#include "tests/fuzz/fuzz_seeds.h"

namespace {

// What `ffmpeg <args> <file>` writes, read back.
std::string Made(const std::string& dir, const std::string& args, const std::string& name) {
  const std::string path = dir + "/" + name;
  const std::string command = "ffmpeg -nostdin -loglevel error -y " + args + " '" + path + "'";
  if (std::system(command.c_str()) != 0) std::abort();
  return prepflow::fuzz::TakeFile(path);
}

}  // namespace

// Seeds (tiny clips the ffmpeg tool makes): H.264 with AAC in MP4, VP9 in
// WebM, MJPEG in AVI, and the MP4 cut short.
void WriteSeeds(const std::string& dir) {
  const std::string video = "-f lavfi -i testsrc2=size=32x24:rate=5 -t 0.6 ";
  const std::string mp4 =
      Made(dir, video + "-f lavfi -i sine -t 0.6 -c:v libx264 -c:a aac -shortest", "x.mp4");
  prepflow::fuzz::WriteSeed(dir, "mp4", mp4);
  prepflow::fuzz::WriteSeed(dir, "mp4-truncated", mp4.substr(0, mp4.size() / 2));
  prepflow::fuzz::WriteSeed(dir, "webm", Made(dir, video + "-c:v libvpx-vp9", "x.webm"));
  prepflow::fuzz::WriteSeed(dir, "avi", Made(dir, video + "-c:v mjpeg", "x.avi"));
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  prepflow::VideoLimits limits;
  limits.max_pixels = 1 << 20;
  limits.max_frames = 64;
  (void)prepflow::ProbeVideo(data, size, limits);
  auto reader = prepflow::VideoReader::Open(data, size, limits);
  if (!reader.ok()) return 0;
  // Two frames from the middle (a seek) where the header gives a duration.
  std::vector<uint8_t> out((*reader)->frame_bytes() * 2);
  const double start = (*reader)->info().seconds / 2;
  (void)(*reader)->DecodeClip({start, 0.1, 2}, out.data());
  return 0;
}
