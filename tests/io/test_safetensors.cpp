#include "error_of.h"
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

namespace fs = std::filesystem;
using k3::Dtype;

namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// Raw file: u64 length (the header size unless overridden), header text, payload of `payload` bytes.
std::vector<uint8_t> raw_file(const std::string& header, uint64_t payload, std::optional<uint64_t> len = {}) {
  std::vector<uint8_t> out;
  const uint64_t n = len.value_or(header.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  for (char c : header) out.push_back(static_cast<uint8_t>(c));
  for (uint64_t i = 0; i < payload; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

using k3::test::error_of;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("k3-st-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string put(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return path;
  }

  // The error opening these bytes as a file gives, with the file's path replaced by "F".
  std::string open_error(const std::vector<uint8_t>& bytes) {
    const std::string path = put("bad.safetensors", bytes);
    std::string what = error_of([&] { k3::SafetensorsFile::open(path); });
    if (what.rfind(path, 0) == 0) what = "F" + what.substr(path.size());
    return what;
  }
  std::string header_error(const std::string& header, uint64_t payload) {
    return open_error(raw_file(header, payload));
  }

  // The checkpoint's error with the test directory replaced by "D".
  std::string checkpoint_error(const std::string& path) {
    const std::string what = error_of([&] { k3::SafetensorsCheckpoint::open(path); });
    const std::string dir = dir_.string();
    std::string out;
    for (size_t i = 0; i < what.size();) {
      if (what.compare(i, dir.size(), dir) == 0) {
        out += 'D';
        i += dir.size();
      } else {
        out += what[i++];
      }
    }
    return out;
  }

  // A shard holding one U8 tensor of 2 bytes per name.
  std::string put_shard(const std::string& name, const std::vector<std::string>& tensors) {
    k3::SafetensorsWriter w;
    for (const auto& t : tensors) w.add(t, Dtype::U8, {2}, {uint8_t(t[0]), uint8_t(t.size())});
    const std::string path = (dir_ / name).string();
    w.write(path);
    return path;
  }
  std::string put_index(const std::string& text) { return put("model.safetensors.index.json", bytes_of(text)); }

  fs::path dir_;
};

// ---- dtypes -------------------------------------------------------------------------------

TEST(SafetensorsDtype, NamesRoundTripAndSizes) {
  const std::vector<std::pair<std::string, uint32_t>> expected = {
      {"BOOL", 8},     {"F4", 4},          {"F6_E2M3", 6},     {"F6_E3M2", 6}, {"U8", 8},   {"I8", 8},
      {"F8_E5M2", 8},  {"F8_E4M3", 8},     {"F8_E8M0", 8},     {"F8_E4M3FNUZ", 8},          {"F8_E5M2FNUZ", 8},
      {"I16", 16},     {"U16", 16},        {"F16", 16},        {"BF16", 16},   {"I32", 32}, {"U32", 32},
      {"F32", 32},     {"C64", 64},        {"F64", 64},        {"I64", 64},    {"U64", 64}};
  ASSERT_EQ(expected.size(), size_t(k3::kDtypeCount));
  for (int i = 0; i < k3::kDtypeCount; ++i) {
    const Dtype d = static_cast<Dtype>(i);
    EXPECT_EQ(k3::dtype_name(d), expected[i].first);
    EXPECT_EQ(k3::dtype_bits(d), expected[i].second);
    EXPECT_EQ(k3::dtype_from_string(expected[i].first, {}), d);
  }
  EXPECT_EQ(k3::dtype_size_bytes(Dtype::BF16), 2u);
  EXPECT_EQ(k3::dtype_size_bytes(Dtype::C64), 8u);
  EXPECT_EQ(k3::dtype_size_bytes(Dtype::F8_E8M0), 1u);
  EXPECT_EQ(error_of([] { k3::dtype_size_bytes(Dtype::F4); }),
            "dtype F4 is 4 bits wide and has no whole-byte element size");
  EXPECT_EQ(error_of([] { k3::dtype_from_string("F8_E4M3FN", k3::Where{"f", "t", "dtype"}); }),
            "f: tensor 't': field 'dtype': unknown dtype 'F8_E4M3FN'");
  EXPECT_EQ(error_of([] { k3::dtype_from_string("bf16", {}); }), "unknown dtype 'bf16'");
}

TEST(SafetensorsDtype, TensorBytes) {
  const k3::Where w{"f", "t", "shape"};
  EXPECT_EQ(k3::tensor_nbytes(Dtype::F32, std::vector<uint64_t>{}, w), 4u);
  EXPECT_EQ(k3::tensor_nbytes(Dtype::BF16, std::vector<uint64_t>{3, 5}, w), 30u);
  EXPECT_EQ(k3::tensor_nbytes(Dtype::F4, std::vector<uint64_t>{6}, w), 3u);
  EXPECT_EQ(k3::tensor_nbytes(Dtype::F6_E2M3, std::vector<uint64_t>{4}, w), 3u);
  EXPECT_EQ(k3::tensor_nbytes(Dtype::F64, std::vector<uint64_t>{0, 1ull << 62, 1ull << 62}, w), 0u);
  EXPECT_EQ(error_of([&] { k3::tensor_nbytes(Dtype::F6_E3M2, std::vector<uint64_t>{3}, w); }),
            "f: tensor 't': field 'shape': 3 elements of F6_E3M2 do not fill a whole number of bytes");
}

// ---- writer + reader round trip ----------------------------------------------------------

TEST_F(SafetensorsTest, RoundTripEveryDtype) {
  k3::SafetensorsWriter w;
  std::map<std::string, std::vector<uint8_t>> payloads;
  for (int i = 0; i < k3::kDtypeCount; ++i) {
    const Dtype d = static_cast<Dtype>(i);
    const std::vector<uint64_t> shape = {2, 4};
    std::vector<uint8_t> bytes(k3::tensor_nbytes(d, shape, {}));
    for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<uint8_t>(j * 7 + i);
    const std::string name = "t." + std::string(k3::dtype_name(d));
    payloads[name] = bytes;
    w.add(name, d, shape, bytes);
  }
  w.add("scalar", Dtype::F32, {}, {1, 2, 3, 4});
  w.add("empty", Dtype::BF16, {0, 3}, {});
  payloads["scalar"] = {1, 2, 3, 4};
  payloads["empty"] = {};
  w.set_metadata("format", "pt");
  w.set_metadata("note", "ünïcode");
  const std::string path = (dir_ / "all.safetensors").string();
  w.write(path);

  const auto f = k3::SafetensorsFile::open(path);
  EXPECT_EQ((8 + f.header_len()) % 8, 0u);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "ünïcode"}}));
  ASSERT_EQ(f.tensors().size(), payloads.size());
  for (const auto& [name, bytes] : payloads) {
    const k3::TensorInfo& t = f.at(name);
    EXPECT_EQ(t.name, name);
    EXPECT_EQ(t.nbytes, bytes.size());
    const auto data = f.data(t);
    EXPECT_EQ(std::vector<uint8_t>(data.begin(), data.end()), bytes) << name;
  }
  EXPECT_EQ(f.at("t.C64").dtype, Dtype::C64);
  EXPECT_EQ(f.at("t.C64").shape, (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(f.at("scalar").shape, std::vector<uint64_t>{});
  EXPECT_EQ(f.at("scalar").numel(), 1u);
  EXPECT_EQ(f.at("empty").numel(), 0u);
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_EQ(error_of([&] { f.at("missing"); }), path + ": tensor 'missing': no such tensor");

  // Layout: descending dtype order, then name; listing is in offset order.
  std::vector<std::string> listed;
  for (const auto& t : f.tensors()) listed.push_back(t.name);
  std::vector<std::string> expected;
  for (int i = k3::kDtypeCount - 1; i >= 0; --i) {
    if (static_cast<Dtype>(i) == Dtype::F32) expected.push_back("scalar");  // "scalar" < "t.F32"
    if (static_cast<Dtype>(i) == Dtype::BF16) expected.push_back("empty");
    expected.push_back("t." + std::string(k3::dtype_name(static_cast<Dtype>(i))));
  }
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(f.tensors().front().offset, 8 + f.header_len());
  EXPECT_EQ(f.tensors().back().offset + f.tensors().back().nbytes, f.file_size());
}

TEST_F(SafetensorsTest, WriterBytesMatchTheReferenceLayout) {
  k3::SafetensorsWriter w;
  w.add("a", Dtype::U8, {2}, {9, 8});
  w.add("b", Dtype::F32, {1}, {1, 2, 3, 4});
  w.set_metadata("format", "pt");
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("a":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> expected = raw_file(padded, 0);
  expected.insert(expected.end(), {1, 2, 3, 4, 9, 8});
  EXPECT_EQ(w.serialize(), expected);
  EXPECT_EQ(w.payload_size(), 6u);

  const std::string path = (dir_ / "w.safetensors").string();
  w.write(path);
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(on_disk, expected);
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  k3::SafetensorsWriter w;
  w.add("a", Dtype::U8, {2}, {1, 2});
  EXPECT_EQ(error_of([&] { w.add("a", Dtype::U8, {2}, {1, 2}); }), "tensor 'a': tensor added twice");
  EXPECT_EQ(error_of([&] { w.add("b", Dtype::F32, {2}, {1, 2, 3}); }),
            "tensor 'b': got 3 bytes but shape [2] of F32 needs 8");
  EXPECT_EQ(error_of([&] { w.add("__metadata__", Dtype::U8, {}, {1}); }), "tensor '__metadata__': reserved name");
  EXPECT_EQ(error_of([&] { w.add("c\xff", Dtype::U8, {}, {1}); }),
            "tensor 'c\\xff': tensor name is not valid UTF-8 (byte 1)");
  EXPECT_EQ(error_of([&] { w.write((dir_ / "no" / "dir.safetensors").string()); }),
            (dir_ / "no" / "dir.safetensors").string() + ": cannot create: No such file or directory");
}

// ---- header reads do not map the payload --------------------------------------------------

TEST_F(SafetensorsTest, HeaderReadsDoNotMapThePayload) {
  k3::SafetensorsWriter w;
  w.add("w", Dtype::F32, {4}, std::vector<uint8_t>(16, 7));
  w.add("z", Dtype::F32, {0}, {});
  const std::string path = (dir_ / "m.safetensors").string();
  w.write(path);

  const uint64_t before = k3::File::payload_maps();
  const auto f = k3::SafetensorsFile::open(path);
  EXPECT_EQ(f.at("w").nbytes, 16u);
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_TRUE(f.data(f.at("z")).empty());
  EXPECT_EQ(k3::File::payload_maps(), before);
  EXPECT_EQ(f.data(f.at("w"))[3], 7);
  EXPECT_EQ(k3::File::payload_maps(), before + 1);
}

// ---- validation rules, one by one ---------------------------------------------------------

TEST_F(SafetensorsTest, AcceptsMinimalAndPaddedHeaders) {
  const std::string path = put("empty.safetensors", raw_file("{}", 0));
  EXPECT_TRUE(k3::SafetensorsFile::open(path).tensors().empty());
  const std::string padded = put("padded.safetensors", raw_file(R"( {"t":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}   )", 1));
  EXPECT_EQ(k3::SafetensorsFile::open(padded).at("t").nbytes, 1u);
  // Entries may come in any order in the JSON; offsets decide the layout.
  const std::string unordered = put("unordered.safetensors",
      raw_file(R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 2));
  const auto f = k3::SafetensorsFile::open(unordered);
  EXPECT_EQ(f.tensors()[0].name, "a");
  EXPECT_EQ(f.at("b").offset, f.at("a").offset + 1);
}

TEST_F(SafetensorsTest, RejectsBadHeaderLength) {
  EXPECT_EQ(open_error({1, 2, 3, 4, 5}), "F: field 'header_len': file has 5 bytes, fewer than the 8-byte header length");
  EXPECT_EQ(open_error({}), "F: field 'header_len': file has 0 bytes, fewer than the 8-byte header length");
  EXPECT_EQ(open_error(raw_file("{}", 0, 100'000'001)),
            "F: field 'header_len': header length 100000001 exceeds the limit of 100000000 bytes");
  EXPECT_EQ(open_error(raw_file("{}", 0, UINT64_MAX)),
            "F: field 'header_len': header length 18446744073709551615 exceeds the limit of 100000000 bytes");
  EXPECT_EQ(open_error(raw_file("{}", 0, 100'000'000)),
            "F: field 'header_len': header length 100000000 runs past the end of the file (10 bytes)");
  EXPECT_EQ(open_error(raw_file("{}", 0, 3)), "F: field 'header_len': header length 3 runs past the end of the file (10 bytes)");
}

TEST_F(SafetensorsTest, RejectsInvalidJson) {
  EXPECT_EQ(header_error(R"({"t":)", 0), "F: field 'header': invalid JSON near byte 5");
  EXPECT_EQ(header_error(R"({"t" 1})", 0), "F: field 'header': invalid JSON near byte 5");
  EXPECT_EQ(header_error("", 0), "F: field 'header': invalid JSON near byte 0");
  EXPECT_EQ(header_error("{} x", 0), "F: field 'header': invalid JSON near byte 3");
  EXPECT_EQ(header_error(std::string("{}\0 ", 4), 0), "F: field 'header': header contains a NUL byte (byte 2)");
}

TEST_F(SafetensorsTest, RejectsInvalidUtf8) {
  EXPECT_EQ(header_error("{\"\xff\":1}", 0), "F: field 'header': header is not valid UTF-8 (byte 2)");
  EXPECT_EQ(header_error("{\"\xc0\xaf\":1}", 0), "F: field 'header': header is not valid UTF-8 (byte 2)");      // overlong
  EXPECT_EQ(header_error("{\"a\xed\xa0\x80\":1}", 0), "F: field 'header': header is not valid UTF-8 (byte 3)");  // surrogate
  EXPECT_EQ(header_error("{\"\xf4\x90\x80\x80\":1}", 0), "F: field 'header': header is not valid UTF-8 (byte 2)");  // > U+10FFFF
  EXPECT_EQ(header_error("{\"\xe2\x82\":1}", 0), "F: field 'header': header is not valid UTF-8 (byte 2)");  // truncated
}

TEST_F(SafetensorsTest, RejectsNonObjects) {
  EXPECT_EQ(header_error("[]", 0), "F: field 'header': not a JSON object");
  EXPECT_EQ(header_error(R"("x")", 0), "F: field 'header': not a JSON object");
  EXPECT_EQ(header_error(R"({"t":3})", 0), "F: tensor 't': must be an object with fields dtype, shape, data_offsets");
  EXPECT_EQ(header_error(R"({"t":[1]})", 0), "F: tensor 't': must be an object with fields dtype, shape, data_offsets");
}

TEST_F(SafetensorsTest, RejectsMissingAndIllTypedFields) {
  EXPECT_EQ(header_error(R"({"t":{"dtype":"U8","shape":[1]}})", 1), "F: tensor 't': field 'data_offsets': missing field");
  EXPECT_EQ(header_error(R"({"t":{"shape":[1],"data_offsets":[0,1]}})", 1), "F: tensor 't': field 'dtype': missing field");
  EXPECT_EQ(header_error(R"({"t":{"dtype":"U8","data_offsets":[0,1]}})", 1), "F: tensor 't': field 'shape': missing field");
  EXPECT_EQ(header_error(R"({"t":{"dtype":8,"shape":[1],"data_offsets":[0,1]}})", 1),
            "F: tensor 't': field 'dtype': must be a string");
  const std::string shape_msg = "F: tensor 't': field 'shape': must be an array of non-negative integers";
  for (const char* shape : {"\"1\"", "[-1]", "[1.0]", "[[1]]", "[true]", "null", "[18446744073709551616]"})
    EXPECT_EQ(header_error(std::string(R"({"t":{"dtype":"U8","shape":)") + shape + R"(,"data_offsets":[0,1]}})", 1),
              shape_msg)
        << shape;
  const std::string offsets_msg = "F: tensor 't': field 'data_offsets': must be [begin, end], two non-negative integers";
  for (const char* offsets : {"[0]", "[0,1,2]", "[0,\"1\"]", "[]", "{}", "[0,-1]"})
    EXPECT_EQ(header_error(std::string(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":)") + offsets + "}}", 1),
              offsets_msg)
        << offsets;
  EXPECT_EQ(header_error(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1}})", 1),
            "F: tensor 't': field 'extra': unknown field (expected dtype, shape, data_offsets)");
}

TEST_F(SafetensorsTest, RejectsUnknownDtype) {
  EXPECT_EQ(header_error(R"({"t":{"dtype":"F8_E4M3FN","shape":[1],"data_offsets":[0,1]}})", 1),
            "F: tensor 't': field 'dtype': unknown dtype 'F8_E4M3FN'");
}

TEST_F(SafetensorsTest, RejectsBadOffsets) {
  EXPECT_EQ(header_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})", 12),
            "F: tensor 'b': field 'data_offsets': data_offsets [8, 12] leave a gap: expected begin 4");
  EXPECT_EQ(header_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", 8),
            "F: tensor 'a': field 'data_offsets': data_offsets [4, 8] leave a gap: expected begin 0");
  EXPECT_EQ(header_error(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", 8),
            "F: tensor 'b': field 'data_offsets': data_offsets [4, 8] overlap tensor 'a': expected begin 8");
  EXPECT_EQ(header_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}})", 4),
            "F: tensor 'a': field 'data_offsets': data_offsets [4, 0] end before they begin");
}

TEST_F(SafetensorsTest, RejectsSizeMismatchAndBufferMismatch) {
  EXPECT_EQ(header_error(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
            "F: tensor 't': field 'data_offsets': data_offsets [0, 4] hold 4 bytes but shape [2] of F32 needs 8");
  EXPECT_EQ(header_error(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 6),
            "F: field 'data_offsets': tensors cover 4 bytes but the data buffer has 6 (trailing bytes)");
  EXPECT_EQ(header_error("{}", 1), "F: field 'data_offsets': tensors cover 0 bytes but the data buffer has 1 (trailing bytes)");
  EXPECT_EQ(header_error(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 5),
            "F: tensor 't': field 'data_offsets': data_offsets end 8 is past the end of the 5-byte data buffer "
            "(truncated file?)");
}

TEST_F(SafetensorsTest, RejectsShapeOverflow) {
  EXPECT_EQ(header_error(R"({"t":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
            "F: tensor 't': field 'shape': element count of shape [4294967296, 4294967296] overflows 64 bits");
  EXPECT_EQ(header_error(R"({"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0),
            "F: tensor 't': field 'shape': byte size of shape [4611686018427387904] of F32 overflows 64 bits");
  EXPECT_EQ(header_error(R"({"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2),
            "F: tensor 't': field 'shape': 3 elements of F4 do not fill a whole number of bytes");
}

TEST_F(SafetensorsTest, RejectsDuplicateKeys) {
  const std::string t = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  EXPECT_EQ(header_error(R"({"t":)" + t + R"(,"t":)" + t + "}", 1), "F: tensor 't': tensor appears twice in the header");
  EXPECT_EQ(header_error(R"({"__metadata__":{},"__metadata__":{}})", 0),
            "F: field '__metadata__': key appears twice in the header");
  EXPECT_EQ(header_error(R"({"__metadata__":{"a":"1","a":"2"}})", 0), "F: field '__metadata__': key 'a' appears twice");
  EXPECT_EQ(header_error(R"({"t":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1),
            "F: tensor 't': field 'dtype': field appears twice");
}

TEST_F(SafetensorsTest, MetadataMustBeAFlatStringMap) {
  EXPECT_EQ(header_error(R"({"__metadata__":5})", 0), "F: field '__metadata__': must be an object of strings");
  EXPECT_EQ(header_error(R"({"__metadata__":["a"]})", 0), "F: field '__metadata__': must be an object of strings");
  EXPECT_EQ(header_error(R"({"__metadata__":{"a":1}})", 0), "F: field '__metadata__': value of key 'a' must be a string");
  EXPECT_EQ(header_error(R"({"__metadata__":{"a":{"b":"c"}}})", 0),
            "F: field '__metadata__': value of key 'a' must be a string");
  const std::string ok = put("meta.safetensors", raw_file(R"({"__metadata__":{"format":"pt","x":""}})", 0));
  EXPECT_EQ(k3::SafetensorsFile::open(ok).metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"x", ""}}));
}

TEST_F(SafetensorsTest, BufferParserMatchesFileReader) {
  k3::SafetensorsWriter w;
  w.add("x", Dtype::I16, {3}, {1, 0, 2, 0, 3, 0});
  const auto bytes = w.serialize();
  const auto h = k3::parse_safetensors_buffer(bytes, "mem");
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].offset + 6, bytes.size());
  EXPECT_EQ(h.index.at("x"), 0u);
  EXPECT_EQ(error_of([] { k3::parse_safetensors_buffer(std::vector<uint8_t>{1, 0}, "mem"); }),
            "mem: field 'header_len': file has 2 bytes, fewer than the 8-byte header length");
}

// ---- checkpoints --------------------------------------------------------------------------

TEST_F(SafetensorsTest, ShardedCheckpointOpens) {
  k3::SafetensorsWriter a, b;
  a.add("w1", Dtype::F32, {1}, {1, 2, 3, 4});
  a.add("w2", Dtype::U8, {2}, {5, 6});
  b.add("w3", Dtype::BF16, {1}, {7, 8});
  a.write((dir_ / "model-00001-of-00002.safetensors").string());
  b.write((dir_ / "model-00002-of-00002.safetensors").string());
  k3::write_safetensors_index((dir_ / "model.safetensors.index.json").string(),
                              {{"w1", "model-00001-of-00002.safetensors"},
                               {"w2", "model-00001-of-00002.safetensors"},
                               {"w3", "model-00002-of-00002.safetensors"}},
                              a.payload_size() + b.payload_size());

  for (const std::string& path : {dir_.string(), (dir_ / "model.safetensors.index.json").string()}) {
    const uint64_t maps = k3::File::payload_maps();
    const auto ck = k3::SafetensorsCheckpoint::open(path);
    EXPECT_EQ(ck.index_path(), (dir_ / "model.safetensors.index.json").string());
    EXPECT_EQ(ck.total_size(), 8u);
    ASSERT_EQ(ck.shards().size(), 2u);
    EXPECT_EQ(ck.shards()[1].path(), (dir_ / "model-00002-of-00002.safetensors").string());
    ASSERT_EQ(ck.size(), 3u);
    EXPECT_EQ(ck.info(ck.entries()[2]).name, "w3");
    const auto& e = ck.at("w3");
    EXPECT_EQ(e.shard, 1u);
    EXPECT_EQ(ck.info(e).dtype, Dtype::BF16);
    EXPECT_EQ(ck.find("nope"), nullptr);
    EXPECT_EQ(error_of([&] { ck.at("nope"); }), path + ": tensor 'nope': no such tensor");
    EXPECT_EQ(k3::File::payload_maps(), maps);
    EXPECT_EQ(ck.data(ck.at("w2"))[1], 6);
    EXPECT_EQ(k3::File::payload_maps(), maps + 1);
    EXPECT_EQ(ck.shard_of(ck.at("w1")).path(), (dir_ / "model-00001-of-00002.safetensors").string());
  }
}

TEST_F(SafetensorsTest, ManyShardsOpenInParallel) {
  std::map<std::string, std::string> weight_map;
  for (int s = 0; s < 64; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-00064.safetensors", s + 1);
    const std::string a = "layers." + std::to_string(s) + ".a", b = "layers." + std::to_string(s) + ".b";
    put_shard(name, {a, b});
    weight_map[a] = weight_map[b] = name;
  }
  k3::write_safetensors_index((dir_ / "model.safetensors.index.json").string(), weight_map, 256);
  const auto ck = k3::SafetensorsCheckpoint::open(dir_.string());
  EXPECT_EQ(ck.size(), 128u);
  EXPECT_EQ(ck.at("layers.37.b").shard, 37u);
  EXPECT_EQ(ck.info(ck.entries()[75]).name, "layers.37.b");
}

TEST_F(SafetensorsTest, SingleFileCheckpoints) {
  put_shard("only.safetensors", {"x", "y"});
  auto ck = k3::SafetensorsCheckpoint::open(dir_.string());
  EXPECT_EQ(ck.index_path(), "");
  EXPECT_EQ(ck.total_size(), std::nullopt);
  EXPECT_EQ(ck.size(), 2u);
  EXPECT_EQ(ck.at("y").tensor, 1u);
  EXPECT_EQ(k3::SafetensorsCheckpoint::open((dir_ / "only.safetensors").string()).size(), 2u);

  put_shard("other.safetensors", {"z"});
  EXPECT_EQ(checkpoint_error(dir_.string()),
            "D: 2 *.safetensors files but no model.safetensors.index.json to tie them together");
  put_shard("model.safetensors", {"m"});  // model.safetensors wins over other files
  EXPECT_EQ(k3::SafetensorsCheckpoint::open(dir_.string()).at("m").shard, 0u);

  fs::create_directories(dir_ / "empty");
  EXPECT_EQ(checkpoint_error((dir_ / "empty").string()), "D/empty: no model.safetensors.index.json and no *.safetensors file");
  EXPECT_EQ(checkpoint_error((dir_ / "absent").string()), "D/absent: no such file or directory");
}

TEST_F(SafetensorsTest, ShardedErrors) {
  put_shard("s1.safetensors", {"a", "b"});
  put_shard("s2.safetensors", {"c"});

  put_index(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors",)"
            R"("d":"s3.safetensors","e":"s3.safetensors"}})");
  EXPECT_EQ(checkpoint_error(dir_.string()),
            "D/s3.safetensors: shard is missing; model.safetensors.index.json lists it for tensor 'd' and 1 more");

  put_index(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors","f":"s2.safetensors"}})");
  EXPECT_EQ(checkpoint_error(dir_.string()),
            "D/s2.safetensors: tensor 'f': tensor listed in model.safetensors.index.json is missing from this shard");

  put_index(R"({"weight_map":{"a":"s1.safetensors","c":"s2.safetensors"}})");
  EXPECT_EQ(checkpoint_error(dir_.string()),
            "D/s1.safetensors: tensor 'b': tensor is not listed in model.safetensors.index.json");

  put_index(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors","c":"s2.safetensors"}})");
  EXPECT_EQ(checkpoint_error(dir_.string()),
            "D/s1.safetensors: tensor 'b': model.safetensors.index.json lists the tensor in shard 's2.safetensors'");

  put_shard("s2.safetensors", {"b", "c"});  // b now in both shards
  put_index(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors","c":"s2.safetensors"}})");
  EXPECT_EQ(checkpoint_error(dir_.string()),
            "D/s1.safetensors: tensor 'b': tensor is also present in shard 's2.safetensors' (the one "
            "model.safetensors.index.json names)");
  put_index(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"}})");
  EXPECT_EQ(checkpoint_error(dir_.string()),
            "D/s2.safetensors: tensor 'b': tensor is also present in shard 's1.safetensors' (the one "
            "model.safetensors.index.json names)");

  put("s2.safetensors", raw_file("{", 0));  // a corrupt shard reports its own error
  EXPECT_EQ(checkpoint_error(dir_.string()), "D/s2.safetensors: field 'header': invalid JSON near byte 1");
}

TEST_F(SafetensorsTest, BadIndexJson) {
  put_shard("s1.safetensors", {"a"});
  auto index_error = [&](const std::string& text) {
    put_index(text);
    return checkpoint_error(dir_.string());
  };
  const std::string I = "D/model.safetensors.index.json: ";
  EXPECT_EQ(index_error("{"), I + "invalid JSON near byte 1");
  EXPECT_EQ(index_error("{\"weight_map\":{\"\xff\":\"s1\"}}"), I + "index is not valid UTF-8 (byte 16)");
  EXPECT_EQ(index_error("[]"), I + "not a JSON object");
  EXPECT_EQ(index_error(R"({"metadata":{}})"), I + "field 'weight_map': missing field");
  EXPECT_EQ(index_error(R"({"weight_map":["a"]})"),
            I + "field 'weight_map': must be an object mapping tensor names to shard file names");
  EXPECT_EQ(index_error(R"({"weight_map":{"a":1}})"), I + "tensor 'a': field 'weight_map': shard file name must be a string");
  EXPECT_EQ(index_error(R"({"weight_map":{"a":"/abs.safetensors"}})"),
            I + "tensor 'a': field 'weight_map': shard file name '/abs.safetensors' is not a relative path");
  EXPECT_EQ(index_error(R"({"weight_map":{"a":"s1.safetensors","a":"s1.safetensors"}})"),
            I + "tensor 'a': field 'weight_map': tensor listed twice");
  EXPECT_EQ(index_error(R"({"weight_map":{},"weight_map":{}})"), I + "field 'weight_map': key appears twice");
  EXPECT_EQ(index_error(R"({"metadata":{"total_size":-1},"weight_map":{}})"),
            I + "field 'metadata.total_size': must be a non-negative integer");
  EXPECT_EQ(index_error(R"({"metadata":[],"weight_map":{}})"), I + "field 'metadata': must be an object");

  // Unknown keys are skipped whatever they hold.
  put_index(R"({"extra":[1,{"a":[2,{"weight_map":3}]}],"metadata":{"format":{"x":[1,2]},"total_size":2},)"
            R"("weight_map":{"a":"s1.safetensors"},"tail":null})");
  const auto ck = k3::SafetensorsCheckpoint::open(dir_.string());
  EXPECT_EQ(ck.total_size(), 2u);
  EXPECT_EQ(ck.size(), 1u);
}

}  // namespace
