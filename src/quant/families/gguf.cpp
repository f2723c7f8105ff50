// Placeholder until this family's module lands: planning and writing report it as unsupported.
#include "quant/families/family.h"

namespace k3::family {
LoadPlan plan_gguf(const CheckpointDir& ckpt) { throw Error(Where{ckpt.dir, "", ""}, "GGUF checkpoints are not supported yet"); }
void write_gguf(bool, const MasterWeights&, Json, const std::string& out) { throw Error(Where{out, "", ""}, "GGUF writing is not supported yet"); }
}  // namespace k3::family
