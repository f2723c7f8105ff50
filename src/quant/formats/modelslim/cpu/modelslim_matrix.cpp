#include "quant/formats/modelslim/cpu/modelslim_matrix.h"

#include <cmath>

#include "core/error.h"
#include "quant/formats/modelslim/modelslim.h"

namespace k3::cpu {
namespace {

// The source of `role` for source e (for the message).
Where part_where(const Binding& b, const char* role, size_t e, PlanFiles& files) {
  const SourcePart* p = b.part(role);
  if (p == nullptr || e >= p->tensors.size()) return Where{"", b.param, role};
  return Where{files.path(p->tensors[e]), p->tensors[e].name, role};
}

std::optional<W8A8StaticInput> static_input(const Binding& b, const ModelSlimWeight& w, int64_t rows, int64_t cols,
                                             size_t e, PlanFiles& files) {
  const W8A8StaticParts p = read_w8a8_static_parts(b, rows, e, files);
  if (p.input_offset != std::nearbyint(p.input_offset) || p.input_offset < -128.0f || p.input_offset > 127.0f) {
    throw Error(part_where(b, "input_offset", e, files), "input_offset " + std::to_string(p.input_offset) + " is not an integer in [-128, 127]");
  }
  if (!(p.input_scale > 0.0f) || !std::isfinite(p.input_scale)) {
    throw Error(part_where(b, "input_scale", e, files), "input_scale " + std::to_string(p.input_scale) + " is not a positive finite value");
  }
  const int32_t zero = static_cast<int32_t>(p.input_offset);
  const auto* q = reinterpret_cast<const int8_t*>(w.weight.data());
  for (int64_t r = 0; r < rows; ++r) {
    int64_t sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += q[r * cols + c];
    if (p.quant_bias[r] != -zero * sum) {
      throw Error(part_where(b, "quant_bias", e, files),
                  "row " + std::to_string(r) + ": quant_bias " + std::to_string(p.quant_bias[r]) + " is not −input_offset·Σ weight = " +
                      std::to_string(-zero * sum) + " (a folded bias is not supported)");
    }
    const double want = static_cast<double>(p.input_scale) * w.scale[r];
    if (!(std::fabs(p.deq_scale[r] - want) <= 0x1p-7 * std::fabs(want))) {
      throw Error(part_where(b, "deq_scale", e, files), "row " + std::to_string(r) + ": deq_scale " + std::to_string(p.deq_scale[r]) +
                                                            " is not input_scale·weight_scale = " + std::to_string(want));
    }
  }
  return W8A8StaticInput{p.input_scale, zero};
}

}  // namespace

std::unique_ptr<WeightMatrix> make_modelslim_matrix(const Binding& b, int64_t rows, int64_t cols, PlanFiles& files,
                                                    int64_t expert, CpuIsa isa) {
  const size_t e = expert < 0 ? 0 : static_cast<size_t>(expert);
  ModelSlimWeight w = read_modelslim_weight(b, rows, cols, e, files);
  std::optional<W8A8StaticInput> input;
  if (!w.int4 && b.scheme.static_activation) input = static_input(b, w, rows, cols, e, files);
  const std::span<const int8_t> codes(reinterpret_cast<const int8_t*>(w.weight.data()), w.weight.size());
  try {
    if (w.int4) {
      return make_w4a8_matrix(codes, w.packed_along_n, std::move(w.scale), std::move(w.scale_second), w.group_size, rows,
                              cols, isa);
    }
    return make_w8a8_matrix(codes, std::move(w.scale), std::move(w.offset), input, rows, cols, isa);
  } catch (const Error& error) {
    // The format's checks name a field, no tensor: place them on the binding's part of that role
    // (or on the weight).
    const std::string& field = error.where().field;
    const Where part = part_where(b, field.c_str(), e, files);
    throw Error(part.file.empty() ? Where{w.where.file, w.where.tensor, field} : part, error.detail());
  }
}

}  // namespace k3::cpu
