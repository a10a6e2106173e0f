// The text op family: tokenize (SentencePiece, GPT-2's and CLIP's BPE), for
// captions of image-text records and documents of text streams.
// builtin_ops.cc registers the family; nothing outside pipeline/ops/text/
// needs more than this header.
//
// Thread-safety: RegisterTextOps fills a registry before it is shared.
#ifndef PREPFLOW_PIPELINE_OPS_TEXT_TEXT_FAMILY_H_
#define PREPFLOW_PIPELINE_OPS_TEXT_TEXT_FAMILY_H_

#include "pipeline/core/op.h"

namespace prepflow {

// Registers every op of the family.
void RegisterTextOps(OpRegistry* registry);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_TEXT_TEXT_FAMILY_H_
