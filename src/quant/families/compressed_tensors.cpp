// Placeholder until this family's module lands: planning and writing report it as unsupported.
#include "quant/families/family.h"

namespace k3::family {
LoadPlan plan_compressed_tensors(const CheckpointDir& ckpt) { throw Error(Where{ckpt.dir, "", ""}, "compressed-tensors checkpoints are not supported yet"); }
void write_compressed_tensors_mxfp4(const MasterWeights&, Json, const std::string& out) { throw Error(Where{out, "", ""}, "compressed-tensors writing is not supported yet"); }
}  // namespace k3::family
