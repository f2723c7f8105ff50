// Placeholder until this family's module lands: planning and writing report it as unsupported.
#include "quant/families/family.h"

namespace k3::family {
LoadPlan plan_modelslim(const CheckpointDir& ckpt) { throw Error(Where{ckpt.dir, "", ""}, "ModelSlim checkpoints are not supported yet"); }
void write_modelslim_w4a8(const MasterWeights&, Json, const std::string& out) { throw Error(Where{out, "", ""}, "ModelSlim writing is not supported yet"); }
}  // namespace k3::family
