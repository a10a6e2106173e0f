// Each sample's length in seconds, for batching by length: a manifest's
// durations where it gives them, else what each audio file's header
// declares (read once, when the Loader starts; nothing is decoded). A WAV's
// or FLAC's first 64 KiB are read (Dataset::ReadHead: a ranged read for
// remote data); MP3 and Ogg, whose length is in their stream, are read
// whole, as is a file whose header runs past those bytes.
//
// Thread-safety: a pure function of the dataset.
#ifndef PREPFLOW_CLIENT_SAMPLE_LENGTHS_H_
#define PREPFLOW_CLIENT_SAMPLE_LENGTHS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/data/dataset.h"

namespace prepflow {

// Seconds per sample: of its media, or of its member `field` (a record's
// audio field: read whole). A file whose header does not read counts as 0 s
// (it fails when decoded, as --on-error says) and is logged; an outage of
// the storage is an error, as for any read.
absl::StatusOr<std::vector<double>> SampleSeconds(const Dataset& dataset,
                                                  const std::string& field = "");

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_SAMPLE_LENGTHS_H_
