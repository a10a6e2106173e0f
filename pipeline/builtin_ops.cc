// The built-in ops: the registry's list of op families (each family's file
// registers its own ops) and plugins' ops. Above the op files, so that the
// registry (ops.cc) includes none of them.
#include "pipeline/detail/image_op.h"
#include "pipeline/ops.h"
#include "pipeline/plugins.h"

namespace prepflow {

const OpRegistry& OpRegistry::Builtin() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry;
    RegisterBuiltinOps(r);
    return r;
  }();
  return *registry;
}

void RegisterBuiltinOps(OpRegistry* registry) {
  detail::RegisterImageOps(registry);
  detail::RegisterColorOps(registry);
  detail::RegisterGeometryOps(registry);
  detail::RegisterAugmentOps(registry);
  detail::RegisterTensorOps(registry);
  // Ops of plugins (--plugin), looked up by name when a stage is built.
  registry->Register(proto::Stage::kCustom,
                     [](const proto::Stage& stage) { return CreatePluginOp(stage.custom()); });
}

}  // namespace prepflow
