#include "pipeline/core/workspace.h"

#include <malloc.h>

#include <algorithm>
#include <iterator>

namespace prepflow {

Workspace::Workspace(WorkingMemory* memory) : meter(std::make_unique<MemoryMeter>(memory)) {
  decoder.set_meter(meter.get());
  encoded.set_meter(meter.get());
  for (Buffer& b : scratch) b.set_meter(meter.get());
  for (Buffer& b : clips) b.set_meter(meter.get());
}

void Workspace::EndSample() {
  if (meter == nullptr || !meter->past_share()) return;
  Buffer* buffers[] = {&encoded, &scratch[0], &scratch[1], &scratch[2], &clips[0], &clips[1]};
  std::sort(std::begin(buffers), std::end(buffers),
            [](const Buffer* a, const Buffer* b) { return a->capacity() > b->capacity(); });
  for (Buffer* b : buffers) {
    if (meter->held() <= meter->share()) break;
    b->Release();
  }
  meter->EndSample();
  // What the sample freed (its buffers, libjpeg's and OpenCV's) goes back to
  // the kernel now: left in this thread's malloc arena it would count in
  // the process's memory beside what the next large sample takes in its own.
  malloc_trim(0);
}

}  // namespace prepflow
