// Block ops over the make-tiny checkpoints of every family (kimi-k3 and kimi-linear): the first KDA,
// MLA, MoE and dense-MLP layer of each, bound as the engine binds them (bind_weights), run through
// the CPU Backend and compared with the float64 reference forward's per-block functions
// (tests/model/reference_forward.h: kda_block, mla_block, ffn_block) on the same materialize()d
// weights and the format's own activation rule. Mixers run a prefill of 37 tokens from an empty
// state, then one decode token on that state (the reference runs the 38 tokens as one sequence);
// feed-forward blocks run 1 and 37 tokens. Inputs are N(0, 1) rows.
#include <stdexcept>

#include "backend/cpu/forward.h"
#include "cuda_ops.h"
#include "fixtures.h"
#include "tolerances.h"

namespace k3::op_parity {
namespace {

constexpr int64_t kPrefill = 37;
constexpr uint32_t kInputSeed = 3;

enum class ActClass { Float, Fixed16, Int8 };

// The family's activation numerics in these formats (tolerances.h, BlockTolerance).
ActClass act_class(const std::vector<std::string>& formats) {
  ActClass c = ActClass::Float;
  for (const std::string& f : formats) {
    if (f == "w4a8" || f == "w8a8" || (f.size() > 1 && f[0] == 'q')) return ActClass::Int8;
    if (f == "nvfp4" || f == "mxfp4") c = ActClass::Fixed16;
  }
  return c;
}

double tolerance(const BlockTolerance& t, ActClass c) {
  return c == ActClass::Int8 ? t.int8 : c == ActClass::Fixed16 ? t.fixed16 : t.float_acts;
}

// The CUDA contract of a block in these formats (tolerances.h, CudaBlockTolerance).
double cuda_tolerance(const CudaBlockTolerance& t, const std::vector<std::string>& formats) {
  for (const std::string& f : formats) {
    if (f == "fp8-block" || f == "fp8-tensor") return t.fp8;
  }
  return act_class(formats) == ActClass::Int8 ? t.int8 : t.bf16;
}

const char* class_name(ActClass c) {
  return c == ActClass::Int8 ? "int8 activations (rule applied)" : c == ActClass::Fixed16 ? "16-bit fixed-point activations"
                                                                                          : "float activations";
}

std::vector<float> block_input(const K3Config& c, int64_t rows) {
  return random_values(rows, c.hidden_size, kInputSeed);
}

int64_t first_layer(const K3Config& c, bool (*pick)(const K3Config&, int64_t)) {
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (pick(c, l)) return l;
  }
  return -1;
}

// Routing margins of the reference's router on these inputs (the chosen experts must not depend on
// rounding: a flipped choice moves a token's output by O(1)).
void check_routing_margins(const TinyId& id, int64_t layer, const std::vector<float>& x, int64_t rows) {
  const K3Config& c = tiny(id).config;
  const MoeConfig& m = *c.moe;
  const std::string p = layer_prefix(layer) + "block_sparse_moe.gate.";
  const reference::WeightSource source = weight_source(id);
  const std::vector<double> w = source(p + "weight");
  const std::vector<double> bias = m.has_score_correction_bias ? source(p + "e_score_correction_bias")
                                                               : std::vector<double>(m.num_experts, 0.0);
  const int64_t E = m.num_experts, H = c.hidden_size;
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<double> logits(E, 0.0);
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t i = 0; i < H; ++i) logits[e] += w[e * H + i] * x[t * H + i];
    }
    const reference::RouteRef r = reference::route(m, logits.data(), bias);
    if (r.margin < kRouteMinMargin) {
      throw std::runtime_error(id.label() + " layer " + std::to_string(layer) + " token " + std::to_string(t) +
                               ": routing margin " + std::to_string(r.margin) + " below kRouteMinMargin (change kInputSeed)");
    }
  }
}

struct BlockOp {
  const char* op;
  bool mixer;                                   // prefill + decode; else feed-forward at 1 and 37 rows
  bool (*pick)(const K3Config&, int64_t);       // the layers of this op
  const char* module;                           // parameter prefix under the layer
  const BlockTolerance* tol;
  const CudaBlockTolerance* cuda_tol;
};

const BlockOp kOps[] = {
    {"kda", true, [](const K3Config& c, int64_t l) { return c.is_kda(l); }, "self_attn.", &kKdaTolerance, &kCudaKdaTolerance},
    {"mla", true, [](const K3Config& c, int64_t l) { return !c.is_kda(l); }, "self_attn.", &kMlaTolerance, &kCudaMlaTolerance},
    {"moe", false, [](const K3Config& c, int64_t l) { return c.is_moe(l); }, "block_sparse_moe.", &kMoeTolerance, &kCudaMoeTolerance},
    {"mlp", false, [](const K3Config& c, int64_t l) { return !c.is_moe(l); }, "mlp.", &kMlpTolerance, &kCudaMlpTolerance},
};

// The op's output on the target: mixers prefill kPrefill rows then decode one, feed-forward `rows`.
std::vector<float> run_block(const BlockOp& op, const TinyId& id, int64_t layer, int64_t rows, const Target& target) {
  const K3Config& c = tiny(id).config;
  if (target.kind == TargetKind::Cuda) {
    Tiny& t = tiny(id);
    return cuda_ops()->block(op.op, c, t.plan, *t.files, layer, block_input(c, rows), rows, op.mixer ? kPrefill : rows);
  }
  const LayerWeights& lw = bound_weights(id, target).layers.at(static_cast<size_t>(layer));
  Backend& be = cpu_backend();
  const std::vector<float> x = block_input(c, rows);
  Tensor out;
  if (!op.mixer) {
    const Tensor in = tensor_of(x, rows, c.hidden_size);
    if (std::string(op.op) == "moe") {
      be.moe(c, layer, lw.moe, in, out);
    } else {
      be.mlp(c, lw.mlp, in, out);
    }
    return out.data;
  }
  std::vector<int64_t> mla_index(static_cast<size_t>(c.num_layers), -1);
  mla_index[static_cast<size_t>(layer)] = 0;  // one page per block: this layer's
  LatentPages pages(1, kPrefill + 1, c.mla.kv_lora_rank + c.mla.qk_rope_head_dim, mla_index);
  SequenceState state = new_sequence_state(c, &pages);
  state.blocks = {0};
  std::vector<float> all;
  for (const auto& [row0, n] : {std::pair<int64_t, int64_t>{0, kPrefill}, {kPrefill, 1}}) {
    const std::vector<float> part(x.begin() + row0 * c.hidden_size, x.begin() + (row0 + n) * c.hidden_size);
    const SeqSlice slice{0, n, &state};
    if (std::string(op.op) == "kda") {
      be.kda(c, layer, lw.kda, tensor_of(part, n, c.hidden_size), {&slice, 1}, out);
    } else {
      be.mla(c, layer, lw.mla, tensor_of(part, n, c.hidden_size), {&slice, 1}, out);
    }
    state.length += n;
    all.insert(all.end(), out.data.begin(), out.data.end());
  }
  return all;
}

Expectation block_reference(const BlockOp& op, const TinyId& id, int64_t layer, int64_t rows, ActClass cls) {
  const K3Config& c = tiny(id).config;
  const std::vector<float> x = block_input(c, rows);
  const auto in = rows_of(x, rows, c.hidden_size);
  const reference::WeightSource source = weight_source(id);
  const reference::ActivationRule rule = activation_rule(id);
  reference::Rows y;
  const std::string name = op.op;
  if (name == "kda") {
    y = reference::kda_block(c, source, layer, in, rule);
  } else if (name == "mla") {
    y = reference::mla_block(c, source, layer, in, rule);
    // The decode token takes the absorbed form: the latent meets kv_b dequantised to float
    // (MlaWeights::absorbed: w_uk / w_uv), not kv_b's kernel, so kv_b's activation rule does not apply to it.
    const std::string kv_b = layer_prefix(layer) + "self_attn.kv_b_proj.weight";
    const reference::ActivationRule decode_rule = [rule, kv_b](const std::string& weight, std::vector<double>& v) {
      if (rule && weight != kv_b) rule(weight, v);
    };
    y.back() = reference::mla_block(c, source, layer, in, decode_rule).back();
  } else {
    if (name == "moe") check_routing_margins(id, layer, x, rows);
    y = reference::ffn_block(c, source, layer, in, rule);
  }
  Expectation e;
  e.want = flatten(y);
  e.row_width = c.hidden_size;
  e.tolerance = tolerance(*op.tol, cls);
  e.note = "reference_forward " + name + " block, layer " + std::to_string(layer) + ", " + class_name(cls);
  return e;
}

}  // namespace

std::vector<OpCase> block_cases() {
  std::vector<OpCase> out;
  for (const BlockOp& op : kOps) {
    for (const TinyId& id : all_tiny_ids()) {
      Tiny& t = tiny(id);
      const int64_t layer = t.error.empty() ? first_layer(t.config, op.pick) : -1;
      std::vector<std::string> formats;
      if (layer >= 0) formats = formats_under(t.plan, {layer_prefix(layer) + op.module});
      const ActClass cls = act_class(formats);
      const std::vector<int64_t> row_counts = op.mixer ? std::vector<int64_t>{kPrefill + 1} : std::vector<int64_t>{1, kPrefill};
      for (int64_t rows : row_counts) {
        const std::string shape = op.mixer ? "p37+d1" : "m" + std::to_string(rows);
        OpCase c;
        c.op = op.op;
        c.formats = formats;
        c.name = id.safe() + "__L" + (layer >= 0 ? std::to_string(layer) : std::string("none")) + "__" + safe_name(shape);
        c.shape = shape;
        c.source = id.label() + " L" + std::to_string(layer);
        if (!t.error.empty()) {
          const size_t colon = t.error.rfind(": ");  // the writer's message after its path
          c.skip = id.label() + ": " + (colon == std::string::npos ? t.error : t.error.substr(colon + 2));
        } else if (layer < 0) {
          c.skip = id.label() + " has no " + op.op + " layer";
        }
        c.cuda_tolerance = cuda_tolerance(*op.cuda_tol, formats);
        const BlockOp* o = &op;
        c.reference = [o, id, layer, rows, cls] { return block_reference(*o, id, layer, rows, cls); };
        c.run = [o, id, layer, rows](const Target& target) { return run_block(*o, id, layer, rows, target); };
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}

}  // namespace k3::op_parity
