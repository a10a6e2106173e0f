// The ops prepflow builds pipelines from: every op family's ops and the ops
// of loaded plugins (`custom` stages).
//
// A new family (audio, video, text) lives in a folder of its own under
// pipeline/ops/, exposes one Register*Ops in its family header, and is added
// to RegisterBuiltinOps's list.
//
// Thread-safety: BuiltinOps() builds its registry once, thread-safely, and
// it is immutable after; RegisterBuiltinOps fills a registry before it is
// shared.
#ifndef PREPFLOW_PIPELINE_OPS_BUILTIN_OPS_H_
#define PREPFLOW_PIPELINE_OPS_BUILTIN_OPS_H_

#include "pipeline/core/op.h"

namespace prepflow {

// The registry with every built-in op and plugins' `custom` stages.
const OpRegistry& BuiltinOps();

// Registers every built-in op: one per field of proto::Stage (OpSchemas()).
void RegisterBuiltinOps(OpRegistry* registry);

// The data a stage's ops open beside the samples (add_noise's `path`, in
// compositions too): what a worker checks it may read before it runs the
// stage, and what a client makes absolute for workers to see.
std::vector<std::string*> MutableDataPaths(proto::Stage* stage);
std::vector<std::string> DataPaths(const proto::Stage& stage);
// The single files a stage's ops read (tokenize's model, vocab and merges),
// likewise checked by workers and made absolute by clients.
std::vector<std::string*> MutableFilePaths(proto::Stage* stage);
std::vector<std::string> FilePaths(const proto::Stage& stage);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_BUILTIN_OPS_H_
