// GGML-block weights read in place (make_ggml_matrix) on every CPU tier this host runs: exact
// decode against dequantize_row, the integer kernels and the driver against float64 of the exact
// weights with the exact activation values, zero-copy, and the load errors.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_linear.h"
#include "core/error.h"
#include "core/numeric.h"
#include "error_of.h"
#include "quant/formats/ggml/cpu/ggml_matrix.h"
#include "quant/formats/ggml/ggml_dequant.h"
#include "quant/formats/ggml/ggml_quantize.h"

namespace k3::cpu {
namespace {

// Kernel and reference multiply the same operands: the exact dequantized weights and
// PreparedActivations::values(t) (= code·scale). The kernel forms Σ code·q in integers (exact) and
// applies the float scales per block, so it differs from the float64 reference only by a few
// roundings per block term (scale products, q·scale in values(), each ≤ 2^-24 relative) and by its
// float32 accumulation over at most K/32 + 16 partial sums, whose error is ≤ (K/32 + 16)·2^-24 of
// Σ|w·x| (K ≤ 2048 here: ≤ 5e-6, typically far less). A wrong code, scale, offset or element order
// moves a result by a sizeable fraction of Σ|w·x|. (The min/offset terms of Q2_K/Q4_K/Q5_K round
// relative to |d·Σ sc·q·x| and |dmin·Σ m·x|, each within a small factor of Σ|w·x|.)
constexpr double kTolerance = 1e-5;

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,  GgmlType::Q8_0,
                           GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                           GgmlType::Q6_K, GgmlType::F32,  GgmlType::F16,  GgmlType::BF16};

std::vector<float> normal_floats(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = encode_f16(v);
  std::memcpy(p, &h, 2);
}

// rows × cols weights of `type`: the project's quantizer where it has one, else random valid blocks
// (random payload bytes, positive f16 scales / mins of a sane size, E8M0 exponents near 2^0).
std::vector<uint8_t> make_weights(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  if (ggml_has_quantize(type)) return quantize_tensor(type, normal_floats(rows * cols, seed), cols);
  const GgmlTypeInfo& info = ggml_type_info(type);
  const size_t nblocks = rows * cols / info.block_size;
  std::vector<uint8_t> bytes(nblocks * info.type_size);
  std::mt19937 rng(seed);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.01f, 0.1f);
  for (size_t i = 0; i < nblocks; ++i) {
    uint8_t* blk = bytes.data() + i * info.type_size;
    switch (type) {
      case GgmlType::Q4_1:
      case GgmlType::Q5_1:
      case GgmlType::Q5_K:
        put_f16(blk, scale(rng));
        put_f16(blk + 2, scale(rng));
        break;
      case GgmlType::Q5_0: put_f16(blk, scale(rng)); break;
      case GgmlType::MXFP4: blk[0] = static_cast<uint8_t>(120 + rng() % 12); break;
      default: ADD_FAILURE() << "no random blocks for " << ggml_type_name(type);
    }
  }
  return bytes;
}

struct Param {
  GgmlType type;
  CpuIsa isa;
};
void PrintTo(const Param& p, std::ostream* os) { *os << ggml_type_name(p.type) << "/" << isa_name(p.isa); }

std::vector<Param> all_params() {
  std::vector<Param> out;
  for (CpuIsa isa : runnable_isas()) {
    for (GgmlType type : kTypes) out.push_back({type, isa});
  }
  return out;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(ggml_type_name(info.param.type)) + "_" + isa_name(info.param.isa);
}

// Σ_k w[r][k]·v[t][k] in float64 and Σ|w·v| for every (t, r).
struct Reference {
  std::vector<double> want, mag;
};
Reference reference(const std::vector<float>& w, const std::vector<float>& v, int64_t n, int64_t k, int64_t m) {
  Reference ref{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t r = 0; r < n; ++r) {
      double s = 0, a = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double p = static_cast<double>(w[r * k + i]) * v[t * k + i];
        s += p;
        a += std::fabs(p);
      }
      ref.want[t * n + r] = s;
      ref.mag[t * n + r] = a;
    }
  }
  return ref;
}

std::vector<float> dequantized(GgmlType type, const std::vector<uint8_t>& bytes, int64_t n, int64_t k) {
  std::vector<float> w(n * k);
  dequantize_tensor(type, bytes, w.data(), n * k, 1);
  return w;
}

class GgmlMatrix : public ::testing::TestWithParam<Param> {};

TEST_P(GgmlMatrix, DecodeRowsEqualsDequantizeRowBitForBit) {
  const auto [type, isa] = GetParam();
  const int64_t n = 21, k = 512;
  const std::vector<uint8_t> bytes = make_weights(type, n, k, 11);
  auto m = make_ggml_matrix(type, bytes, n, k, nullptr, isa);
  std::vector<float> got((n - 3) * k), want((n - 3) * k);
  m->decode_rows(3, n, got.data());
  const size_t row_bytes = bytes.size() / n;
  for (int64_t r = 3; r < n; ++r) dequantize_row(type, bytes.data() + r * row_bytes, want.data() + (r - 3) * k, k);
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << m->kernel_name();
}

TEST_P(GgmlMatrix, DotRowsMatchesFloat64OfExactWeights) {
  const auto [type, isa] = GetParam();
  uint32_t seed = 100;
  for (auto [n, k] : {std::pair<int64_t, int64_t>{5, 256}, {37, 768}, {48, 2048}}) {
    const std::vector<uint8_t> bytes = make_weights(type, n, k, seed++);
    const std::vector<float> w = dequantized(type, bytes, n, k);
    auto matrix = make_ggml_matrix(type, bytes, n, k, nullptr, isa);
    for (int64_t m : {1, 3, 4, 6}) {
      const std::vector<float> x = normal_floats(m * k, seed++, 2.0f);
      PreparedActivations a;
      matrix->prepare(x.data(), m, a);
      std::vector<float> v(m * k);
      for (int64_t t = 0; t < m; ++t) a.values(t, v.data() + t * k);
      const Reference ref = reference(w, v, n, k, m);
      std::vector<float> y(m * n, NAN);
      matrix->dot_rows(a, 0, n, y.data(), n);
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_NEAR(y[i], ref.want[i], kTolerance * ref.mag[i])
            << matrix->kernel_name() << " n=" << n << " k=" << k << " m=" << m << " token " << i / n << " row " << i % n;
      }
      // A row range writes exactly its rows, at their absolute positions.
      if (n > 16) {
        std::vector<float> part(m * n, -7.0f);
        matrix->dot_rows(a, 16, n - 1, part.data(), n);
        for (int64_t t = 0; t < m; ++t) {
          EXPECT_EQ(part[t * n + 15], -7.0f);
          EXPECT_EQ(part[t * n + n - 1], -7.0f);
          for (int64_t r = 16; r < n - 1; ++r) ASSERT_EQ(part[t * n + r], y[t * n + r]);
        }
      }
    }
  }
}

// 32-element formats also take K that is not a multiple of 256: row ends inside a group of 4
// blocks, and inside the kernels' 64-block scale segments.
TEST_P(GgmlMatrix, ShortRowsOf32ElementBlocks) {
  const auto [type, isa] = GetParam();
  if (ggml_type_info(type).block_size != 32) GTEST_SKIP() << "256-element blocks";
  uint32_t seed = 900;
  for (int64_t k : {32, 96, 224, 32 * 67}) {
    const int64_t n = 19;
    const std::vector<uint8_t> bytes = make_weights(type, n, k, seed++);
    const std::vector<float> w = dequantized(type, bytes, n, k);
    auto matrix = make_ggml_matrix(type, bytes, n, k, nullptr, isa);
    for (int64_t m : {1, 4}) {
      const std::vector<float> x = normal_floats(m * k, seed++);
      PreparedActivations a;
      matrix->prepare(x.data(), m, a);
      std::vector<float> v(m * k);
      for (int64_t t = 0; t < m; ++t) a.values(t, v.data() + t * k);
      const Reference ref = reference(w, v, n, k, m);
      std::vector<float> y(m * n, NAN);
      matrix->dot_rows(a, 0, n, y.data(), n);
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_NEAR(y[i], ref.want[i], kTolerance * ref.mag[i]) << matrix->kernel_name() << " k=" << k << " m=" << m << " i=" << i;
      }
    }
  }
}

TEST_P(GgmlMatrix, DriverMatchesFloat64OnFusedAndTilePaths) {
  const auto [type, isa] = GetParam();
  const int64_t n = 83, k = 1024;
  const std::vector<uint8_t> bytes = make_weights(type, n, k, 7);
  const std::vector<float> w = dequantized(type, bytes, n, k);
  auto linear = make_kernel_linear(make_ggml_matrix(type, bytes, n, k, nullptr, isa));
  for (int64_t m : {int64_t{1}, kFusedMaxTokens + 5}) {
    const std::vector<float> x = normal_floats(m * k, 300 + m);
    // The values the kernels multiply with, from a matrix of the same type.
    auto probe = make_ggml_matrix(type, bytes, n, k, nullptr, isa);
    PreparedActivations a;
    probe->prepare(x.data(), m, a);
    std::vector<float> v(m * k);
    for (int64_t t = 0; t < m; ++t) a.values(t, v.data() + t * k);
    const Reference ref = reference(w, v, n, k, m);
    std::vector<float> y(m * n, NAN);
    linear->forward(x.data(), m, y.data());
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_NEAR(y[i], ref.want[i], kTolerance * ref.mag[i]) << linear->kernel_name() << " m=" << m << " i=" << i;
    }
  }
}

// The kernels read the blocks in place, so they must not read a byte past the last block: the
// weights end exactly at an inaccessible page (prefetches past it are allowed; they never fault).
TEST_P(GgmlMatrix, NeverReadsPastTheLastBlock) {
  const auto [type, isa] = GetParam();
  const long page = sysconf(_SC_PAGESIZE);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{3, 256}, {5, 1280}}) {
    const std::vector<uint8_t> bytes = make_weights(type, n, k, 77);
    const size_t span = (bytes.size() + page - 1) / page * page;
    void* map = mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(map, MAP_FAILED);
    auto* base = static_cast<uint8_t*>(map);
    ASSERT_EQ(0, mprotect(base + span, page, PROT_NONE));
    uint8_t* at = base + span - bytes.size();
    std::memcpy(at, bytes.data(), bytes.size());
    auto matrix = make_ggml_matrix(type, std::span<const uint8_t>(at, bytes.size()), n, k, nullptr, isa);
    const std::vector<float> x = normal_floats(4 * k, 5);
    for (int64_t m : {1, 4}) {
      PreparedActivations a;
      matrix->prepare(x.data(), m, a);
      std::vector<float> y(m * n);
      matrix->dot_rows(a, 0, n, y.data(), n);
      matrix->dot_rows(a, n - 1, n, y.data(), n);
    }
    std::vector<float> decoded(n * k);
    matrix->decode_rows(0, n, decoded.data());
    munmap(map, span + page);
  }
}

TEST_P(GgmlMatrix, ReadsTheCallersBytesInPlace) {
  const auto [type, isa] = GetParam();
  const int64_t n = 19, k = 256;
  std::vector<uint8_t> bytes = make_weights(type, n, k, 5);
  auto keep = std::make_shared<int>(0);
  auto matrix = make_ggml_matrix(type, bytes, n, k, keep, isa);
  EXPECT_EQ(matrix->weight_bytes(), bytes.size());
  EXPECT_EQ(keep.use_count(), 2);  // the matrix holds the owner of the bytes
  const std::vector<float> x = normal_floats(k, 9);
  PreparedActivations a;
  matrix->prepare(x.data(), 1, a);
  std::vector<float> before(n), after(n), decoded(k);
  matrix->dot_rows(a, 0, n, before.data(), n);
  // Changing the source bytes of row 4 changes that row's result: nothing was copied.
  const size_t row_bytes = bytes.size() / n;
  std::vector<uint8_t> other = make_weights(type, 1, k, 6);
  std::memcpy(bytes.data() + 4 * row_bytes, other.data(), row_bytes);
  matrix->dot_rows(a, 0, n, after.data(), n);
  matrix->decode_rows(4, 5, decoded.data());
  std::vector<float> want(k);
  dequantize_row(type, other.data(), want.data(), k);
  EXPECT_EQ(0, std::memcmp(decoded.data(), want.data(), k * sizeof(float)));
  EXPECT_NE(before[4], after[4]);
  for (int64_t r = 0; r < n; ++r) {
    if (r != 4) {
      EXPECT_EQ(before[r], after[r]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlMatrix, ::testing::ValuesIn(all_params()), param_name);

TEST(GgmlMatrixErrors, BadShapesAndTypesNameTheFieldAndType) {
  const std::vector<uint8_t> bytes = make_weights(GgmlType::Q4_K, 4, 512, 1);
  const CpuIsa isa = selected_isa();
  const std::string wrong_size = test::error_of([&] {
    make_ggml_matrix(GgmlType::Q4_K, std::span(bytes).first(bytes.size() - 1), 4, 512, nullptr, isa);
  });
  EXPECT_NE(wrong_size.find("q4_K"), std::string::npos) << wrong_size;
  EXPECT_NE(wrong_size.find("bytes"), std::string::npos) << wrong_size;
  EXPECT_EQ(wrong_size.find('\n'), std::string::npos) << wrong_size;
  const std::string wrong_rows =
      test::error_of([&] { make_ggml_matrix(GgmlType::Q4_K, bytes, 5, 512, nullptr, isa); });
  EXPECT_NE(wrong_rows.find("expected"), std::string::npos) << wrong_rows;

  const std::string partial =
      test::error_of([&] { make_ggml_matrix(GgmlType::Q4_K, bytes, 8, 256 + 32, nullptr, isa); });
  EXPECT_NE(partial.find("cols"), std::string::npos) << partial;
  EXPECT_NE(partial.find("q4_K"), std::string::npos) << partial;
  EXPECT_NE(partial.find("256"), std::string::npos) << partial;

  const std::string q4_0_partial =
      test::error_of([&] { make_ggml_matrix(GgmlType::Q4_0, bytes, 1, 48, nullptr, isa); });
  EXPECT_NE(q4_0_partial.find("q4_0"), std::string::npos) << q4_0_partial;
  EXPECT_NE(q4_0_partial.find("cols"), std::string::npos) << q4_0_partial;

  const std::string unsupported =
      test::error_of([&] { make_ggml_matrix(GgmlType::IQ2_XS, bytes, 1, 256, nullptr, isa); });
  EXPECT_NE(unsupported.find("iq2_xs"), std::string::npos) << unsupported;
  const std::string q8_k = test::error_of([&] { make_ggml_matrix(GgmlType::Q8_K, bytes, 1, 256, nullptr, isa); });
  EXPECT_NE(q8_k.find("q8_K"), std::string::npos) << q8_k;
}

TEST(GgmlMatrixErrors, KernelNamesSayWhichTierRuns) {
  const std::vector<uint8_t> bytes = make_weights(GgmlType::Q4_0, 1, 256, 1);
  auto scalar = make_ggml_matrix(GgmlType::Q4_0, bytes, 1, 256, nullptr, CpuIsa::Scalar);
  EXPECT_EQ(scalar->kernel_name(), "ggml q4_0 scalar");
  const std::vector<uint8_t> f16 = make_weights(GgmlType::F16, 1, 256, 1);
  EXPECT_EQ(make_ggml_matrix(GgmlType::F16, f16, 1, 256, nullptr, CpuIsa::Scalar)->kernel_name(),
            "ggml f16 decode-f32");
}

}  // namespace
}  // namespace k3::cpu
