#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>

#include "core/numeric.h"
#include "family_test_util.h"
#include "io/safetensors.h"
#include "quant/formats/modelslim/modelslim.h"

namespace k3 {
namespace {

using test::plan_headers_only;
using test::problems_text;

// One make-tiny checkpoint per architecture for the whole suite (tests only read it).
const test::TinyCheckpoint& tiny(TinyArch arch) {
  static const test::TinyCheckpoint k3 = test::make_tiny(FamilyId::ModelSlimW4A8, TinyArch::KimiK3);
  static const test::TinyCheckpoint linear = test::make_tiny(FamilyId::ModelSlimW4A8, TinyArch::KimiLinear);
  return arch == TinyArch::KimiK3 ? k3 : linear;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string leaf_of(const std::string& name) {
  const std::string module = name.substr(0, name.size() - 7);  // drop ".weight"
  return module.substr(module.rfind('.') + 1);
}

// What make-tiny must have stored each parameter as (the writer's documented assignment).
std::string expected_scheme_name(const ParamSpec& spec, const std::string& stored_dtype) {
  if (spec.kind == ParamKind::ExpertBank) return "W4A8/g64/packed";
  if (spec.kind == ParamKind::Linear) {
    if (spec.group == ParamGroup::Shared) return "W4A8/channel/packed";
    if (spec.group == ParamGroup::Latent) return "W8A8_DYNAMIC";
    const std::string leaf = leaf_of(spec.name);
    if (spec.group == ParamGroup::Kda && (leaf == "q_proj" || leaf == "k_proj" || leaf == "v_proj" || leaf == "g_proj")) {
      return "W8A8_DYNAMIC";
    }
  }
  return stored_dtype;  // FLOAT: the stored dense dtype
}

// Every parameter equals the producer's quantization of the master, dequantized with the
// formula of spec §4.3 / §4.2 written out here; and the producer's codes are within half a step.
void expect_exact_against_master(const test::TinyCheckpoint& t, const LoadPlan& plan) {
  PlanFiles files(plan);
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const ParamSpec& spec = plan.params[i];
    const Binding& b = plan.bindings[i];
    const std::string stored = b.scheme.kind == SchemeKind::Dense ? b.scheme.storage : "";
    ASSERT_EQ(b.scheme.name(), expected_scheme_name(spec, stored)) << spec.name;
    const std::vector<float> got = materialize(b, spec, files);
    const std::vector<float>& master = t.master.at(spec.name);
    ASSERT_EQ(got.size(), master.size()) << spec.name;
    if (b.scheme.kind == SchemeKind::Dense) {
      const bool f32 = b.scheme.storage == "F32";
      for (size_t j = 0; j < master.size(); ++j) {
        ASSERT_EQ(got[j], f32 ? master[j] : decode_bf16(encode_bf16(master[j]))) << spec.name << "[" << j << "]";
      }
      continue;
    }
    const bool bank = spec.kind == ParamKind::ExpertBank;
    const int64_t n = static_cast<int64_t>(spec.shape[spec.shape.size() - 2]), k = static_cast<int64_t>(spec.shape.back());
    const int64_t experts = bank ? static_cast<int64_t>(spec.shape[0]) : 1;
    for (int64_t e = 0; e < experts; ++e) {
      const float* w = master.data() + e * n * k;
      const float* g = got.data() + e * n * k;
      if (b.scheme.kind == SchemeKind::W8A8) {
        const W8A8Weights q = quantize_w8a8(w, n, k, /*bf16_scales=*/!bank);
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t c = 0; c < k; ++c) {
            const float want = static_cast<float>(q.weight[r * k + c]) * q.scale[r];
            ASSERT_EQ(g[r * k + c], want) << spec.name << " e" << e << " [" << r << "," << c << "]";
            ASSERT_LE(std::fabs(w[r * k + c] - want), 0.5001f * q.scale[r]) << spec.name;
          }
        }
        continue;
      }
      const int64_t gs = b.scheme.group_size;
      const W4A8Weights q = quantize_w4a8(w, n, k, gs, /*packed_along_n=*/false, /*bf16_scales=*/!bank);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          const float code = static_cast<float>(q.weight[r * k + c] - kW4OldLayoutCodeOffset);
          const float second = gs ? q.scale_second[r * (k / gs) + c / gs] : 1.0f;
          const float want = gs ? code * q.scale[r] * second : code * q.scale[r];
          ASSERT_EQ(g[r * k + c], want) << spec.name << " e" << e << " [" << r << "," << c << "]";
          ASSERT_LE(std::fabs(w[r * k + c] - want), 0.5001f * q.scale[r] * second) << spec.name;
        }
      }
    }
  }
}

TEST(ModelSlimFamily, EveryParameterIsTheProducersQuantizationOfTheMaster) {
  for (TinyArch arch : {TinyArch::KimiK3, TinyArch::KimiLinear}) {
    const auto& t = tiny(arch);
    const LoadPlan plan = plan_headers_only(t.dir);
    ASSERT_TRUE(plan.ok()) << problems_text(plan);
    EXPECT_EQ(plan.family, "modelslim-w4a8");
    EXPECT_TRUE(plan.skipped.empty());
    ASSERT_EQ(plan.bindings.size(), t.master.params.size());
    expect_exact_against_master(t, plan);
  }
}

std::vector<float> read_f32(const SafetensorsCheckpoint& ckpt, const std::string& name) {
  const auto& e = ckpt.at(name);
  EXPECT_EQ(ckpt.info(e).dtype, Dtype::F32) << name;
  const auto bytes = ckpt.data(e);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

TEST(ModelSlimFamily, ScalesAreNonTrivialAndScaleBiasIsTheKernelTerm) {
  const auto& t = tiny(TinyArch::KimiK3);
  const auto ckpt = SafetensorsCheckpoint::open(t.dir);
  const auto second = read_f32(ckpt, "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_scale_second");
  ASSERT_FALSE(second.empty());
  for (float s : second) {
    EXPECT_NE(s, 1.0f);
    EXPECT_GT(s, 0.0f);
  }
  // scale_bias[n] = 8 · Σ_k w_dequant[n][k] (summed in double), for a per-channel shared expert.
  const LoadPlan plan = plan_headers_only(t.dir);
  const std::string param = "model.layers.1.block_sparse_moe.shared_experts.gate_proj.weight";
  const int64_t i = plan.index_of(param);
  ASSERT_GE(i, 0);
  PlanFiles files(plan);
  const std::vector<float> w = materialize(plan.bindings[i], plan.params[i], files);
  const std::vector<float> bias = read_f32(ckpt, "language_model." + param.substr(0, param.size() - 6) + "scale_bias");
  const size_t n = plan.params[i].shape[0], k = plan.params[i].shape[1];
  ASSERT_EQ(bias.size(), n);
  for (size_t r = 0; r < n; ++r) {
    double sum = 0.0;
    for (size_t c = 0; c < k; ++c) sum += w[r * k + c];
    ASSERT_EQ(bias[r], static_cast<float>(8.0 * sum)) << r;
  }
}

// The capability bug peers shipped: a ModelSlim K3 checkpoint plans MLA
// kv_b_proj as ONE dense tensor; only ExpertPack plans split K/V.
TEST(ModelSlimFamily, RegressionKvBProjStaysOneDenseTensor) {
  const auto& t = tiny(TinyArch::KimiK3);
  const LoadPlan plan = plan_headers_only(t.dir);
  ASSERT_TRUE(plan.ok()) << problems_text(plan);
  EXPECT_FALSE(plan.caps.split_gguf_kv_b);
  EXPECT_TRUE(plan.caps.quantized_latent_projections);
  EXPECT_FALSE(plan.caps.experts_from_pack);
  int kv_b = 0;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const Binding& b = plan.bindings[i];
    EXPECT_NE(b.scheme.kind, SchemeKind::GgmlSplitKvB) << b.param;
    if (ends_with(b.param, "self_attn.kv_b_proj.weight")) {
      ++kv_b;
      EXPECT_EQ(b.scheme.kind, SchemeKind::Dense);
      EXPECT_EQ(b.scheme.name(), "BF16");
      ASSERT_EQ(b.parts.size(), 1u);
      EXPECT_EQ(b.parts[0].role, "weight");
      ASSERT_EQ(b.parts[0].tensors.size(), 1u);
      EXPECT_EQ(b.parts[0].tensors[0].name, "language_model." + b.param);
      EXPECT_EQ(b.parts[0].tensors[0].shape, plan.params[i].shape);
    }
    if (plan.params[i].group == ParamGroup::Latent && plan.params[i].kind == ParamKind::Linear) {
      EXPECT_EQ(b.scheme.kind, SchemeKind::W8A8) << b.param;  // quantized latent projections are planned
    }
  }
  EXPECT_EQ(kv_b, 2);  // MLA at 1-based layers 4 and 6
}

// ---- dequant references against hand-written expectations -----------------------------------

TEST(ModelSlimDequant, PackedNibbleOrderIsLowNibbleEvenRow) {
  static_assert(kW4LowNibbleIsEvenRow);
  // One column, two rows: byte 0xF2 -> row 0 = +2 (low nibble), row 1 = -1 (high nibble 0xF).
  const int8_t packed[1] = {static_cast<int8_t>(0xF2)};
  const float scale[2] = {0.5f, 3.0f};
  float out[2];
  dequant_w4a8(packed, true, scale, nullptr, 0, 2, 1, out, Where{});
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  // 0x87: low nibble 7 -> +7, high nibble 8 -> -8.
  const int8_t packed2[1] = {static_cast<int8_t>(0x87)};
  dequant_w4a8(packed2, true, scale, nullptr, 0, 2, 1, out, Where{});
  EXPECT_EQ(out[0], 3.5f);
  EXPECT_EQ(out[1], -24.0f);
}

TEST(ModelSlimDequant, BothInt4LayoutsMatchAHandWrittenReference) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> code(-8, 7);
  std::uniform_real_distribution<float> pos(0.01f, 2.0f);
  const int64_t n = 6, k = 12;
  for (int64_t gs : {int64_t{0}, int64_t{4}}) {
    std::vector<int8_t> q(n * k);
    for (auto& v : q) v = static_cast<int8_t>(code(rng));
    std::vector<float> scale(n), second(gs ? n * (k / gs) : 0);
    for (auto& v : scale) v = pos(rng);
    for (auto& v : second) v = pos(rng);
    // Packed by hand: byte [r][c] = (row 2r+1 << 4) | (row 2r & 0xF).
    std::vector<int8_t> packed(n / 2 * k);
    for (int64_t r = 0; r < n / 2; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const unsigned lo = static_cast<unsigned>(q[(2 * r) * k + c]) & 0xFu, hi = static_cast<unsigned>(q[(2 * r + 1) * k + c]) & 0xFu;
        packed[r * k + c] = static_cast<int8_t>(static_cast<uint8_t>((hi << 4) | lo));
      }
    }
    std::vector<float> want(n * k);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        float v = static_cast<float>(q[r * k + c]) * scale[r];
        if (gs) v = v * second[r * (k / gs) + c / gs];
        want[r * k + c] = v;
      }
    }
    std::vector<int8_t> old_bytes(q.size());
    for (size_t i = 0; i < q.size(); ++i) old_bytes[i] = static_cast<int8_t>(q[i] + kW4OldLayoutCodeOffset);
    std::vector<float> got_packed(n * k), got_old(n * k);
    dequant_w4a8(packed.data(), true, scale.data(), second.data(), gs, n, k, got_packed.data(), Where{});
    dequant_w4a8(old_bytes.data(), false, scale.data(), second.data(), gs, n, k, got_old.data(), Where{});
    EXPECT_EQ(got_packed, want) << "packed, group_size " << gs;
    EXPECT_EQ(got_old, want) << "old layout, group_size " << gs;
    // The producer's packing is the same byte layout.
    std::vector<int8_t> repacked(n / 2 * k);
    pack_int4_along_n(q.data(), n, k, repacked.data());
    EXPECT_EQ(repacked, packed);
  }
}

TEST(ModelSlimDequant, OldLayoutRejectsBytesOutsideInt4) {
  const int8_t q[2] = {3, 8};
  const float scale[1] = {1.0f};
  float out[2];
  try {
    dequant_w4a8(q, false, scale, nullptr, 0, 1, 2, out, Where{"f.safetensors", "x.weight", "weight"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "f.safetensors: tensor 'x.weight': field 'weight': int4 code 8 at [0, 1] is outside [-8, 7] "
                           "(old W4A8 layout stores one signed int4 per int8)");
  }
}

TEST(ModelSlimDequant, W8A8MatchesAHandWrittenReference) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> code(-128, 127);
  std::uniform_real_distribution<float> pos(0.001f, 0.1f);
  const int64_t n = 5, k = 7;
  std::vector<int8_t> q(n * k);
  for (auto& v : q) v = static_cast<int8_t>(code(rng));
  std::vector<float> scale(n), offset(n);
  for (int64_t r = 0; r < n; ++r) {
    scale[r] = pos(rng);
    offset[r] = static_cast<float>(static_cast<int>(r) - 2);
  }
  std::vector<float> got(n * k);
  dequant_w8a8(q.data(), scale.data(), offset.data(), n, k, got.data());
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) ASSERT_EQ(got[r * k + c], (static_cast<float>(q[r * k + c]) - offset[r]) * scale[r]);
  }
}

// ---- rewritten checkpoints --------------------------------------------------------------------

using DescEdit = std::function<void(Json&)>;
// Returns false to drop the tensor; may change its name, dtype, shape and bytes.
using TensorEdit = std::function<bool(std::string&, Dtype&, std::vector<uint64_t>&, std::vector<uint8_t>&)>;

struct ExtraTensor {
  std::string name;
  Dtype dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};

// A single-file copy of a checkpoint with its description and tensors edited, plus extra tensors.
std::string rewrite(const std::string& src, const std::string& name, const DescEdit& desc_edit, const TensorEdit& tensor_edit,
                    const std::vector<ExtraTensor>& extra = {}) {
  const std::string dst = ::testing::TempDir() + "/k3_modelslim_" + name;
  std::filesystem::remove_all(dst);
  std::filesystem::create_directories(dst);
  std::filesystem::copy_file(src + "/config.json", dst + "/config.json");
  std::ifstream desc_in(src + "/quant_model_description.json");
  Json desc = Json::parse(desc_in);
  if (desc_edit) desc_edit(desc);
  std::ofstream(dst + "/quant_model_description.json") << desc.dump(2);
  const auto ckpt = SafetensorsCheckpoint::open(src);
  SafetensorsWriter w;
  for (const auto& e : ckpt.entries()) {
    const auto& info = ckpt.info(e);
    auto data = ckpt.data(e);
    std::string tname = info.name;
    Dtype dtype = info.dtype;
    std::vector<uint64_t> shape = info.shape;
    std::vector<uint8_t> bytes(data.begin(), data.end());
    if (tensor_edit && !tensor_edit(tname, dtype, shape, bytes)) continue;
    w.add(tname, dtype, shape, bytes);
  }
  for (const auto& x : extra) w.add(x.name, x.dtype, x.shape, x.bytes);
  w.write(dst + "/model.safetensors");
  return dst;
}

std::string desc_path(const std::string& dir) { return dir + "/quant_model_description.json"; }

void expect_single_problem(const std::string& dir, const std::string& text) {
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 1u) << problems_text(plan);
  EXPECT_EQ(plan.problems[0].text(), text);
}

TEST(ModelSlimFamily, OldUnpackedLayoutPlansAndDequantsLikeThePackedOne) {
  const auto& t = tiny(TinyArch::KimiLinear);
  std::ifstream desc_in(t.dir + "/quant_model_description.json");
  const Json desc = Json::parse(desc_in);
  const std::string dir = rewrite(
      t.dir, "old_layout", [](Json& d) { d.erase("version"); },
      [&desc](std::string& name, Dtype&, std::vector<uint64_t>& shape, std::vector<uint8_t>& bytes) {
        if (ends_with(name, ".scale_bias")) return false;  // the old layout derives it at load
        if (ends_with(name, ".weight") && desc.value(name, "") == "W4A8_DYNAMIC") {
          const int64_t n = static_cast<int64_t>(shape[0] * 2), k = static_cast<int64_t>(shape[1]);
          std::vector<int8_t> q(n * k);
          unpack_int4_along_n(reinterpret_cast<const int8_t*>(bytes.data()), n, k, q.data());
          bytes.assign(q.begin(), q.end());
          shape = {static_cast<uint64_t>(n), static_cast<uint64_t>(k)};
        }
        return true;
      });
  const LoadPlan packed = plan_headers_only(t.dir);
  const LoadPlan old = plan_headers_only(dir);
  ASSERT_TRUE(old.ok()) << problems_text(old);
  PlanFiles packed_files(packed), old_files(old);
  int w4 = 0;
  for (size_t i = 0; i < old.params.size(); ++i) {
    const Binding& b = old.bindings[i];
    if (b.scheme.kind == SchemeKind::W4A8) {
      ++w4;
      EXPECT_FALSE(b.scheme.int4_packed_along_n) << b.param;
      EXPECT_EQ(b.parts.front().tensors.front().shape.front(), old.params[i].shape[old.params[i].shape.size() - 2]);
    }
    ASSERT_EQ(materialize(b, old.params[i], old_files), materialize(packed.bindings[i], packed.params[i], packed_files)) << b.param;
  }
  EXPECT_GT(w4, 0);
}

TEST(ModelSlimFamily, W8A8StaticModulePlansWithItsActivationTensors) {
  const auto& t = tiny(TinyArch::KimiK3);
  const std::string base = "language_model.model.layers.3.self_attn.o_proj.";
  const ParamSpec& spec = t.master.spec("model.layers.3.self_attn.o_proj.weight");
  const int64_t n = static_cast<int64_t>(spec.shape[0]), k = static_cast<int64_t>(spec.shape[1]);
  const W8A8Weights q = quantize_w8a8(t.master.at(spec.name).data(), n, k, false);
  std::vector<float> offset(n);
  for (int64_t r = 0; r < n; ++r) offset[r] = static_cast<float>(r % 3) - 1.0f;  // an asymmetric zero point
  auto f32 = [](const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  const uint64_t N = static_cast<uint64_t>(n);
  const std::vector<ExtraTensor> extra{
      {base + "weight_scale", Dtype::F32, {N, 1}, f32(q.scale)},
      {base + "weight_offset", Dtype::F32, {N, 1}, f32(offset)},
      {base + "input_scale", Dtype::F32, {1}, f32({0.02f})},
      {base + "input_offset", Dtype::F32, {1}, f32({3.0f})},
      {base + "quant_bias", Dtype::I32, {N}, std::vector<uint8_t>(N * 4, 0)},
      {base + "deq_scale", Dtype::F32, {N}, f32(std::vector<float>(N, 0.5f))},
  };
  const std::string dir = rewrite(
      t.dir, "w8a8_static",
      [&](Json& d) {
        for (const char* role : {"weight", "weight_scale", "weight_offset", "input_scale", "input_offset", "quant_bias", "deq_scale"}) {
          d[base + role] = "W8A8";
        }
      },
      [&](std::string& name, Dtype& dtype, std::vector<uint64_t>&, std::vector<uint8_t>& bytes) {
        if (name != base + "weight") return true;
        dtype = Dtype::I8;
        bytes.assign(q.weight.begin(), q.weight.end());
        return true;
      },
      extra);
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_TRUE(plan.ok()) << problems_text(plan);
  const int64_t i = plan.index_of(spec.name);
  ASSERT_GE(i, 0);
  const Binding& b = plan.bindings[i];
  EXPECT_EQ(b.scheme.name(), "W8A8_STATIC");
  for (const char* role : {"weight", "weight_scale", "weight_offset", "input_scale", "input_offset", "quant_bias", "deq_scale"}) {
    ASSERT_NE(b.part(role), nullptr) << role;
  }
  PlanFiles files(plan);
  const std::vector<float> got = materialize(b, spec, files);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      ASSERT_EQ(got[r * k + c], (static_cast<float>(q.weight[r * k + c]) - offset[r]) * q.scale[r]);
    }
  }
}

// ---- negative tests: exact messages ------------------------------------------------------------

TEST(ModelSlimFamily, FusedModuleDisagreementIsReported) {
  const auto& t = tiny(TinyArch::KimiK3);
  const std::string dir = rewrite(
      t.dir, "fused", [](Json& d) { d["language_model.model.layers.1.self_attn.g_proj.weight"] = "FLOAT"; }, nullptr);
  expect_single_problem(dir, desc_path(dir) + ": Detected some but not all shards of language_model.model.layers.1.self_attn.fused_qkvg_proj "
                                              "are quantized (q_proj: W8A8_DYNAMIC, k_proj: W8A8_DYNAMIC, v_proj: W8A8_DYNAMIC, "
                                              "g_proj: FLOAT); all shards of a fused module need the same precision");
}

TEST(ModelSlimFamily, SharedExpertGateUpDisagreementIsReported) {
  const auto& t = tiny(TinyArch::KimiLinear);
  const std::string dir = rewrite(
      t.dir, "gate_up", [](Json& d) { d["model.layers.2.block_sparse_moe.shared_experts.up_proj.weight"] = "W8A8_DYNAMIC"; }, nullptr);
  expect_single_problem(dir, desc_path(dir) + ": shards of fused module model.layers.2.block_sparse_moe.shared_experts.gate_up_proj "
                                              "use different schemes (gate_proj: W4A8_DYNAMIC, up_proj: W8A8_DYNAMIC); a fused module needs one");
}

TEST(ModelSlimFamily, UnknownSchemeIsReportedByKey) {
  const auto& t = tiny(TinyArch::KimiK3);
  const std::string key = "language_model.model.layers.2.block_sparse_moe.experts.0.w2.weight";
  const std::string dir = rewrite(t.dir, "unknown", [&](Json& d) { d[key] = "W4A4_MXFP4"; }, nullptr);
  expect_single_problem(dir, desc_path(dir) + ": field '" + key + "': unsupported ModelSlim scheme 'W4A4_MXFP4' "
                                              "(supported: W4A8_DYNAMIC, W8A8_DYNAMIC, W8A8, FLOAT)");
}

TEST(ModelSlimFamily, ExpertSchemeMustHoldForEveryExpert) {
  const auto& t = tiny(TinyArch::KimiK3);
  const std::string key = "language_model.model.layers.1.block_sparse_moe.experts.5.w2.weight";
  const std::string dir = rewrite(t.dir, "expert5", [&](Json& d) { d[key] = "W8A8_DYNAMIC"; }, nullptr);
  expect_single_problem(dir, desc_path(dir) + ": field '" + key + "': expert 5 has scheme 'W8A8_DYNAMIC' but expert 0 has "
                                              "'W4A8_DYNAMIC' (the MoE scheme is read from expert 0 and must hold for every expert)");
}

TEST(ModelSlimFamily, MissingDescriptionKeyIsReported) {
  const auto& t = tiny(TinyArch::KimiK3);
  const std::string dir = rewrite(
      t.dir, "missing_key", [](Json& d) { d.erase("language_model.model.layers.0.self_attn.A_log"); }, nullptr);
  expect_single_problem(dir, desc_path(dir) + ": parameter 'model.layers.0.self_attn.A_log': missing key "
                                              "'language_model.model.layers.0.self_attn.A_log'");
}

TEST(ModelSlimFamily, MissingScaleIsReported) {
  const auto& t = tiny(TinyArch::KimiK3);
  const std::string dir = rewrite(t.dir, "missing_scale", nullptr,
                                  [](std::string& name, Dtype&, std::vector<uint64_t>&, std::vector<uint8_t>&) {
                                    return name != "language_model.model.layers.1.block_sparse_moe.experts.3.w2.weight_scale";
                                  });
  expect_single_problem(dir, dir + "/model.safetensors: parameter 'model.layers.1.block_sparse_moe.experts.w2.weight': "
                                   "missing tensor 'model.layers.1.block_sparse_moe.experts.3.w2.weight_scale'");
}

TEST(ModelSlimFamily, WrongScaleShapeIsReported) {
  const auto& t = tiny(TinyArch::KimiK3);
  const std::string name = "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_scale_second";
  const std::string dir = rewrite(t.dir, "scale_shape", nullptr,
                                  [&](std::string& n, Dtype&, std::vector<uint64_t>& shape, std::vector<uint8_t>&) {
                                    if (n == name) shape = {shape[0] / 2, shape[1] * 2};
                                    return true;
                                  });
  expect_single_problem(dir, dir + "/model.safetensors: tensor '" + name + "': field 'shape': shape [128, 8] for W4A8/g64/packed "
                                   "part 'weight_scale_second' of parameter 'model.layers.1.block_sparse_moe.experts.w1.weight', "
                                   "expected [256, 4]");
}

TEST(ModelSlimFamily, QuantizedKvBProjIsReported) {
  const auto& t = tiny(TinyArch::KimiK3);
  const std::string key = "language_model.model.layers.3.self_attn.kv_b_proj.weight";
  const std::string dir = rewrite(t.dir, "kv_b_quant", [&](Json& d) { d[key] = "W4A8_DYNAMIC"; }, nullptr);
  expect_single_problem(dir, desc_path(dir) + ": field '" + key + "': MLA kv_b_proj must stay one dense FLOAT tensor in ModelSlim "
                                              "checkpoints (split K/V storage is ExpertPack only), got 'W4A8_DYNAMIC'");
}

TEST(ModelSlimFamily, SplitKvBIsReported) {
  const auto& t = tiny(TinyArch::KimiK3);
  const std::string prefix = "language_model.model.layers.5.self_attn.";
  const std::string dir = rewrite(t.dir, "kv_b_split", nullptr,
                                  [&](std::string& n, Dtype&, std::vector<uint64_t>&, std::vector<uint8_t>&) {
                                    if (n == prefix + "kv_b_proj.weight") n = prefix + "k_b_proj.weight";
                                    return true;
                                  });
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 2u) << problems_text(plan);
  EXPECT_EQ(plan.problems[0].text(), dir + "/model.safetensors: parameter 'model.layers.5.self_attn.kv_b_proj.weight': "
                                           "missing tensor 'model.layers.5.self_attn.kv_b_proj.weight'");
  EXPECT_EQ(plan.problems[1].text(), dir + "/model.safetensors: tensor '" + prefix + "k_b_proj.weight': split MLA K/V tensor in a "
                                           "ModelSlim checkpoint: kv_b_proj must stay one dense FLOAT tensor (split K/V storage is "
                                           "ExpertPack only)");
}

TEST(ModelSlimFamily, QuantizedRouterIsReported) {
  const auto& t = tiny(TinyArch::KimiLinear);
  const std::string key = "model.layers.1.block_sparse_moe.gate.weight";
  const std::string dir = rewrite(t.dir, "router", [&](Json& d) { d[key] = "W8A8_DYNAMIC"; }, nullptr);
  expect_single_problem(dir, desc_path(dir) + ": field '" + key + "': the MoE router gate is never quantized, got 'W8A8_DYNAMIC'");
}

}  // namespace
}  // namespace k3
