// A scheme's entry in the plan layer: its names, its exact reference dequant, and the stored layout
// of a quantized Linear module. Each format folder defines the entries of its schemes as
// `const PlanFormat plan_format_<name>` (the names of quant/formats/scheme_list.h); plan_format()
// finds them by that list, so the plan layer dispatches on SchemeKind without naming a format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/plan/load_plan.h"
#include "quant/plan/plan_files.h"

namespace k3 {

struct PlanFormat {
  const char* kind_name;                 // scheme_kind_name(): "DENSE", …
  std::string (*name)(const Scheme& s);  // Scheme::name(): "BF16", …
  // Exact reference: the binding's sources (every expert of a bank, in order) as float32 into out,
  // row-major in spec.shape. Reads only the bytes the binding names.
  void (*dequant)(const Binding& b, const ParamSpec& spec, PlanFiles& files, float* out);
  // On-disk shapes of the main tensor and the scale of a quantized Linear [n, k] stored as a
  // QuantizedLayout; nullptr for schemes no QuantizedLayout uses.
  std::vector<uint64_t> (*linear_weight_shape)(const Scheme& s, uint64_t n, uint64_t k) = nullptr;
  std::vector<uint64_t> (*linear_scale_shape)(const Scheme& s, uint64_t n, uint64_t k) = nullptr;
  // Why a weight [n, k] cannot be stored in this scheme, one text per reason (nullptr: every
  // shape can).
  std::vector<std::string> (*shape_problems)(const Scheme& s, uint64_t n, uint64_t k) = nullptr;
};

// The entry of a scheme kind.
const PlanFormat& plan_format(SchemeKind kind);

// Why a weight [n, k] cannot be stored in `scheme` (its entry's shape_problems); empty when it can.
std::vector<std::string> shape_problems(const Scheme& scheme, uint64_t n, uint64_t k);

// One stored part of a quantized weight [n, k], as a family binds it: its role, the dtypes and
// shapes it may have.
struct PartLayout {
  std::string role;
  std::vector<std::string> dtypes;            // empty: any float type (BF16, F16, F32)
  std::vector<std::vector<uint64_t>> shapes;  // any of these
  bool required = true;
};

// How one quantized Linear module is stored (quant/families/quantized_linear.h binds it):
// `<module>.<weight_suffix>` with scheme.storage as dtype, `<module>.<scale_suffix>` with one of
// scale_dtypes. Format folders build the layouts of their schemes.
struct QuantizedLayout {
  Scheme scheme;
  std::string weight_suffix;              // "weight_packed" or "weight"
  std::string scale_suffix;               // "weight_scale" or "weight_scale_inv"
  std::vector<std::string> scale_dtypes;  // accepted scale dtypes

  // On-disk shapes for a [n, k] module (the scheme's linear_weight_shape / linear_scale_shape).
  std::vector<uint64_t> weight_shape(uint64_t n, uint64_t k) const;
  std::vector<uint64_t> scale_shape(uint64_t n, uint64_t k) const;
};

// Helpers for the entries' dequant.
// The binding's part `role`; a k3::Error naming the parameter when it has none (or no tensor).
const SourcePart& need_part(const Binding& b, const char* role);
// Rows and columns of one (per-expert) 2-D weight slice of the parameter.
struct MatrixDims {
  int64_t n, k;
};
MatrixDims matrix_of(const ParamSpec& spec);

}  // namespace k3
