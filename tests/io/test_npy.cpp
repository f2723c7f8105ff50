// .npy reader/writer: round trips for every dtype, byte-exact agreement with NumPy-written
// fixtures, and one exact message per malformed input.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/npy.h"

namespace {

const std::string kFixtures = std::string(K3_SHARED_DIR) + "/fixtures/gguf-peer/";

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "k3_npy_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// A .npy image with the given version, raw header text and payload.
std::vector<uint8_t> image(int major, const std::string& header, const std::vector<uint8_t>& payload = {}) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const size_t len_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    k3::parse_npy(bytes.data(), bytes.size(), "x.npy");
  } catch (const k3::Error& e) {
    return e.what();
  }
  return "no error";
}

const std::string kF4Header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n";

TEST(Npy, RoundTripsEveryDtypeAndShape) {
  std::mt19937 rng(3);
  const std::vector<std::vector<uint64_t>> shapes = {{}, {0}, {5}, {2, 3, 4}, {1, 0, 7}};
  for (const char* dtype : {"<f2", "<f4", "<f8", "<i4", "<i8", "|u1"}) {
    for (const auto& shape : shapes) {
      uint64_t numel = 1;
      for (uint64_t d : shape) numel *= d;
      std::vector<uint8_t> data(numel * k3::npy_itemsize(dtype));
      for (auto& b : data) b = static_cast<uint8_t>(rng());
      const std::string path = temp_path("rt.npy");
      k3::write_npy(path, dtype, shape, data.data(), data.size());
      const std::vector<uint8_t> raw = file_bytes(path);
      ASSERT_EQ((raw.size() - data.size()) % 64, 0u) << dtype;  // data starts at a multiple of 64
      ASSERT_EQ(raw[raw.size() - data.size() - 1], '\n');
      const k3::NpyArray a = k3::read_npy(path);
      EXPECT_EQ(a.dtype, dtype);
      EXPECT_EQ(a.shape, shape);
      EXPECT_EQ(a.numel(), numel);
      EXPECT_EQ(a.data, data);
      ::unlink(path.c_str());
    }
  }
}

TEST(Npy, WriterMatchesNumPyBytes) {
  // norm.f32.npy was written by NumPy; the same array serialized by us must be byte-identical.
  const std::vector<uint8_t> fixture = file_bytes(kFixtures + "norm.f32.npy");
  ASSERT_EQ(fixture.size(), 2176u);
  const std::vector<uint8_t> ours = k3::serialize_npy("<f4", {512}, fixture.data() + 128, 2048);
  EXPECT_EQ(ours, fixture);
  const std::vector<uint8_t> small = k3::serialize_npy("|u1", {2, 3}, "abcdef", 6);
  const std::string dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }";  // 59 chars
  ASSERT_EQ(small.size(), 128u + 6);
  EXPECT_EQ(std::string(small.begin() + 10, small.begin() + 128), dict + std::string(128 - 10 - 59 - 1, ' ') + "\n");
  EXPECT_EQ(std::string(small.begin() + 128, small.end()), "abcdef");
}

TEST(Npy, HeaderBeyond64KiBUsesVersion2) {
  const std::vector<uint64_t> shape(30000, 1);  // ", 1" per dimension: a header of ~90 KB
  const uint8_t byte = 7;
  const std::vector<uint8_t> bytes = k3::serialize_npy("|u1", shape, &byte, 1);
  EXPECT_EQ(bytes[6], 2);
  EXPECT_EQ((bytes.size() - 1) % 64, 0u);
  const k3::NpyArray a = k3::parse_npy(bytes.data(), bytes.size(), "big.npy");
  EXPECT_EQ(a.shape, shape);
  EXPECT_EQ(a.data, std::vector<uint8_t>{7});
}

TEST(Npy, WritesTypedF32) {
  const float v[6] = {1.5f, -2.0f, 0.0f, 3.25f, -0.0f, 1e-30f};
  const std::string path = temp_path("f32.npy");
  k3::write_npy_f32(path, {3, 2}, v);
  const k3::NpyArray a = k3::read_npy(path);
  ::unlink(path.c_str());
  EXPECT_EQ(a.dtype, "<f4");
  EXPECT_EQ(a.shape, (std::vector<uint64_t>{3, 2}));
  ASSERT_EQ(a.data.size(), sizeof v);
  EXPECT_EQ(std::memcmp(a.data.data(), v, sizeof v), 0);
}

TEST(Npy, ReadsFixtures) {
  const k3::NpyArray norm = k3::read_npy(kFixtures + "norm.f32.npy");
  EXPECT_EQ(norm.dtype, "<f4");
  EXPECT_EQ(norm.shape, (std::vector<uint64_t>{512}));
  std::vector<float> v(512);
  std::memcpy(v.data(), norm.data.data(), 2048);
  EXPECT_EQ(v[0], 1.0327134132385254f);
  EXPECT_EQ(v[1], 0.8770744204521179f);
  EXPECT_EQ(v[3], 0.0f);
  float max_abs = 0;
  for (float x : v) max_abs = std::max(max_abs, std::fabs(x));
  EXPECT_EQ(max_abs, 33.0f);  // manifest.json: max_abs_source
  // The same 2048 bytes are the F32 tensor at absolute offset 1824 of quants.gguf (manifest).
  const std::vector<uint8_t> gguf = file_bytes(kFixtures + "quants.gguf");
  ASSERT_GE(gguf.size(), 1824u + 2048u);
  EXPECT_TRUE(std::equal(norm.data.begin(), norm.data.end(), gguf.begin() + 1824));

  const k3::NpyArray exps = k3::read_npy(kFixtures + "exps.mxfp4.npy");
  EXPECT_EQ(exps.shape, (std::vector<uint64_t>{4, 6, 256}));
  EXPECT_EQ(exps.data.size(), 4u * 6 * 256 * 4);
}

TEST(Npy, ReadsVersion2AndDoubleQuotesAndNoTrailingComma) {
  const std::vector<uint8_t> payload = {0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0};  // 1.0f, -2.0f
  for (int major : {1, 2, 3}) {
    const auto bytes = image(major, "{\"descr\":\"<f4\",\"shape\":(2,),\"fortran_order\":False}  \n", payload);
    const k3::NpyArray a = k3::parse_npy(bytes.data(), bytes.size(), "x.npy");
    EXPECT_EQ(a.dtype, "<f4");
    EXPECT_EQ(a.shape, (std::vector<uint64_t>{2}));
    EXPECT_EQ(a.data, payload);
  }
  const auto scalar = image(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }\n", std::vector<uint8_t>(8, 1));
  EXPECT_TRUE(k3::parse_npy(scalar.data(), scalar.size(), "s.npy").shape.empty());
}

TEST(Npy, MalformedInputsNameFileAndField) {
  auto with_header = [&](const std::string& h, std::vector<uint8_t> payload = std::vector<uint8_t>(8, 0)) {
    return parse_error(image(1, h, payload));
  };
  EXPECT_EQ(parse_error({}), "x.npy: field 'magic': not a .npy file (bad magic)");
  EXPECT_EQ(parse_error({'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0}), "x.npy: field 'magic': not a .npy file (bad magic)");
  EXPECT_EQ(parse_error({0x93, 'N', 'U', 'M', 'P', 'Y', 1}), "x.npy: field 'version': truncated: the file has 7 bytes");
  EXPECT_EQ(parse_error({0x93, 'N', 'U', 'M', 'P', 'Y', 4, 0, 0, 0}), "x.npy: field 'version': unsupported .npy version 4.0");
  EXPECT_EQ(parse_error({0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0}),
            "x.npy: field 'header_len': truncated: the file has 10 bytes");
  std::vector<uint8_t> cut = image(1, kF4Header);
  cut.resize(40);
  EXPECT_EQ(parse_error(cut), "x.npy: field 'header': truncated: header of 58 bytes at offset 10 but the file has 40 bytes");

  EXPECT_EQ(with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }"),
            "x.npy: field 'descr': unsupported dtype '>f4' (supported: <f2 <f4 <f8 <i4 <i8 |u1)");
  EXPECT_EQ(with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }"),
            "x.npy: field 'fortran_order': Fortran-order arrays are not supported (C order only)");
  EXPECT_EQ(with_header("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }"),
            "x.npy: field 'fortran_order': expected True or False at offset 34");
  EXPECT_EQ(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }"),
            "x.npy: field 'shape': not a tuple: '(n)' needs a comma, '(n,)'");
  EXPECT_EQ(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }"),
            "x.npy: field 'shape': expected a non-negative integer at offset 51");
  EXPECT_EQ(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }"),
            "x.npy: field 'shape': expected ',' or ')' at offset 53");
  EXPECT_EQ(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }"),
            "x.npy: field 'shape': dimension does not fit in 64 bits");
  EXPECT_EQ(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"),
            "x.npy: field 'shape': byte size of shape (4294967296, 4294967296) overflows 64 bits");
  EXPECT_EQ(with_header("{'descr': '<f4', 'fortran_order': False}"), "x.npy: field 'shape': missing key");
  EXPECT_EQ(with_header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}"),
            "x.npy: field 'header': duplicate key 'descr'");
  EXPECT_EQ(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}"),
            "x.npy: field 'header': unknown key 'extra'");
  EXPECT_EQ(with_header("{'descr' '<f4'}"), "x.npy: field 'header': expected ':' at offset 9");
  EXPECT_EQ(with_header("{'descr': '<f4"), "x.npy: field 'descr': unterminated string");
  EXPECT_EQ(with_header("['descr']"), "x.npy: field 'header': expected '{' at offset 0");
  EXPECT_EQ(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x"),
            "x.npy: field 'header': unexpected text after the dict at offset 56");
  EXPECT_EQ(with_header("{'descr': '<f4' 'fortran_order': False}"),
            "x.npy: field 'header': expected ',' or '}' at offset 16");
  EXPECT_EQ(with_header(kF4Header, std::vector<uint8_t>(7, 0)),
            "x.npy: field 'data': shape (2,) of '<f4' needs 8 bytes but the file has 7 bytes after the header");
  EXPECT_EQ(with_header(kF4Header, std::vector<uint8_t>(9, 0)),
            "x.npy: field 'data': shape (2,) of '<f4' needs 8 bytes but the file has 9 bytes after the header");
}

TEST(Npy, FileLevelErrorsNameThePath) {
  const std::string missing = temp_path("does_not_exist.npy");
  try {
    k3::read_npy(missing);
    FAIL() << "no error";
  } catch (const k3::Error& e) {
    EXPECT_EQ(e.where().file, missing);
  }
  const std::string path = temp_path("bad.npy");
  const float v[3] = {1, 2, 3};
  try {
    k3::write_npy(path, "<f4", {2, 2}, v, sizeof v);
    FAIL() << "no error";
  } catch (const k3::Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": field 'data': shape (2, 2) of '<f4' needs 16 bytes but 12 were given");
  }
  try {
    k3::write_npy(path, "<c8", {1}, v, 8);
    FAIL() << "no error";
  } catch (const k3::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ": field 'descr': unsupported dtype '<c8' (supported: <f2 <f4 <f8 <i4 <i8 |u1)");
  }
}

}  // namespace
