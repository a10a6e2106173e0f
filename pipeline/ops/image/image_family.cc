#include "pipeline/ops/image/image_family.h"

#include "pipeline/ops/image/image_op.h"

namespace prepflow {

void RegisterImageOps(OpRegistry* registry) {
  detail::RegisterBasicImageOps(registry);
  detail::RegisterColorOps(registry);
  detail::RegisterGeometryOps(registry);
  detail::RegisterAugmentOps(registry);
  detail::RegisterTensorOps(registry);
}

}  // namespace prepflow
