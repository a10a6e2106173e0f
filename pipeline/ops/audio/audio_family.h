// The audio op family: decode_audio (libsndfile), downmix, fix_length,
// random_segment and resample, as torchaudio defines them. builtin_ops.cc
// registers the family; nothing outside pipeline/ops/audio/ needs more than
// this header.
//
// Thread-safety: RegisterAudioOps fills a registry before it is shared.
#ifndef PREPFLOW_PIPELINE_OPS_AUDIO_AUDIO_FAMILY_H_
#define PREPFLOW_PIPELINE_OPS_AUDIO_AUDIO_FAMILY_H_

#include "pipeline/core/op.h"

namespace prepflow {

// Registers every op of the family.
void RegisterAudioOps(OpRegistry* registry);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_AUDIO_AUDIO_FAMILY_H_
