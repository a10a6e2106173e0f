// Composition ops: random_apply, random_choice and random_order, stages
// made of stages, as torchvision's RandomApply, RandomChoice and RandomOrder.
//
// A composition is one stage of its pipeline (the planner cuts before or
// after it, never inside). Its own draw comes from the stage's stream; inner
// stage j draws from the substream of id parent * 256 + j + 1 (SampleRng::
// Substream), so each inner stage's draws are its own and the same wherever
// the sample runs. Inner stages are built with the registry the composition
// was registered in; they may not decode; compositions nest at most
// kMaxComposeDepth deep, with at most kMaxInnerStages stages each.
//
// Thread-safety: as every op (op.h): immutable once built.
#ifndef PREPFLOW_PIPELINE_OPS_COMPOSE_OPS_H_
#define PREPFLOW_PIPELINE_OPS_COMPOSE_OPS_H_

#include "pipeline/core/op.h"

namespace prepflow {

inline constexpr int kMaxInnerStages = 64;
inline constexpr int kMaxComposeDepth = 4;

// Registers the three, building inner stages from `registry` (which must
// outlive every op built from it).
void RegisterComposeOps(OpRegistry* registry);

// The inner stages of a composition; null for any other op. What every walk
// into compositions (fidelity, plugins, nesting) goes through.
const google::protobuf::RepeatedPtrField<proto::Stage>* InnerStages(const proto::Stage& stage);
google::protobuf::RepeatedPtrField<proto::Stage>* MutableInnerStages(proto::Stage* stage);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_COMPOSE_OPS_H_
