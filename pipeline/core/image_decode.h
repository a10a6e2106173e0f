// Decoding encoded images to 8-bit RGB, fast.
//
// JPEG goes through libjpeg-turbo directly so that the decoder can be told,
// after reading only the header, which region of the image the next stage
// needs and how small it may be: it then decodes just that region
// (jpeg_crop_scanline / jpeg_skip_scanlines, and stops after the last needed
// row) at the largest DCT scale 1/2, 1/4 or 1/8 that keeps the region at least
// as large as asked. PNG and BMP go through OpenCV. Grayscale, CMYK/YCCK,
// progressive, RGBA and 16-bit inputs all come out as 3-channel RGB.
//
// Corrupt or truncated data is an error (DataLoss), never a silently gray
// image: libjpeg's corrupt-data warnings are errors, and a JPEG without an
// end-of-image marker after its last scan is truncated. A header claiming more
// than `max_pixels` pixels is refused (ResourceExhausted) before any pixel
// memory is allocated.
//
// Thread-safety: an ImageDecoder is used by one thread at a time; it keeps its
// libjpeg state between calls so that decoding allocates nothing per image.
#ifndef PREPFLOW_PIPELINE_CORE_IMAGE_DECODE_H_
#define PREPFLOW_PIPELINE_CORE_IMAGE_DECODE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "pipeline/core/sample.h"

namespace prepflow {

// What the consumer of a decoded image needs from a src_w x src_h source.
struct DecodeHint {
  int x = 0, y = 0, width = 0, height = 0;  // region, source coordinates
  int min_width = 0, min_height = 0;        // smallest acceptable decoded size
  bool carries_crop = false;                // the region is the consumer's planned crop
};
using DecodePlanner = absl::FunctionRef<DecodeHint(int src_w, int src_h)>;

inline constexpr int kDefaultMaxJpegScans = 100;

struct DecodeOptions {
  int64_t max_pixels = 64'000'000;
  // A progressive JPEG with more scans than this is refused
  // (ResourceExhausted): every scan is another pass over the whole image, so
  // a crafted file of thousands of tiny scans costs seconds of CPU. Encoders
  // write about 10.
  int max_jpeg_scans = kDefaultMaxJpegScans;
  bool use_roi = true;          // decode only the hinted region
  bool use_dct_scaling = true;  // decode at 1/2, 1/4, 1/8 where allowed
  // Audio (decode_audio): a file whose header claims more seconds or
  // channels is refused (ResourceExhausted) before anything is decoded, and
  // no op may make audio longer than max_audio_seconds at kMaxAudioRate.
  double max_audio_seconds = 600;
  int max_audio_channels = 2;
  // Video (decode_video): a file whose header claims more seconds is
  // refused before anything is decoded; a clip that needs more frames
  // decoded (from the keyframe before it to its last frame) fails, so a
  // tiny file that decodes to millions of frames costs at most this many.
  double max_video_seconds = 3600;
  int max_video_frames = 1000;
};

// The longest --max-video-seconds may be: a day.
inline constexpr double kMaxVideoSeconds = 86400;

// The longest --max-audio-seconds may be: a day.
inline constexpr double kMaxAudioSeconds = 86400;

// The highest sample rate audio may have (Hz): 192 kHz, "high resolution"
// audio's. Rates are refused above it, so that seconds bound bytes: at the
// defaults one decoded value is at most 600 s x 192 kHz x 2 channels x 4
// bytes, 0.9 GB, under what one worker item may hold.
inline constexpr int kMaxAudioRate = 192'000;

// The most frames one audio value may have under `options`, at `rate` (0:
// any rate); one more than the seconds hold, for resampling's rounding up.
inline int64_t MaxAudioFrames(const DecodeOptions& options, int rate = 0) {
  return static_cast<int64_t>(options.max_audio_seconds * (rate > 0 ? rate : kMaxAudioRate)) + 1;
}

struct DecodedImage {
  uint8_t* data = nullptr;  // RGB, rows packed (stride = 3 * width)
  int width = 0;
  int height = 0;
  ImageView view;
};

// Every format an ImageFolder indexes (dataset.cc's extensions). JPEG goes
// through libjpeg-turbo (DCT scaling, region decode); the others through
// OpenCV, each after its header's size has passed max_pixels.
enum class ImageFormat { kUnknown, kJpeg, kPng, kBmp, kPnm, kTiff, kWebp };
// Recognises a format by its leading bytes.
ImageFormat SniffImageFormat(const uint8_t* data, size_t size);

class ImageDecoder {
 public:
  ImageDecoder();
  ~ImageDecoder();
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  // Decodes `data` into `out`. `planner`, when given, is called once with the
  // source size and says which region to decode. Errors: DataLoss (corrupt,
  // truncated, empty or unrecognised input), ResourceExhausted (over
  // max_pixels). The message names the problem; callers add the path.
  absl::Status Decode(const uint8_t* data, size_t size, const DecodeOptions& options,
                      const DecodePlanner* planner, Buffer* out, DecodedImage* image);

  // Counts what libjpeg and OpenCV hold while they decode (estimated from the
  // header, charged before they allocate) in `meter`; null: uncounted. Over
  // the meter's limit, Decode() is ResourceExhausted.
  void set_meter(MemoryMeter* meter) { meter_ = meter; }

 private:
  struct Jpeg;
  absl::Status DecodeJpeg(const uint8_t* data, size_t size, const DecodeOptions& options,
                          const DecodePlanner* planner, Buffer* out, DecodedImage* image);
  absl::Status DecodeOther(const uint8_t* data, size_t size, ImageFormat format,
                           const DecodeOptions& options, const DecodePlanner* planner, Buffer* out,
                           DecodedImage* image);

  // After jpeg_start_decompress: reads the rows and columns of `hint` (at
  // 1/denom) into `out`, sets image's data and size, and ends the decode.
  absl::Status ReadJpegRegion(const DecodeHint& hint, int denom, Buffer* out, DecodedImage* image);
  absl::Status ChargeInternals(int64_t bytes);
  void UnchargeInternals();

  std::unique_ptr<Jpeg> jpeg_;
  MemoryMeter* meter_ = nullptr;
  int64_t charged_ = 0;  // of meter_, while a decode runs
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_IMAGE_DECODE_H_
