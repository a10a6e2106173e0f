// Workspace: a thread's scratch memory for running a pipeline (the buffers
// ops write into, the decoder), metered against a WorkingMemory on workers.
//
// Thread-safety: one Workspace per thread.
#ifndef PREPFLOW_PIPELINE_CORE_WORKSPACE_H_
#define PREPFLOW_PIPELINE_CORE_WORKSPACE_H_

#include <memory>

#include "pipeline/core/image_decode.h"
#include "pipeline/core/sample.h"
#include "pipeline/core/working_memory.h"

namespace prepflow {

// Per-thread scratch state. Buffers grow to the largest sample and are then
// reused, so running a pipeline allocates nothing per sample. Bound by a
// WorkingMemory (a worker's threads), what the buffers and the decoder hold
// is counted, a large sample waits its turn, and EndSample() gives back
// what a sample took past the thread's share.
struct Workspace {
  Workspace() = default;
  explicit Workspace(WorkingMemory* memory);

  // Between samples: frees the largest buffers until what the thread holds
  // is within its share again, and lets the next large sample go. Nothing
  // when unbounded.
  void EndSample();

  std::unique_ptr<MemoryMeter> meter;  // first: the buffers uncount into it
  ImageDecoder decoder;
  Buffer encoded;
  Buffer scratch[3];
  // Where an op applied frame by frame to a clip (pipeline/ops/per_frame.h)
  // gathers its frames: two, so that one holds its input clip while the
  // next clip is written, the scratch buffers left to the op it wraps.
  Buffer clips[2];

  // A scratch buffer that does not hold `in` (the op's input).
  Buffer* ScratchFor(const void* in) {
    for (Buffer& b : scratch) {
      if (!b.Contains(in)) return &b;
    }
    return &scratch[0];  // unreachable: `in` lies in at most one buffer
  }
  // A scratch buffer that holds neither `a` nor `b` (an op's input and output).
  Buffer* ScratchFor(const void* a, const void* b) {
    for (Buffer& buf : scratch) {
      if (!buf.Contains(a) && !buf.Contains(b)) return &buf;
    }
    return &scratch[0];  // unreachable: three buffers, two pointers
  }
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_WORKSPACE_H_
