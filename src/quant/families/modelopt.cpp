// Placeholder until this family's module lands: planning and writing report it as unsupported.
#include "quant/families/family.h"

namespace k3::family {
LoadPlan plan_modelopt(const CheckpointDir& ckpt) { throw Error(Where{ckpt.dir, "", ""}, "ModelOpt checkpoints are not supported yet"); }
void write_modelopt(FamilyId, const MasterWeights&, Json, const std::string& out) { throw Error(Where{out, "", ""}, "ModelOpt writing is not supported yet"); }
}  // namespace k3::family
