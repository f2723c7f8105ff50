// The header-first writers (k3 quantize's outputs): the same bytes as the in-memory writers whatever
// order and pieces the payloads come in, and a payload left short is an error naming the tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/gguf.h"
#include "io/safetensors.h"
#include "io/safetensors_stream.h"

namespace k3 {
namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 7 * i);
  return v;
}

struct T {
  std::string name;
  Dtype dtype;
  std::vector<uint64_t> shape;
};

TEST(SafetensorsStreamWriter, SameBytesAsSafetensorsWriterInAnyOrderAndPieces) {
  const std::vector<T> tensors = {{"b.weight", Dtype::BF16, {3, 5}}, {"a.scale", Dtype::F32, {}}, {"c", Dtype::U8, {7}}, {"a.weight", Dtype::F8_E4M3, {2, 4}}};
  SafetensorsWriter whole;
  SafetensorsStreamWriter stream;
  whole.set_metadata("format", "pt");
  stream.set_metadata("format", "pt");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t n = tensor_nbytes(tensors[i].dtype, tensors[i].shape, Where{});
    whole.add(tensors[i].name, tensors[i].dtype, tensors[i].shape, pattern(n, static_cast<uint8_t>(i)));
    EXPECT_EQ(stream.declare(tensors[i].name, tensors[i].dtype, tensors[i].shape), i);
  }
  const std::string path = ::testing::TempDir() + "/k3_stream.safetensors";
  stream.open(path);
  for (size_t i = tensors.size(); i-- > 0;) {  // last declared first, each in two pieces
    const std::vector<uint8_t> bytes = pattern(stream.nbytes(i), static_cast<uint8_t>(i));
    const size_t half = bytes.size() / 2;
    stream.write(i, half, std::span<const uint8_t>(bytes).subspan(half));
    stream.write(i, 0, std::span<const uint8_t>(bytes).first(half));
  }
  stream.close();
  EXPECT_EQ(read_bytes(path), whole.serialize());
}

TEST(SafetensorsStreamWriter, ShortOrOverlongPayloadsAreErrors) {
  SafetensorsStreamWriter stream;
  stream.declare("w", Dtype::F32, {4});
  const std::string path = ::testing::TempDir() + "/k3_stream_short.safetensors";
  stream.open(path);
  const std::vector<uint8_t> bytes(12, 1);
  stream.write(0, 0, bytes);
  EXPECT_THROW(stream.write(0, 8, bytes), Error);
  try {
    stream.close();
    FAIL() << "a short payload was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": tensor 'w': only 12 of 16 payload bytes were written");
  }
  SafetensorsStreamWriter twice;
  twice.declare("w", Dtype::F32, {4});
  EXPECT_THROW(twice.declare("w", Dtype::F32, {4}), Error);
}

TEST(GgufStreamWriter, SameBytesAsGgufWriter) {
  GgufWriter whole;
  GgufStreamWriter stream;
  whole.set("general.architecture", GgufValue{std::string("kimi-k3")});
  stream.set("general.architecture", GgufValue{std::string("kimi-k3")});
  whole.set("split.no", GgufValue{static_cast<uint16_t>(0)});
  stream.set("split.no", GgufValue{static_cast<uint16_t>(0)});
  const std::vector<std::pair<std::string, std::vector<uint64_t>>> shapes = {{"a", {32, 2}}, {"b", {256, 3}}, {"c", {5}}};
  const GgmlType types[] = {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F32};
  for (size_t i = 0; i < shapes.size(); ++i) stream.declare(shapes[i].first, types[i], shapes[i].second);
  for (size_t i = 0; i < shapes.size(); ++i) whole.add_tensor(shapes[i].first, types[i], shapes[i].second, pattern(stream.nbytes(i), static_cast<uint8_t>(i)));
  const std::string path = ::testing::TempDir() + "/k3_stream.gguf";
  stream.open(path);
  for (size_t i : {2, 0, 1}) stream.write(i, 0, pattern(stream.nbytes(i), static_cast<uint8_t>(i)));
  stream.close();
  const std::vector<uint8_t> want = whole.to_bytes();
  EXPECT_EQ(stream.file_size(), want.size());
  EXPECT_EQ(read_bytes(path), want);
}

}  // namespace
}  // namespace k3
