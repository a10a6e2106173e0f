// The value of one sample as it moves through a pipeline.
//
// A Sample is a view: it points into a Buffer owned by the thread's Workspace
// (or into a batch slot) and carries the metadata of its kind. Buffers are
// reused from sample to sample, so the hot path allocates nothing once they
// have grown to the largest sample seen.
#ifndef PREPFLOW_PIPELINE_CORE_SAMPLE_H_
#define PREPFLOW_PIPELINE_CORE_SAMPLE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace prepflow {

class MemoryMeter;

// Where a Buffer's memory comes from: by default 64-byte-aligned malloc;
// e.g. page-locked memory that a GPU copies from asynchronously
// (client/gpu's AllocatePinned). Plain function pointers: pipeline/ knows
// nothing of what provides them.
struct HostAllocator {
  void* (*allocate)(size_t bytes) = nullptr;  // null: the default
  void (*free)(void* p) = nullptr;
};

// A growable byte buffer that shrinks only when asked (Release) and does not
// preserve contents when it grows. 64-byte aligned. Not thread-safe.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(HostAllocator allocator) : allocator_(allocator) {}
  ~Buffer() { Release(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;

  // Returns storage for at least `n` bytes; earlier contents are lost if it
  // has to grow. Throws std::bad_alloc when memory cannot be had, or
  // OverWorkingMemory (a bad_alloc) when its meter refuses the growth.
  uint8_t* Reserve(size_t n);
  // Frees the storage (and uncounts it from the meter).
  void Release();
  // Counts this buffer's capacity in `meter` from now on (null: uncounted).
  // REQUIRES: the buffer is empty; `meter` outlives it.
  void set_meter(MemoryMeter* meter) { meter_ = meter; }
  uint8_t* data() const { return data_.get(); }
  size_t capacity() const { return capacity_; }
  bool Contains(const void* p) const {
    const auto* b = static_cast<const uint8_t*>(p);
    return data_ && b >= data_.get() && b < data_.get() + capacity_;
  }

 private:
  struct Free {
    Free() : fn(nullptr) {}  // (no member initializer: it must be default-constructible here)
    explicit Free(void (*f)(void*)) : fn(f) {}
    void (*fn)(void*);
    void operator()(uint8_t* p) const;
  };
  HostAllocator allocator_;
  std::unique_ptr<uint8_t, Free> data_;
  size_t capacity_ = 0;
  MemoryMeter* meter_ = nullptr;
};

enum class ValueKind : uint8_t {
  kEncoded,  // encoded file bytes
  kImage,    // uint8 HWC, 3 channels (RGB); or a stack of them, NHWC
  kTensor,   // float32, shape as given
  kAudio,    // float32 [channels, frames] at Sample::sample_rate
  kTokens,   // int32 token ids [n] (a tokenized text)
};
const char* ValueKindName(ValueKind kind);

using Shape = absl::InlinedVector<int64_t, 4>;

// Where an image buffer sits in its source image (see proto ImageView).
struct ImageView {
  int source_width = 0;
  int source_height = 0;
  int scale_denom = 1;  // the buffer is the source scaled by 1/scale_denom
  int x0 = 0;           // buffer origin in the scaled image
  int y0 = 0;
  // A crop (source coordinates) drawn ahead by the decoder for the next stage.
  bool has_crop = false;
  int crop_x = 0, crop_y = 0, crop_width = 0, crop_height = 0;

  // The identity view of a whole w x h image.
  static ImageView Whole(int w, int h) {
    ImageView v;
    v.source_width = w;
    v.source_height = h;
    return v;
  }
};

// A field of a record other than the one its stages are working on: its
// value, owned (see Sample::fields).
struct StoredField {
  std::string name;
  ValueKind kind = ValueKind::kEncoded;
  Shape shape;
  ImageView view;
  int sample_rate = 0;
  std::string bytes;
};

// The part of a sample's media its dataset names: a manifest line's start
// and end times, and which of a video's clips it is (--clips-per-video).
// decode_video samples its clip within it.
struct MediaWindow {
  double start = 0;  // seconds from the media's start
  double end = -1;   // seconds; < 0: the media's end
  int32_t clip = 0;  // clip `clip` of `clips`
  int32_t clips = 1;
};

struct Sample {
  // Identity: these never change as stages run (Dataset::Describe sets
  // them from the dataset).
  uint64_t epoch = 0;
  int64_t index = 0;
  int64_t label = -1;
  MediaWindow window;
  // Data echoing: which copy of the sample this is (0: the sample itself),
  // and the stage from which the copy draws its own random numbers (stages
  // before it draw copy 0's, so the value they make is the same for every
  // copy and is made once).
  uint32_t copy = 0;
  int echo_at = 0;
  // The version of the source the sample was read from, as a cache saw it
  // before the read (Dataset::SourceVersion; 0 without a cache).
  uint64_t source_version = 0;

  // The copy whose random numbers stage `stage` draws.
  uint32_t copy_at(int stage) const { return stage >= echo_at ? copy : 0; }

  ValueKind kind = ValueKind::kEncoded;
  uint8_t* data = nullptr;
  size_t size = 0;  // bytes
  // kEncoded: {size}; kImage: {h, w, 3}, or {n, h, w, 3} for a stack of n
  // images of one size (five_crop's crops); kTensor: dims; kAudio:
  // {channels, frames}; kTokens: {n}.
  Shape shape;
  ImageView view;       // kImage only (a stack's is its images' whole view)
  int sample_rate = 0;  // kAudio only, in Hz
  // A record of several fields (a WebDataset sample's image and audio, a
  // carried caption): the value above is the one the stages are working
  // on, these are the others, in byte order of their names. Empty for a
  // pipeline of one field. Pipeline::Run swaps values in and out.
  std::vector<StoredField> fields;

  // An image's (or each stacked image's) height and width.
  int height() const { return static_cast<int>(shape[shape.size() - 3]); }
  int width() const { return static_cast<int>(shape[shape.size() - 2]); }
  // How many images a kImage value holds: 1, or a stack's n.
  int images() const { return shape.size() == 4 ? static_cast<int>(shape[0]) : 1; }
  // The bytes of the whole record: this value and every stored field.
  size_t record_bytes() const {
    size_t n = size;
    for (const StoredField& f : fields) n += f.bytes.size();
    return n;
  }
  // The stored field `name`; null when there is none.
  const StoredField* FindField(const std::string& name) const;
  // Keeps `field` among the stored ones, in name order (replacing one of
  // the same name).
  void StoreField(StoredField field);
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_SAMPLE_H_
