// Audio decoding with libsndfile: WAV, FLAC, Ogg Vorbis/Opus and MP3 bytes
// to float32 channels-first, as torchaudio.load returns them.
//
// Hostile input: the header's channels, rate and duration are checked
// against DecodeOptions before anything is allocated, decoding stops at the
// duration limit whatever the header claimed, and NaN or infinite samples
// (a float WAV can hold them) fail the sample.
//
// Thread-safety: DecodeAudio is reentrant (each call opens its own
// libsndfile handle over the caller's bytes).
#ifndef PREPFLOW_PIPELINE_OPS_AUDIO_AUDIO_DECODE_H_
#define PREPFLOW_PIPELINE_OPS_AUDIO_AUDIO_DECODE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeline/core/image_decode.h"
#include "pipeline/core/sample.h"

namespace prepflow {

struct DecodedAudio {
  float* data = nullptr;  // [channels, frames], in `out`
  int channels = 0;
  int64_t frames = 0;
  int sample_rate = 0;
};

// Decodes `size` bytes into `out` (reserved as needed), reading the
// interleaved frames into `scratch` (another buffer). InvalidArgument for
// what libsndfile cannot read or a NaN/Inf sample, ResourceExhausted over a
// limit (naming the flag), DataLoss for a file that ends early.
absl::Status DecodeAudio(const uint8_t* bytes, size_t size, const DecodeOptions& options,
                         Buffer* out, Buffer* scratch, DecodedAudio* audio);

// The length in seconds that `size` bytes of audio declare, read from their
// headers without decoding (what batching by length sorts on; an MP3's is
// libsndfile's estimate). InvalidArgument when the headers do not read or
// declare no length. `whole`: the file's size when `bytes` are only its
// first bytes (0: they are all of it); then only a format whose header
// holds the length will do (HeaderHoldsLength), else FailedPrecondition.
absl::StatusOr<double> AudioSeconds(const uint8_t* bytes, size_t size, uint64_t whole = 0);

// Whether a file starting with these bytes says its length in its header
// (WAV, RF64, AIFF, FLAC's STREAMINFO), so that its first bytes are enough
// for AudioSeconds; MP3 and Ogg need the whole stream.
bool HeaderHoldsLength(const uint8_t* bytes, size_t size);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_AUDIO_AUDIO_DECODE_H_
