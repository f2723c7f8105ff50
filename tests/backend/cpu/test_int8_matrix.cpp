// ModelSlim W4A8 / W8A8 CPU formats on every CPU tier this host runs: exact decode against the
// references (dequant_w4a8 / dequant_w8a8), fused and tile kernels against float64, the int8
// activation contracts, and make_modelslim_matrix on a make-tiny checkpoint and a written W8A8
// static one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <tuple>

#include "error_of.h"
#include "quant/families/family_test_util.h"
#include "quant/formats/modelslim/cpu/modelslim_matrix.h"
#include "core/error.h"
#include "core/numeric.h"
#include "io/safetensors.h"
#include "kernel_test_util.h"
#include "quant/formats/modelslim/modelslim.h"

namespace k3::cpu {
namespace {

using testing::expect_driver_matches;
using testing::expect_matches_float64;
using testing::random_floats;
using testing::tier_name;

class Int8MatrixTest : public ::testing::TestWithParam<CpuIsa> {};

void expect_same_bits(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &want[i], 4);
    std::memcpy(&b, &got[i], 4);
    ASSERT_EQ(a, b) << what << " [" << i << "]: " << want[i] << " vs " << got[i];
  }
}

// decode_rows of all rows and of a sub-range against the reference; kernels against float64 (token
// counts 1, 3, 6, 9 take every AVX-512 token batch; N ≥ 64 its four-row-group path).
void expect_format(const std::function<std::unique_ptr<WeightMatrix>()>& make, const std::vector<float>& want,
                   uint32_t seed) {
  auto m = make();
  const int64_t n = m->rows(), k = m->cols();
  std::vector<float> got(static_cast<size_t>(n * k));
  m->decode_rows(0, n, got.data());
  expect_same_bits(want, got, m->kernel_name());
  std::vector<float> part(static_cast<size_t>((n - 8) * k));
  m->decode_rows(5, n - 3, part.data());
  expect_same_bits(std::vector<float>(want.begin() + 5 * k, want.begin() + (n - 3) * k), part, m->kernel_name() + " rows 5..");
  for (int64_t tokens : {1, 3, 6, 9}) expect_matches_float64(*m, random_floats(static_cast<size_t>(tokens * k), seed + tokens), tokens);
  expect_driver_matches(make(), seed + 100);
}

struct W4Case {
  int64_t group;
  bool packed;
  int64_t n, k;
  bool bf16_scales;
};

TEST_P(Int8MatrixTest, W4a8DecodeIsTheReferenceAndKernelsMatchFloat64) {
  uint32_t seed = 1;
  for (const W4Case c : {W4Case{0, true, 38, 256, true}, W4Case{0, false, 37, 512, false}, W4Case{32, true, 50, 256, false},
                         W4Case{32, false, 37, 512, true}, W4Case{64, true, 38, 384, true}, W4Case{64, false, 21, 192, false},
                         // integer blocks shorter than the scale group (10240 of 20480 k)
                         W4Case{0, true, 18, 20480, true}, W4Case{20480, false, 9, 40960, false}}) {
    SCOPED_TRACE("group " + std::to_string(c.group) + (c.packed ? " packed" : " unpacked"));
    const std::vector<float> w = random_floats(static_cast<size_t>(c.n * c.k), ++seed, 0.05f);
    const W4A8Weights q = quantize_w4a8(w.data(), c.n, c.k, c.group, c.packed, c.bf16_scales);
    std::vector<float> want(static_cast<size_t>(c.n * c.k));
    dequant_w4a8(q.weight.data(), c.packed, q.scale.data(), q.scale_second.data(), c.group, c.n, c.k, want.data(), Where{});
    expect_format([&] { return make_w4a8_matrix(q.weight, c.packed, q.scale, q.scale_second, c.group, c.n, c.k, GetParam()); },
                  want, seed * 10);
  }
}

TEST_P(Int8MatrixTest, W8a8DynamicDecodeIsTheReferenceAndKernelsMatchFloat64) {
  // K = 8448 takes three integer blocks of 2816.
  for (const auto& [n, k, offsets] : {std::tuple<int64_t, int64_t, bool>{37, 320, false}, {19, 8448, false}, {70, 256, true}}) {
    const std::vector<float> w = random_floats(static_cast<size_t>(n * k), 20 + k, 0.05f);
    const W8A8Weights q = quantize_w8a8(w.data(), n, k, true);
    std::vector<float> offset(static_cast<size_t>(n), 0.0f);
    if (offsets) {
      for (int64_t r = 0; r < n; ++r) offset[r] = static_cast<float>(r % 7 - 3);
    }
    std::vector<float> want(static_cast<size_t>(n * k));
    dequant_w8a8(q.weight.data(), q.scale.data(), offset.data(), n, k, want.data());
    expect_format([&] { return make_w8a8_matrix(q.weight, q.scale, offset, std::nullopt, n, k, GetParam()); }, want, 30);
  }
}

TEST_P(Int8MatrixTest, W8a8StaticDecodeIsTheReferenceAndKernelsMatchFloat64) {
  const int64_t n = 67, k = 320;
  const std::vector<float> w = random_floats(static_cast<size_t>(n * k), 40, 0.05f);
  const W8A8Weights q = quantize_w8a8(w.data(), n, k, false);
  for (const auto& [zero, offsets] : {std::pair<int32_t, bool>{0, false}, {5, false}, {-3, true}}) {
    std::vector<float> offset(static_cast<size_t>(n), 0.0f);
    if (offsets) {
      for (int64_t r = 0; r < n; ++r) offset[r] = static_cast<float>(r % 5 - 2);
    }
    std::vector<float> want(static_cast<size_t>(n * k));
    dequant_w8a8(q.weight.data(), q.scale.data(), offset.data(), n, k, want.data());
    const W8A8StaticInput input{0.02f, zero};  // inputs ~N(0, 1): some codes clamp
    expect_format([&] { return make_w8a8_matrix(q.weight, q.scale, offset, input, n, k, GetParam()); }, want, 50);

    // The static contract: code = clamp(round(x / s) + z), values (code − z) · s.
    auto m = make_w8a8_matrix(q.weight, q.scale, offset, input, n, k, GetParam());
    const std::vector<float> x = random_floats(static_cast<size_t>(2 * k), 51);
    PreparedActivations a;
    m->prepare(x.data(), 2, a);
    std::vector<float> v(static_cast<size_t>(k));
    int clamped = 0;
    for (int64_t t = 0; t < 2; ++t) {
      a.values(t, v.data());
      for (int64_t i = 0; i < k; ++i) {
        const float code = std::clamp(std::nearbyint(x[t * k + i] / input.scale) + zero, -128.0f, 127.0f);
        clamped += code == -128.0f || code == 127.0f;
        ASSERT_EQ(a.q[t * k + i], code);
        ASSERT_EQ(v[i], (code - zero) * input.scale);
      }
    }
    EXPECT_GT(clamped, 0);
  }
}

// W4A8 / W8A8 dynamic activations are the format's: s_t = amax_t / 127, code = round(x / s_t).
TEST_P(Int8MatrixTest, DynamicActivationsAreTheFormatsInt8PerToken) {
  const int64_t n = 16, k = 512, m = 3;
  const std::vector<float> w = random_floats(static_cast<size_t>(n * k), 60, 0.05f);
  const W4A8Weights q4 = quantize_w4a8(w.data(), n, k, 0, true, true);
  const W8A8Weights q8 = quantize_w8a8(w.data(), n, k, true);
  const std::vector<float> x = random_floats(static_cast<size_t>(m * k), 61, 3.0f);
  for (const auto& matrix : {make_w4a8_matrix(q4.weight, true, q4.scale, {}, 0, n, k, GetParam()),
                             make_w8a8_matrix(q8.weight, q8.scale, std::vector<float>(n, 0.0f), std::nullopt, n, k, GetParam())}) {
    PreparedActivations a;
    matrix->prepare(x.data(), m, a);
    ASSERT_EQ(a.form, ActivationForm::Int8PerToken);
    std::vector<float> v(static_cast<size_t>(k));
    for (int64_t t = 0; t < m; ++t) {
      float amax = 0.0f;
      for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(x[t * k + i]));
      const float s = amax / 127.0f;
      a.values(t, v.data());
      for (int64_t i = 0; i < k; ++i) {
        const float code = std::nearbyint(x[t * k + i] / s);
        ASSERT_EQ(a.q[t * k + i], code) << matrix->kernel_name() << " token " << t << " [" << i << "]";
        ASSERT_EQ(v[i], code * s);
      }
    }
  }
}

TEST_P(Int8MatrixTest, BadInputsAreErrors) {
  const int64_t n = 16, k = 64;
  std::vector<int8_t> codes(static_cast<size_t>(n * k), 0);
  const std::vector<float> scale(static_cast<size_t>(n), 1.0f);
  codes[70] = 9;  // outside [-8, 7] in the old layout
  EXPECT_THROW(make_w4a8_matrix(codes, false, scale, {}, 0, n, k, GetParam()), Error);
  codes[70] = 0;
  EXPECT_THROW(make_w4a8_matrix(codes, false, scale, {}, 0, n, 60, GetParam()), Error);                     // bytes ≠ rows·cols
  EXPECT_THROW(make_w4a8_matrix(codes, false, scale, std::vector<float>(n * 8), 8, n, k, GetParam()), Error);  // group 8
  EXPECT_THROW(make_w4a8_matrix(codes, true, scale, {}, 0, n, k, GetParam()), Error);                      // packed: [n/2, k]
  std::vector<float> offset(static_cast<size_t>(n), 0.0f);
  offset[3] = 0.5f;
  EXPECT_THROW(make_w8a8_matrix(codes, scale, offset, std::nullopt, n, k, GetParam()), Error);
  EXPECT_THROW(make_w8a8_matrix(codes, scale, std::vector<float>(n, 0.0f), W8A8StaticInput{0.0f, 0}, n, k, GetParam()), Error);
  const std::vector<int8_t> ragged(static_cast<size_t>(n * 40), 0);
  EXPECT_THROW(make_w8a8_matrix(ragged, scale, std::vector<float>(n, 0.0f), std::nullopt, n, 40, GetParam()), Error);
}

INSTANTIATE_TEST_SUITE_P(Tiers, Int8MatrixTest, ::testing::ValuesIn(runnable_isas()), tier_name);

// ---- binding level ---------------------------------------------------------------------------

std::vector<float> slice(const std::vector<float>& all, int64_t index, int64_t count) {
  return std::vector<float>(all.begin() + index * count, all.begin() + (index + 1) * count);
}

using test::error_of;

TEST(ModelSlimMatrix, TinyCheckpointDecodesToMaterialize) {
  const test::TinyCheckpoint t = test::make_tiny(FamilyId::ModelSlimW4A8, TinyArch::KimiK3);
  const LoadPlan plan = test::plan_headers_only(t.dir);
  ASSERT_TRUE(plan.ok()) << test::problems_text(plan);
  PlanFiles files(plan);
  int expert_banks = 0, w4_linears = 0, w8_linears = 0;
  const Binding* some_bank = nullptr;
  int64_t bank_n = 0, bank_k = 0;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const ParamSpec& spec = plan.params[i];
    const Binding& b = plan.bindings[i];
    if (b.scheme.kind != SchemeKind::W4A8 && b.scheme.kind != SchemeKind::W8A8) continue;
    const bool bank = spec.kind == ParamKind::ExpertBank;
    int& count = bank ? expert_banks : b.scheme.kind == SchemeKind::W4A8 ? w4_linears : w8_linears;
    if (count >= 2) continue;
    ++count;
    const int64_t n = static_cast<int64_t>(spec.shape[spec.shape.size() - 2]), k = static_cast<int64_t>(spec.shape.back());
    const std::vector<float> all = materialize(b, spec, files);
    const std::vector<int64_t> experts = bank ? std::vector<int64_t>{0, static_cast<int64_t>(spec.shape[0]) - 1} : std::vector<int64_t>{-1};
    for (const int64_t e : experts) {
      for (const CpuIsa isa : runnable_isas()) {
        auto m = make_modelslim_matrix(b, n, k, files, e, isa);
        std::vector<float> got(static_cast<size_t>(n * k));
        m->decode_rows(0, n, got.data());
        expect_same_bits(slice(all, std::max<int64_t>(e, 0), n * k), got, spec.name + " " + m->kernel_name());
        expect_matches_float64(*m, random_floats(static_cast<size_t>(2 * k), 70), 2);
      }
    }
    if (bank) some_bank = &b, bank_n = n, bank_k = k;
  }
  EXPECT_GT(expert_banks, 0);
  EXPECT_GT(w4_linears, 0);
  EXPECT_GT(w8_linears, 0);
  ASSERT_NE(some_bank, nullptr);

  // Bad inputs name the tensor and field.
  const Binding& b = *some_bank;
  const std::string weight1 = b.part("weight")->tensors[1].name;
  const CpuIsa isa = selected_isa();
  EXPECT_NE(error_of([&] { make_modelslim_matrix(b, bank_n + 2, bank_k, files, 1, isa); }).find(weight1), std::string::npos);
  EXPECT_FALSE(error_of([&] { make_modelslim_matrix(b, bank_n, bank_k, files, 1000, isa); }).empty());
  Binding no_scale = b;
  std::erase_if(no_scale.parts, [](const SourcePart& p) { return p.role == "weight_scale"; });
  EXPECT_NE(error_of([&] { make_modelslim_matrix(no_scale, bank_n, bank_k, files, 1, isa); }).find("weight_scale"), std::string::npos);
  Binding nonzero_offset = b;  // weight_offset read from the (nonzero) weight_scale tensors
  for (SourcePart& p : nonzero_offset.parts) {
    if (p.role == "weight_offset") p.tensors = b.part("weight_scale")->tensors;
  }
  const std::string msg = error_of([&] { make_modelslim_matrix(nonzero_offset, bank_n, bank_k, files, 1, isa); });
  EXPECT_NE(msg.find("nonzero W4A8 offset"), std::string::npos) << msg;
  EXPECT_NE(msg.find("weight_offset"), std::string::npos) << msg;
}

// A W8A8 static weight written to a safetensors file, bound by hand (make-tiny writes none).
class W8a8StaticFile {
 public:
  W8a8StaticFile(int64_t n, int64_t k, float input_scale, float input_offset, bool i64_deq_scale, float deq_factor = 1.0f,
                 int32_t bias_delta = 0)
      : n_(n), k_(k), path_(::testing::TempDir() + "/k3_w8a8_static_" + std::to_string(count_++) + ".safetensors") {
    const std::vector<float> w = random_floats(static_cast<size_t>(n * k), 80, 0.05f);
    q_ = quantize_w8a8(w.data(), n, k, true);
    std::vector<uint16_t> scale(static_cast<size_t>(n)), zeros(static_cast<size_t>(n), 0);
    std::vector<int32_t> bias(static_cast<size_t>(n));
    std::vector<float> deq(static_cast<size_t>(n));
    std::vector<int64_t> deq64(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      scale[r] = encode_bf16(q_.scale[r]);
      int32_t sum = 0;
      for (int64_t c = 0; c < k; ++c) sum += q_.weight[r * k + c];
      bias[r] = -static_cast<int32_t>(input_offset) * sum + (r == 7 ? bias_delta : 0);
      deq[r] = input_scale * q_.scale[r] * (r == 9 ? deq_factor : 1.0f);
      uint32_t bits;
      std::memcpy(&bits, &deq[r], 4);
      deq64[r] = bits;
    }
    const uint16_t is = encode_bf16(input_scale), io = encode_bf16(input_offset);
    SafetensorsWriter out;
    out.add("l.weight", Dtype::I8, {uint64_t(n), uint64_t(k)}, bytes(q_.weight));
    out.add("l.weight_scale", Dtype::BF16, {uint64_t(n), 1}, bytes(scale));
    out.add("l.weight_offset", Dtype::BF16, {uint64_t(n), 1}, bytes(zeros));
    out.add("l.input_scale", Dtype::BF16, {1}, bytes(std::vector<uint16_t>{is}));
    out.add("l.input_offset", Dtype::BF16, {1}, bytes(std::vector<uint16_t>{io}));
    out.add("l.quant_bias", Dtype::I32, {uint64_t(n)}, bytes(bias));
    if (i64_deq_scale) {
      out.add("l.deq_scale", Dtype::I64, {uint64_t(n)}, bytes(deq64));
    } else {
      out.add("l.deq_scale", Dtype::F32, {uint64_t(n)}, bytes(deq));
    }
    out.write(path_);
    plan_.files = {path_};
    binding_.param = "l.weight";
    binding_.scheme.kind = SchemeKind::W8A8;
    binding_.scheme.storage = "I8";
    binding_.scheme.static_activation = true;
    const SafetensorsFile file = SafetensorsFile::open(path_);
    for (const TensorInfo& t : file.tensors()) {
      const std::string role = t.name.substr(2);
      binding_.parts.push_back({role, {SourceTensor{0, t.name, std::string(dtype_name(t.dtype)), t.shape, t.offset, t.nbytes}}});
    }
  }
  template <typename T>
  static std::vector<uint8_t> bytes(const std::vector<T>& v) {
    std::vector<uint8_t> out(v.size() * sizeof(T));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  std::vector<float> reference() const {
    std::vector<float> scale(q_.scale.size()), want(static_cast<size_t>(n_ * k_));
    for (size_t r = 0; r < scale.size(); ++r) scale[r] = decode_bf16(encode_bf16(q_.scale[r]));
    dequant_w8a8(q_.weight.data(), scale.data(), std::vector<float>(scale.size(), 0.0f).data(), n_, k_, want.data());
    return want;
  }

  static inline int count_ = 0;
  int64_t n_, k_;
  std::string path_;
  W8A8Weights q_;
  LoadPlan plan_;
  Binding binding_;
};

TEST(ModelSlimMatrix, W8a8StaticBinding) {
  for (const bool i64 : {false, true}) {
    W8a8StaticFile f(40, 128, 0.015625f, 3.0f, i64);
    PlanFiles files(f.plan_);
    const ParamSpec spec{.name = "l.weight", .shape = {40, 128}};
    const std::vector<float> all = materialize(f.binding_, spec, files);
    expect_same_bits(f.reference(), all, "materialize");
    auto m = make_modelslim_matrix(f.binding_, 40, 128, files, -1, selected_isa());
    EXPECT_EQ(m->kernel_name().rfind("w8a8-static/", 0), 0u) << m->kernel_name();
    std::vector<float> got(all.size());
    m->decode_rows(0, 40, got.data());
    expect_same_bits(all, got, m->kernel_name());
    for (int64_t tokens : {1, 5}) expect_matches_float64(*m, random_floats(static_cast<size_t>(tokens * 128), 81, 0.5f), tokens);
    PreparedActivations a;
    const std::vector<float> x = random_floats(128, 82, 0.5f);
    m->prepare(x.data(), 1, a);
    EXPECT_EQ(a.zero, 3);
    EXPECT_EQ(a.scale[0], 0.015625f);
  }
  // An input_offset that is no integer, a quant_bias or deq_scale that disagree with the weight:
  // errors naming the part.
  const auto error_for = [](const W8a8StaticFile& f, const std::function<void(Binding&)>& edit) {
    PlanFiles files(f.plan_);
    Binding b = f.binding_;
    edit(b);
    return error_of([&] { make_modelslim_matrix(b, 40, 128, files, -1, selected_isa()); });
  };
  const W8a8StaticFile good(40, 128, 0.015625f, 3.0f, false);
  const std::string offset_msg = error_for(good, [&](Binding& b) {
    for (SourcePart& p : b.parts) {
      if (p.role == "input_offset") p.tensors = good.binding_.part("input_scale")->tensors;  // 0.015625
    }
  });
  EXPECT_NE(offset_msg.find("field 'input_offset'"), std::string::npos) << offset_msg;
  const std::string bias_msg = error_for(W8a8StaticFile(40, 128, 0.015625f, 3.0f, false, 1.0f, 1), [](Binding&) {});
  EXPECT_NE(bias_msg.find("l.quant_bias"), std::string::npos) << bias_msg;
  EXPECT_NE(bias_msg.find("row 7"), std::string::npos) << bias_msg;
  const std::string deq_msg = error_for(W8a8StaticFile(40, 128, 0.015625f, 3.0f, true, 1.05f), [](Binding&) {});
  EXPECT_NE(deq_msg.find("l.deq_scale"), std::string::npos) << deq_msg;
  EXPECT_NE(deq_msg.find("row 9"), std::string::npos) << deq_msg;
}

}  // namespace
}  // namespace k3::cpu
