// The audio op family: decode_audio (libsndfile), downmix, fix_length,
// random_segment, resample, the spectrograms and masks, speed perturbation,
// gain, Kaldi filterbanks and CMVN, as torchaudio defines them. builtin_ops.cc
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
// feature_ops.cc's (speed_perturb, vol, kaldi_fbank, utterance_cmvn,
// transpose): RegisterAudioOps calls it, last.
void RegisterAudioFeatureOps(OpRegistry* registry);
// stretch_ops.cc's (time_stretch, magnitude, mel_scale): RegisterAudioOps
// calls it after its own.
void RegisterAudioStretchOps(OpRegistry* registry);
// noise_ops.cc's (add_noise): RegisterAudioOps calls it, after the stretch ops.
void RegisterAudioNoiseOps(OpRegistry* registry);
// vad.cc's (vad): RegisterAudioOps calls it, after the noise ops.
void RegisterAudioVadOps(OpRegistry* registry);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_AUDIO_AUDIO_FAMILY_H_
