// Placeholder until this family's module lands: planning and writing report it as unsupported.
#include "quant/families/family.h"

namespace k3::family {
LoadPlan plan_fp8_block(const CheckpointDir& ckpt) { throw Error(Where{ckpt.dir, "", ""}, "FP8 block checkpoints are not supported yet"); }
void write_fp8_block(const MasterWeights&, Json, const std::string& out) { throw Error(Where{out, "", ""}, "FP8 block writing is not supported yet"); }
}  // namespace k3::family
