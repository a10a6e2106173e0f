// What of a job's pipeline a worker runs: the stages before the first it
// cannot, because the op is a plugin's not loaded here or the stage's data
// (add_noise's noise set, tokenize's model) is not readable here (outside
// --data-root, a URL not allowed). The client keeps the rest on the trainer.
//
// Thread-safety: pure functions (the opener is called from the caller's thread).
#ifndef PREPFLOW_SERVER_RUNNABLE_PREFIX_H_
#define PREPFLOW_SERVER_RUNNABLE_PREFIX_H_

#include <string>

#include "pipeline/core/op.h"
#include "proto/worker.pb.h"

namespace prepflow {

// The job's pipeline up to that stage (all of it when none): a record's
// fields that only the dropped stages work on are carried encoded, and the
// batch stages are dropped. `*unavailable` says why it stops there; empty
// when it does not.
proto::PipelineSpec RunnablePrefix(const proto::JobOpen& open, const OpDataOpener& open_data,
                                   const OpFileReader& read_file, std::string* unavailable);

}  // namespace prepflow

#endif  // PREPFLOW_SERVER_RUNNABLE_PREFIX_H_
