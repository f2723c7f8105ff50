// GGUF reader/writer and GGML dequantizers against the ggml-made fixture set
// (../shared/fixtures/gguf-peer, see its manifest.json), plus corrupt and split files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "error_of.h"
#include "core/error.h"
#include "io/gguf.h"
#include "quant/formats/ggml/ggml_dequant.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kFixtureDir = std::string(K3_SHARED_DIR) + "/fixtures/gguf-peer";

json manifest() {
  std::ifstream in(kFixtureDir + "/manifest.json");
  return json::parse(in);
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Minimal .npy v1.0 reader for little-endian float32 C-order arrays (the fixtures' format).
struct Npy {
  std::vector<uint64_t> shape;
  std::vector<float> data;
};

Npy read_npy_f32(const std::string& path) {
  const std::vector<uint8_t> bytes = read_all(path);
  EXPECT_GE(bytes.size(), 10u);
  EXPECT_EQ(std::memcmp(bytes.data(), "\x93NUMPY\x01\x00", 8), 0) << path;
  const size_t header_len = bytes[8] | bytes[9] << 8;
  const std::string header(bytes.begin() + 10, bytes.begin() + 10 + header_len);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << header;
  std::smatch m;
  EXPECT_TRUE(std::regex_search(header, m, std::regex(R"('shape': \(([^)]*)\))"))) << header;
  Npy out;
  const std::string dims = m[1].str();
  const std::regex number(R"(\d+)");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
    out.shape.push_back(std::stoull(it->str()));
  }
  const size_t payload = bytes.size() - 10 - header_len;
  out.data.resize(payload / 4);
  std::memcpy(out.data.data(), bytes.data() + 10 + header_len, payload);
  return out;
}

uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
uint64_t f64_bits(double f) { return std::bit_cast<uint64_t>(f); }
uint64_t hex(const json& s) { return std::stoull(s.get<std::string>(), nullptr, 16); }

// ---- the fixture file ----------------------------------------------------------------------

TEST(GgufFixture, HeaderAndMetadataMatchManifest) {
  const json m = manifest();
  const GgufFile f = GgufFile::open(kFixtureDir + "/" + m.at("gguf_file").get<std::string>());
  EXPECT_EQ(f.version(), m.at("gguf_version").get<uint32_t>());
  EXPECT_EQ(f.alignment(), m.at("alignment").get<uint64_t>());
  EXPECT_EQ(f.data_offset(), m.at("data_section_offset").get<uint64_t>());
  EXPECT_EQ(f.file_size(), m.at("gguf_file_size").get<uint64_t>());
  EXPECT_EQ(f.tensors().size(), m.at("n_tensors").get<size_t>());
  ASSERT_EQ(f.metadata().size(), m.at("n_kv").get<size_t>());
  EXPECT_EQ(f.find("general.alignment") != nullptr, m.at("alignment_key_present").get<bool>());

  for (size_t i = 0; i < f.metadata().size(); ++i) {
    const json& want = m.at("metadata")[i];
    const GgufKeyValue& kv = f.metadata()[i];
    SCOPED_TRACE(kv.key);
    EXPECT_EQ(kv.key, want.at("key").get<std::string>());  // file order preserved
    EXPECT_EQ(gguf_type_name(kv.value.type()), want.at("type").get<std::string>());
    EXPECT_EQ(static_cast<uint32_t>(kv.value.type()), want.at("type_id").get<uint32_t>());
    const json got = gguf_value_to_json(kv.value);
    switch (kv.value.type()) {
      case GgufType::F32: EXPECT_EQ(f32_bits(kv.value.get<float>()), hex(want.at("bits"))); break;
      case GgufType::F64: EXPECT_EQ(f64_bits(kv.value.get<double>()), hex(want.at("bits"))); break;
      case GgufType::U64: EXPECT_EQ(std::to_string(kv.value.get<uint64_t>()), want.at("value_str")); break;
      case GgufType::I64: EXPECT_EQ(std::to_string(kv.value.get<int64_t>()), want.at("value_str")); break;
      case GgufType::STRING:
        EXPECT_EQ(kv.value.get<std::string>().size(), want.at("utf8_byte_length").get<size_t>());
        break;
      case GgufType::ARRAY: {
        const GgufArray& a = kv.value.get<GgufArray>();
        EXPECT_EQ(gguf_type_name(a.elem_type), want.at("array_type").get<std::string>());
        EXPECT_EQ(static_cast<uint32_t>(a.elem_type), want.at("array_type_id").get<uint32_t>());
        ASSERT_EQ(a.size(), want.at("n").get<size_t>());
        if (a.elem_type == GgufType::F32) {
          for (size_t j = 0; j < a.size(); ++j) {
            EXPECT_EQ(f32_bits(a.at<float>(j)), hex(want.at("bits")[j])) << j;
          }
        }
        break;
      }
      default: break;
    }
    if (!want.contains("bits")) {  // floats were compared bit for bit above
      EXPECT_EQ(got, want.at("value"));  // exact for integers of every width, strings, lists
      EXPECT_EQ(got.dump(), want.at("value").dump());
    }
  }
}

TEST(GgufFixture, TensorInfosMatchManifest) {
  const json m = manifest();
  const GgufModel model = GgufModel::open(kFixtureDir + "/quants.gguf");
  ASSERT_EQ(model.tensors().size(), m.at("tensors").size());
  for (size_t i = 0; i < model.tensors().size(); ++i) {
    const json& want = m.at("tensors")[i];
    const GgufTensorInfo& t = model.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, want.at("name").get<std::string>());
    EXPECT_EQ(model.find_tensor(t.name), &t);
    const GgmlTypeInfo& info = ggml_type_info(t.type);
    EXPECT_EQ(info.name, want.at("ggml_type").get<std::string>());
    EXPECT_EQ(static_cast<uint32_t>(t.type), want.at("ggml_type_id").get<uint32_t>());
    EXPECT_EQ(info.block_size, want.at("block_size").get<uint32_t>());
    EXPECT_EQ(info.type_size, want.at("type_size").get<uint32_t>());
    EXPECT_EQ(t.n_dims, want.at("n_dims").get<uint32_t>());
    EXPECT_EQ(std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), want.at("ne").get<std::vector<uint64_t>>());
    EXPECT_EQ(t.shape(), want.at("numpy_shape").get<std::vector<uint64_t>>());
    EXPECT_EQ(t.offset, want.at("offset").get<uint64_t>());
    EXPECT_EQ(t.file_offset, want.at("absolute_offset").get<uint64_t>());
    EXPECT_EQ(t.nbytes, want.at("nbytes").get<uint64_t>());
    EXPECT_EQ(t.file_index, 0u);
  }
}

TEST(GgufFixture, DequantIsBitExactWithGgml) {
  const json m = manifest();
  const GgufModel model = GgufModel::open(kFixtureDir + "/quants.gguf");
  for (const json& want : m.at("tensors")) {
    const GgufTensorInfo* t = model.find_tensor(want.at("name").get<std::string>());
    ASSERT_NE(t, nullptr);
    SCOPED_TRACE(t->name);
    const Npy ref = read_npy_f32(kFixtureDir + "/" + want.at("dequant_npy").get<std::string>());
    ASSERT_EQ(ref.shape, t->shape());
    ASSERT_EQ(ref.data.size(), t->n_elements);

    const std::span<const uint8_t> packed = model.tensor_data(*t);
    std::vector<float> row_wise(t->n_elements), parallel(t->n_elements);
    const uint64_t row_bytes = ggml_row_size(t->type, t->ne[0]);
    for (uint64_t r = 0; r < t->n_elements / t->ne[0]; ++r) {
      dequantize_row(t->type, packed.data() + r * row_bytes, row_wise.data() + r * t->ne[0],
                     static_cast<int64_t>(t->ne[0]));
    }
    dequantize_tensor(t->type, packed, parallel.data(), static_cast<int64_t>(t->n_elements), 2);
    EXPECT_EQ(std::memcmp(row_wise.data(), ref.data.data(), ref.data.size() * 4), 0);
    EXPECT_EQ(std::memcmp(parallel.data(), ref.data.data(), ref.data.size() * 4), 0);

    size_t negative_zeros = 0, mismatches = 0;
    float max_abs = 0;
    for (size_t i = 0; i < ref.data.size(); ++i) {
      negative_zeros += f32_bits(row_wise[i]) == 0x80000000u;
      mismatches += f32_bits(row_wise[i]) != f32_bits(ref.data[i]);
      max_abs = std::max(max_abs, std::fabs(row_wise[i]));
    }
    EXPECT_EQ(mismatches, 0u);
    EXPECT_EQ(negative_zeros, want.at("n_negative_zero_dequant").get<size_t>());
    EXPECT_EQ(max_abs, want.at("max_abs_dequant").get<float>());
  }
}

// Our writer lays a file out exactly as ggml's does: re-writing the fixture reproduces it.
TEST(GgufFixture, WriterReproducesTheFileByteForByte) {
  const std::string path = kFixtureDir + "/quants.gguf";
  const GgufFile f = GgufFile::open(path);
  GgufWriter w(f.version());
  for (const GgufKeyValue& kv : f.metadata()) w.set(kv.key, kv.value);
  for (const GgufTensorInfo& t : f.tensors()) {
    w.add_tensor(t.name, t.type, std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), f.tensor_data(t));
  }
  EXPECT_TRUE(w.to_bytes() == read_all(path));
}

TEST(GgufFixture, HeaderParseMapsNothing) {
  const uint64_t before = File::payload_maps();
  const GgufModel model = GgufModel::open(kFixtureDir + "/quants.gguf");
  EXPECT_EQ(File::payload_maps(), before);
  (void)model.tensor_data(model.tensors().front());
  EXPECT_EQ(File::payload_maps(), before + 1);
}

// ---- writer round trip ---------------------------------------------------------------------

GgufValue str(const char* s) { return {std::string(s)}; }

std::vector<GgufKeyValue> every_kind_of_value() {
  std::vector<GgufKeyValue> kv = {
      {"u8", {uint8_t{255}}},
      {"i8", {int8_t{-128}}},
      {"u16", {uint16_t{65535}}},
      {"i16", {int16_t{-32768}}},
      {"u32", {uint32_t{4294967295u}}},
      {"i32", {int32_t{-2147483647 - 1}}},
      {"f32", {std::bit_cast<float>(0x7FC12345u)}},  // NaN with payload survives
      {"f32.negzero", {-0.0f}},
      {"bool", {true}},
      {"str", str("na\xC3\xAFve \xF0\x9F\xA6\x99")},
      {"str.empty", str("")},
      {"u64", {uint64_t{18446744073709551615ull}}},
      {"i64", {int64_t{-9223372036854775807ll - 1}}},
      {"f64", {-2.5e300}},
      {"arr.empty", GgufValue::array(GgufType::F64, {})},
      {"arr.str", GgufValue::array(GgufType::STRING, {str("a"), str(""), str("ccc")})},
      {"arr.bool", GgufValue::array(GgufType::BOOL, {{false}, {true}})},
      {"arr.nested", GgufValue::array(GgufType::ARRAY,
                                      {GgufValue::array(GgufType::I16, {{int16_t{1}}, {int16_t{-2}}}),
                                       GgufValue::array(GgufType::ARRAY, {GgufValue::array(GgufType::STRING, {str("x")})}),
                                       GgufValue::array(GgufType::U64, {})})},
  };
  return kv;
}

TEST(GgufWriter, RoundTripsEveryValueTypeAndTensorLayout) {
  GgufWriter w(2);
  w.set("general.alignment", {uint32_t{64}});
  const std::vector<GgufKeyValue> values = every_kind_of_value();
  for (const GgufKeyValue& kv : values) w.set(kv.key, kv.value);
  std::vector<uint8_t> q4k(2 * 144), f16(2 * 3), empty;
  for (size_t i = 0; i < q4k.size(); ++i) q4k[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < f16.size(); ++i) f16[i] = static_cast<uint8_t>(i + 1);
  w.add_tensor("a.q4_K", GgmlType::Q4_K, {256, 1, 2}, q4k);
  w.add_tensor("b.f16", GgmlType::F16, {3}, f16);
  w.add_tensor("c.empty", GgmlType::F32, {0, 4}, empty);
  w.add_tensor("d.f16", GgmlType::F16, {1, 1, 1, 3}, f16);

  const std::string path = (fs::temp_directory_path() / ("k3_gguf_rt_" + std::to_string(getpid()) + ".gguf")).string();
  w.write(path);
  const std::vector<uint8_t> image = w.to_bytes();
  EXPECT_TRUE(read_all(path) == image);
  for (const GgufFile& f : {GgufFile::open(path), GgufFile::parse(image, "mem.gguf")}) {
    EXPECT_EQ(f.version(), 2u);
    EXPECT_EQ(f.alignment(), 64u);
    EXPECT_EQ(f.data_offset() % 64, 0u);
    ASSERT_EQ(f.metadata().size(), values.size() + 1);
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(f.metadata()[i + 1].key, values[i].key);
      EXPECT_TRUE(f.metadata()[i + 1].value == values[i].value) << values[i].key;
    }
    EXPECT_FALSE(*f.find("f32.negzero") == GgufValue{0.0f});
    ASSERT_EQ(f.tensors().size(), 4u);
    const GgufTensorInfo& a = f.tensors()[0];
    EXPECT_EQ(a.n_dims, 3u);
    EXPECT_EQ(a.shape(), (std::vector<uint64_t>{2, 1, 256}));
    EXPECT_EQ(a.nbytes, q4k.size());
    EXPECT_EQ(a.offset, 0u);
    EXPECT_TRUE(std::ranges::equal(f.tensor_data(a), q4k));
    EXPECT_EQ(f.tensors()[1].offset, 320u);  // 288 bytes padded to 64
    EXPECT_TRUE(std::ranges::equal(f.tensor_data(f.tensors()[1]), f16));
    EXPECT_EQ(f.tensors()[2].nbytes, 0u);
    EXPECT_EQ(f.tensors()[2].n_elements, 0u);
    EXPECT_EQ(f.tensors()[3].offset, 384u);
    EXPECT_EQ(f.tensors()[3].shape(), (std::vector<uint64_t>{3, 1, 1, 1}));
    EXPECT_TRUE(std::ranges::equal(f.tensor_data(f.tensors()[3]), f16));
    EXPECT_EQ(f.file_size(), f.data_offset() + 448);
  }
  EXPECT_EQ(gguf_value_to_json(values[11].value).dump(), "18446744073709551615");
  EXPECT_EQ(gguf_value_to_json(values[12].value).dump(), "-9223372036854775808");
  EXPECT_EQ(gguf_value_to_json(values[17].value).dump(), R"([[1,-2],[["x"]],[]])");
  fs::remove(path);
}

using test::error_of;

TEST(GgufWriter, RejectsInconsistentInput) {
  GgufWriter w;
  w.set("k", {uint8_t{1}});
  EXPECT_EQ(error_of([&] { w.set("k", {uint8_t{2}}); }), "field 'k': duplicate metadata key");
  const std::vector<uint8_t> bytes(18);
  EXPECT_EQ(error_of([&] { w.add_tensor("t", GgmlType::Q4_0, {32, 2}, bytes); }),
            "tensor 't': data has 18 bytes, the shape needs 36");
  EXPECT_EQ(error_of([&] { w.add_tensor("t", GgmlType::Q4_0, {16}, bytes); }),
            "tensor 't': field 'ne[0]': ne[0] = 16 is not a multiple of the block size 32 of q4_0");
  EXPECT_EQ(error_of([&] { w.add_tensor("t", GgmlType::Q4_0, {}, bytes); }), "tensor 't': needs 1 to 4 dimensions, got 0");
  w.add_tensor("t", GgmlType::Q4_0, {32}, bytes);
  EXPECT_EQ(error_of([&] { w.add_tensor("t", GgmlType::Q4_0, {32}, bytes); }), "tensor 't': duplicate tensor name");
  EXPECT_EQ(error_of([] { GgufValue::array(GgufType::I32, {{uint8_t{1}}}); }), "GGUF array of i32 holds a u8 element");
  GgufWriter bad;
  GgufArray torn;  // says 2 elements, packs 1
  torn.elem_type = GgufType::I32;
  torn.count = 2;
  torn.packed = {1, 0, 0, 0};
  bad.set("a", {torn});
  EXPECT_EQ(error_of([&] { bad.to_bytes(); }), "field 'a': array of i32 holds 1 elements but says 2");
  GgufWriter bad_alignment;
  bad_alignment.set("general.alignment", {uint64_t{32}});
  EXPECT_EQ(error_of([&] { bad_alignment.to_bytes(); }), "field 'general.alignment': must be a u32 nonzero multiple of 8");
}

// ---- corrupt files -------------------------------------------------------------------------

// A tiny valid file: one key, one q4_0 [2 x 32] tensor. Field offsets below follow from it.
std::vector<uint8_t> tiny() {
  GgufWriter w;
  w.set("general.architecture", str("t"));
  std::vector<uint8_t> data(36, 0x11);
  w.add_tensor("w", GgmlType::Q4_0, {32, 2}, data);
  return w.to_bytes();
}
constexpr size_t kKeyLen = 24, kValueType = 52, kNameLen = 65, kNDims = 74, kNe0 = 78, kNe1 = 86, kType = 94,
                 kOffset = 98, kInfoEnd = 106, kDataEnd = 164, kTinySize = 192;

template <class T>
std::vector<uint8_t> patched(std::vector<uint8_t> b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
  return b;
}

// The parse's error message, or "no error" when the bytes parse.
std::string parse_error(const std::vector<uint8_t>& b) {
  try {
    GgufFile::parse(b, "t.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GgufCorrupt, TinyFileLayoutIsAsAssumed) {
  const std::vector<uint8_t> b = tiny();
  ASSERT_EQ(b.size(), kTinySize);
  const GgufFile f = GgufFile::parse(b, "t.gguf");
  EXPECT_EQ(f.data_offset(), 128u);
  EXPECT_EQ(f.tensors()[0].file_offset, 128u);
  uint64_t v;
  std::memcpy(&v, b.data() + kNe1, 8);
  EXPECT_EQ(v, 2u);
  std::memcpy(&v, b.data() + kNameLen, 8);
  EXPECT_EQ(v, 1u);
}

TEST(GgufCorrupt, ExactMessages) {
  const std::vector<uint8_t> b = tiny();
  const uint64_t kHuge = 0xFFFFFFFFFFFFFFFFull;
  EXPECT_EQ(parse_error(patched(b, 0, uint8_t{'X'})),
            "t.gguf: field 'magic': not a GGUF file: expected bytes 47 47 55 46 (\"GGUF\"), got 58 47 55 46");
  EXPECT_EQ(parse_error(patched(b, 4, uint32_t{1})), "t.gguf: field 'version': GGUF version 1 is not supported (only 2 and 3)");
  EXPECT_EQ(parse_error(patched(b, 4, uint32_t{4})), "t.gguf: field 'version': GGUF version 4 is not supported (only 2 and 3)");
  EXPECT_EQ(parse_error(patched(b, 4, uint32_t{2})), "no error");
  EXPECT_EQ(parse_error(patched(b, 8, kHuge)),
            "t.gguf: field 'tensor_count': 18446744073709551615 tensors cannot fit in the 168 bytes left in the file");
  EXPECT_EQ(parse_error(patched(b, 8, uint64_t{8})),
            "t.gguf: field 'tensor_count': 8 tensors cannot fit in the 168 bytes left in the file");
  EXPECT_EQ(parse_error(patched(b, 16, kHuge)),
            "t.gguf: field 'metadata_kv_count': 18446744073709551615 metadata entries cannot fit in the 168 bytes "
            "left in the file");
  EXPECT_EQ(parse_error(patched(b, kKeyLen, kHuge)),
            "t.gguf: field 'metadata[0].key': string length 18446744073709551615 exceeds the 160 bytes left in the file");
  EXPECT_EQ(parse_error(patched(b, kKeyLen, kHuge - 31)),
            "t.gguf: field 'metadata[0].key': string length 18446744073709551584 exceeds the 160 bytes left in the file");
  EXPECT_EQ(parse_error(patched(b, kValueType, uint32_t{13})), "t.gguf: field 'general.architecture': unknown value type 13");
  EXPECT_EQ(parse_error(patched(b, kNameLen, kHuge)),
            "t.gguf: field 'tensor_info[0].name': string length 18446744073709551615 exceeds the 119 bytes left in the "
            "file");
  EXPECT_EQ(parse_error(patched(b, kNDims, uint32_t{5})), "t.gguf: tensor 'w': field 'n_dims': n_dims 5 exceeds the maximum of 4");
  EXPECT_EQ(parse_error(patched(b, kNe0, uint64_t{48})),
            "t.gguf: tensor 'w': field 'ne[0]': ne[0] = 48 is not a multiple of the block size 32 of q4_0");
  EXPECT_EQ(parse_error(patched(b, kNe1, uint64_t{1} << 63)),
            "t.gguf: tensor 'w': field 'ne[1]': ne[1] = 9223372036854775808 exceeds the int64 range");
  EXPECT_EQ(parse_error(patched(patched(b, kNe0, uint64_t{1} << 62), kNe1, uint64_t{4})),
            "t.gguf: tensor 'w': field 'ne': element count overflows int64");
  EXPECT_EQ(parse_error(patched(b, kType, uint32_t{4})), "t.gguf: tensor 'w': field 'type': unknown GGML type id 4");
  EXPECT_EQ(parse_error(patched(b, kType, uint32_t{1000})), "t.gguf: tensor 'w': field 'type': unknown GGML type id 1000");
  EXPECT_EQ(parse_error(patched(b, kOffset, uint64_t{8})),
            "t.gguf: tensor 'w': field 'offset': offset 8 is not a multiple of the alignment 32");
  EXPECT_EQ(parse_error(patched(b, kOffset, uint64_t{64})),
            "t.gguf: tensor 'w': field 'offset': data (36 bytes at offset 64 of the data section starting at 128) "
            "extends past the end of the file (192 bytes)");
  EXPECT_EQ(parse_error(patched(b, kOffset, kHuge - 31)),
            "t.gguf: tensor 'w': field 'offset': data (36 bytes at offset 18446744073709551584 of the data section "
            "starting at 128) extends past the end of the file (192 bytes)");
  // A q8_0 tensor of the same shape needs 68 bytes: it would run past the end.
  EXPECT_EQ(parse_error(patched(b, kType, uint32_t{8})),
            "t.gguf: tensor 'w': field 'offset': data (68 bytes at offset 0 of the data section starting at 128) "
            "extends past the end of the file (192 bytes)");
}

// A file with only a general.alignment key (u32 at offset 53).
std::vector<uint8_t> with_alignment_key() {
  GgufWriter w;
  w.set("general.alignment", {uint32_t{16}});
  return w.to_bytes();
}

TEST(GgufCorrupt, Alignment) {
  const std::vector<uint8_t> b = with_alignment_key();
  ASSERT_EQ(b.size(), 64u);
  EXPECT_EQ(GgufFile::parse(b, "t.gguf").alignment(), 16u);
  EXPECT_EQ(parse_error(patched(b, 53, uint32_t{12})), "t.gguf: field 'general.alignment': must be a nonzero multiple of 8, got 12");
  EXPECT_EQ(parse_error(patched(b, 53, uint32_t{0})), "t.gguf: field 'general.alignment': must be a nonzero multiple of 8, got 0");
  EXPECT_EQ(parse_error(patched(b, 49, uint32_t{5})), "t.gguf: field 'general.alignment': must be of type u32, got i32");
}

// Replaces the first occurrence of `from` (which must exist) by `to` of the same length.
std::vector<uint8_t> replaced(std::vector<uint8_t> b, const std::string& from, const std::string& to) {
  auto it = std::search(b.begin(), b.end(), from.begin(), from.end());
  EXPECT_NE(it, b.end()) << from;
  std::copy(to.begin(), to.end(), it);
  return b;
}

TEST(GgufCorrupt, DuplicatesOverlapBadBoolAbsurdArrayDeepNesting) {
  GgufWriter w;
  w.set("key.a", {uint8_t{1}});
  w.set("key.b", {true});
  w.set("key.arr", GgufValue::array(GgufType::I32, {{int32_t{1}}, {int32_t{2}}}));
  const std::vector<uint8_t> data(36);
  w.add_tensor("tensor.a", GgmlType::Q4_0, {32, 2}, data);
  w.add_tensor("tensor.b", GgmlType::Q4_0, {32, 2}, data);
  const std::vector<uint8_t> b = w.to_bytes();
  ASSERT_EQ(parse_error(b), "no error");
  EXPECT_EQ(parse_error(replaced(b, "key.b", "key.a")), "t.gguf: field 'key.a': duplicate metadata key");
  EXPECT_EQ(parse_error(replaced(b, "tensor.b", "tensor.a")), "t.gguf: tensor 'tensor.a': field 'name': duplicate tensor name");
  // key.b's bool value follows its name and the u32 type id.
  const std::string bool_key = std::string("key.b") + '\x07' + std::string(3, '\0') + '\x01';
  EXPECT_EQ(parse_error(replaced(b, bool_key, bool_key.substr(0, 9) + '\x02')),
            "t.gguf: field 'key.b': bool value must be 0 or 1, got 2");
  // key.arr: u32 elem type 5, u64 count 2.
  const std::string arr = std::string("key.arr") + '\x09' + std::string(3, '\0') + '\x05' + std::string(3, '\0') + '\x02';
  const size_t left = b.size() - (std::search(b.begin(), b.end(), arr.begin(), arr.end()) - b.begin()) - arr.size() - 7;
  EXPECT_EQ(parse_error(replaced(b, arr, arr.substr(0, 15) + '\xFF')),
            "t.gguf: field 'key.arr': array of 255 i32 elements cannot fit in the " + std::to_string(left) +
                " bytes left in the file");
  EXPECT_EQ(parse_error(replaced(b, arr, arr.substr(0, 11) + '\x0D')), "t.gguf: field 'key.arr': unknown array element type 13");
  // tensor.b's offset 64 -> 32: it overlaps tensor.a.
  const std::string b_info = std::string("tensor.b") + '\x02' + std::string(3, '\0');
  auto at = std::search(b.begin(), b.end(), b_info.begin(), b_info.end()) - b.begin() + b_info.size() + 16 + 4;
  EXPECT_EQ(parse_error(patched(b, at, uint64_t{32})), "t.gguf: tensor 'tensor.b': field 'offset': data overlaps tensor 'tensor.a'");

  GgufValue nested = GgufValue::array(GgufType::U8, {});
  for (int i = 0; i < 40; ++i) nested = GgufValue::array(GgufType::ARRAY, {nested});
  GgufWriter deep;
  deep.set("deep", nested);
  EXPECT_EQ(parse_error(deep.to_bytes()), "t.gguf: field 'deep': arrays nested deeper than 32 levels");
}

TEST(GgufCorrupt, TruncatedAtEveryLength) {
  const std::vector<uint8_t> b = tiny();
  for (size_t n = 0; n < b.size(); ++n) {
    const std::string msg = parse_error(std::vector<uint8_t>(b.begin(), b.begin() + n));
    SCOPED_TRACE(n);
    if (n >= kDataEnd) {  // the final padding is optional
      EXPECT_EQ(msg, "no error");
    } else if (n < kInfoEnd) {
      const bool truncated = msg.find(": truncated: needs ") != std::string::npos ||
                             msg.find(" bytes left in the file") != std::string::npos;
      EXPECT_TRUE(truncated) << msg;
    } else {
      EXPECT_EQ(msg, "t.gguf: tensor 'w': field 'offset': data (36 bytes at offset 0 of the data section starting at "
                     "128) extends past the end of the file (" + std::to_string(n) + " bytes)");
    }
  }
  auto cut = [&](size_t n) { return parse_error(std::vector<uint8_t>(b.begin(), b.begin() + n)); };
  EXPECT_EQ(cut(0), "t.gguf: field 'magic': truncated: needs 4 bytes at offset 0 but the file has 0 bytes");
  EXPECT_EQ(cut(6), "t.gguf: field 'version': truncated: needs 4 bytes at offset 4 but the file has 6 bytes");
  EXPECT_EQ(cut(15), "t.gguf: field 'tensor_count': truncated: needs 8 bytes at offset 8 but the file has 15 bytes");
  EXPECT_EQ(cut(23), "t.gguf: field 'metadata_kv_count': truncated: needs 8 bytes at offset 16 but the file has 23 bytes");
  EXPECT_EQ(cut(24), "t.gguf: field 'tensor_count': 1 tensors cannot fit in the 0 bytes left in the file");
  EXPECT_EQ(cut(kValueType + 2),
            "t.gguf: field 'general.architecture': truncated: needs 4 bytes at offset 52 but the file has 54 bytes");
  EXPECT_EQ(cut(kNe0 + 3), "t.gguf: tensor 'w': field 'ne[0]': truncated: needs 8 bytes at offset 78 but the file has 81 bytes");
  EXPECT_EQ(cut(kNe1 + 7), "t.gguf: tensor 'w': field 'ne[1]': truncated: needs 8 bytes at offset 86 but the file has 93 bytes");
  EXPECT_EQ(cut(kType + 1), "t.gguf: tensor 'w': field 'type': truncated: needs 4 bytes at offset 94 but the file has 95 bytes");
  EXPECT_EQ(cut(kOffset + 4),
            "t.gguf: tensor 'w': field 'offset': truncated: needs 8 bytes at offset 98 but the file has 102 bytes");
  EXPECT_EQ(cut(kNDims), "t.gguf: tensor 'w': field 'n_dims': truncated: needs 4 bytes at offset 74 but the file has 74 bytes");
}

TEST(GgufCorrupt, TruncatedFileOnDisk) {
  const std::vector<uint8_t> b = tiny();
  const std::string path = (fs::temp_directory_path() / ("k3_gguf_cut_" + std::to_string(getpid()) + ".gguf")).string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), kNe0 + 3);
  EXPECT_EQ(error_of([&] { GgufFile::open(path); }),
            path + ": tensor 'w': field 'ne[0]': truncated: needs 8 bytes at offset 78 but the file has 81 bytes");
  fs::remove(path);
  EXPECT_EQ(error_of([&] { GgufFile::open(path); }), path + ": cannot open: No such file or directory");
}

// ---- split sets ----------------------------------------------------------------------------

class GgufSplit : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("k3_gguf_split_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    prefix_ = (dir_ / "model").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes split `no` (0-based) of `count` holding tensor `name` filled with `no + 1`.
  void write_split(uint16_t no, uint16_t count, const std::string& name, int32_t tensors_total = 3) {
    GgufWriter w;
    if (no == 0) w.set("general.architecture", str("kimi"));
    w.set("split.no", {no});
    w.set("split.count", {count});
    if (no == 0) w.set("split.tensors.count", {tensors_total});
    std::vector<uint8_t> data(34, static_cast<uint8_t>(no + 1));
    w.add_tensor(name, GgmlType::Q8_0, {32}, data);
    w.write(gguf_split_path(prefix_, no + 1u, count));
  }
  std::string path(uint32_t i, uint32_t n) const { return gguf_split_path(prefix_, i, n); }

  fs::path dir_;
  std::string prefix_;
};

TEST_F(GgufSplit, MergesTensorsOfAllFiles) {
  EXPECT_EQ(gguf_split_path("/x/m", 2, 3), "/x/m-00002-of-00003.gguf");
  for (uint16_t i = 0; i < 3; ++i) write_split(i, 3, "t" + std::to_string(i));
  const GgufModel m = GgufModel::open(path(1, 3));
  ASSERT_EQ(m.files().size(), 3u);
  ASSERT_EQ(m.tensors().size(), 3u);
  EXPECT_EQ(m.find("general.architecture")->get<std::string>(), "kimi");
  for (size_t i = 0; i < 3; ++i) {
    const GgufTensorInfo* t = m.find_tensor("t" + std::to_string(i));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->file_index, i);
    EXPECT_EQ(m.tensor_data(*t)[5], i + 1);
  }
  EXPECT_EQ(m.find_tensor("nope"), nullptr);
}

TEST_F(GgufSplit, Errors) {
  for (uint16_t i = 0; i < 3; ++i) write_split(i, 3, "t" + std::to_string(i));
  EXPECT_EQ(error_of([&] { GgufModel::open(path(2, 3)); }),
            path(2, 3) + ": field 'split.no': is 1: open the first file of the split set (split.no 0)");
  const std::string renamed = (dir_ / "renamed.gguf").string();
  fs::copy_file(path(1, 3), renamed);
  EXPECT_EQ(error_of([&] { GgufModel::open(renamed); }),
            renamed + ": field 'split.count': is 3 but the file name does not end in -00001-of-00003.gguf");

  write_split(2, 3, "t1");  // duplicate name across files
  EXPECT_EQ(error_of([&] { GgufModel::open(path(1, 3)); }),
            path(3, 3) + ": tensor 't1': duplicate tensor name (also in " + path(2, 3) + ")");
  write_split(2, 4, "t2");  // wrong count in a later file (written under the 3-file name below)
  fs::rename(path(3, 4), path(3, 3));
  EXPECT_EQ(error_of([&] { GgufModel::open(path(1, 3)); }), path(3, 3) + ": field 'split.count': is 4, expected 3");
  write_split(1, 3, "t2");  // split.no 1 in the third file
  fs::rename(path(2, 3), path(3, 3));
  write_split(1, 3, "t1");
  EXPECT_EQ(error_of([&] { GgufModel::open(path(1, 3)); }), path(3, 3) + ": field 'split.no': is 1, expected 2");
  fs::remove(path(3, 3));
  EXPECT_EQ(error_of([&] { GgufModel::open(path(1, 3)); }), path(3, 3) + ": cannot open: No such file or directory");
  write_split(2, 3, "t2");
  write_split(0, 3, "t0", 4);
  EXPECT_EQ(error_of([&] { GgufModel::open(path(1, 3)); }),
            path(1, 3) + ": field 'split.tensors.count': is 4 but the split files hold 3 tensors");
}

TEST_F(GgufSplit, SingleFileWithoutSplitKeys) {
  const std::string p = (dir_ / "plain.gguf").string();
  GgufWriter w;
  w.set("general.name", str("plain"));
  w.write(p);
  const GgufModel m = GgufModel::open(p);
  EXPECT_EQ(m.files().size(), 1u);
  EXPECT_TRUE(m.tensors().empty());
}

}  // namespace
}  // namespace k3
