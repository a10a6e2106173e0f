#include "pipeline/ops/builtin_ops.h"

#include "pipeline/ops/audio/audio_family.h"
#include "pipeline/ops/compose_ops.h"
#include "pipeline/ops/image/image_family.h"
#include "pipeline/ops/plugins.h"

namespace prepflow {

const OpRegistry& BuiltinOps() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry;
    RegisterBuiltinOps(r);
    return r;
  }();
  return *registry;
}

void RegisterBuiltinOps(OpRegistry* registry) {
  RegisterImageOps(registry);
  RegisterComposeOps(registry);
  RegisterAudioOps(registry);
  // Ops of plugins (--plugin), looked up by name when a stage is built.
  registry->Register(proto::Stage::kCustom,
                     [](const proto::Stage& stage) { return CreatePluginOp(stage.custom()); });
}

}  // namespace prepflow
