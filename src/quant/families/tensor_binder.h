// Binding safetensors checkpoint tensors to parameters, shared by every safetensors family:
// lookup under the checkpoint's spellings of a logical name, consumption tracking (every tensor
// is consumed, deliberately skipped, or reported), and the dense (unquantized) bindings.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/parameters.h"
#include "quant/plan/load_plan.h"

namespace k3 {

// The logical spelling of a checkpoint name: the multimodal "language_model." prefix removed and
// "layers." completed to "model.layers." (spec arch §9.4).
std::string canonical_tensor_name(const std::string& name);
// Tensors a text-only run deliberately leaves out (vision tower, projector).
bool is_skipped_tensor(const std::string& canonical);

class TensorBinder {
 public:
  // Registers every shard file in plan.files.
  TensorBinder(const SafetensorsCheckpoint& ckpt, LoadPlan& plan);

  const SafetensorsCheckpoint& checkpoint() const { return ckpt_; }
  LoadPlan& plan() { return plan_; }

  // The tensor stored under this logical name, or nullptr.
  const TensorInfo* find(const std::string& logical) const;
  // Marks the tensor consumed and returns it as a plan source; when absent, records the problem
  // "missing tensor '<logical>'" for `param` and returns nullopt.
  std::optional<SourceTensor> take(const std::string& logical, const std::string& param);
  // As take(), but absence is not a problem.
  std::optional<SourceTensor> take_if_present(const std::string& logical);

  // Records a problem located at a source tensor.
  void problem(const SourceTensor& t, const std::string& field, const std::string& message);
  void problem_for_param(const std::string& param, const std::string& message);

  // Every tensor neither taken nor skipped becomes a problem "binds to no parameter"; skipped
  // ones are listed in plan.skipped.
  void finish();

 private:
  struct Slot {
    SafetensorsCheckpoint::Entry entry;
    bool consumed = false;
  };
  SourceTensor source(const Slot& slot) const;
  Slot* lookup(const std::string& logical);

  const SafetensorsCheckpoint& ckpt_;
  LoadPlan& plan_;
  std::vector<uint32_t> file_of_shard_;
  std::vector<Slot> slots_;
  NameIndex by_canonical_;
};

// Other spellings a checkpoint may use for a logical name (Kimi-Linear writes the dense MLP of
// layers below first_k_dense_replace as block_sparse_moe.{gate,up,down}_proj).
std::vector<std::string> tensor_name_aliases(const std::string& logical);

// An unquantized parameter: one float tensor (BF16/F16/F32/F64) of the parameter's shape — or,
// for A_log, a padded [head_dim] or [1,1,H,1] tensor narrowed to its first H values. Expert banks
// bind experts.{e}.{w1,w2,w3}.weight. Problems (missing, dtype, shape) go to the plan.
Binding bind_dense(TensorBinder& binder, const ParamSpec& spec);

// Checks a source's dtype is a float type fit for an unquantized parameter; records a problem otherwise.
bool check_float_dtype(TensorBinder& binder, const SourceTensor& t, const std::string& param);
// Checks a source's shape; records "shape [..] does not match parameter P [..]" otherwise.
bool check_shape(TensorBinder& binder, const SourceTensor& t, const std::vector<uint64_t>& want, const std::string& param);

std::string shape_string(const std::vector<uint64_t>& shape);

// The checkpoint name of expert e's projection in a bank parameter ("...experts.w1.weight" →
// "...experts.{e}.w1.<suffix>").
std::string expert_tensor_name(const std::string& bank_param, int64_t expert, const std::string& suffix);

}  // namespace k3
