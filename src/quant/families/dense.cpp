// Dense HF safetensors (BF16/F16/F32), sharded or not: every parameter is one float tensor.
#include "quant/families/checkpoint_writer.h"
#include "quant/families/family.h"
#include "quant/families/tensor_binder.h"

namespace k3::family {

LoadPlan plan_dense(const CheckpointDir& ckpt) {
  if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "missing config.json");
  LoadPlan plan;
  plan.family = family_name(FamilyId::Bf16);
  const SafetensorsCheckpoint st = SafetensorsCheckpoint::open(ckpt.dir);
  TensorBinder binder(st, plan);
  plan.params = parameter_inventory(*ckpt.config);
  for (const auto& spec : plan.params) plan.bindings.push_back(bind_dense(binder, spec));
  binder.finish();
  return plan;
}

WritePlan write_plan_dense(const FloatSource& source, Json config_doc, Dtype dtype) {
  SafetensorsPlanBuilder out(source);
  for (const auto& spec : source.params()) out.add_unquantized(spec, dtype);
  return out.build(std::move(config_doc));
}

}  // namespace k3::family
