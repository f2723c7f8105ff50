// GGUF metadata costs memory in proportion to its encoding: arrays are held packed.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "error_of.h"
#include "io/gguf.h"

namespace k3 {
namespace {

using test::error_of;

TEST(GgufMemory, LargeU8ArrayIsHeldInItsOwnSize) {
  constexpr uint64_t kN = 8u << 20;  // 8 M one-byte elements
  GgufArray a;
  a.elem_type = GgufType::U8;
  a.count = kN;
  a.packed.resize(kN);
  for (uint64_t i = 0; i < kN; ++i) a.packed[i] = static_cast<uint8_t>(i * 7);
  GgufWriter w;
  w.set("big", {std::move(a)});
  const std::vector<uint8_t> image = w.to_bytes();
  const GgufFile f = GgufFile::parse(image, "big.gguf");
  const GgufValue& v = *f.find("big");
  ASSERT_EQ(v.type(), GgufType::ARRAY);
  const GgufArray& got = v.get<GgufArray>();
  ASSERT_EQ(got.size(), kN);
  EXPECT_EQ(got.at<uint8_t>(12345), static_cast<uint8_t>(12345 * 7));
  EXPECT_EQ(got.at<uint8_t>(kN - 1), static_cast<uint8_t>((kN - 1) * 7));
  EXPECT_LE(v.bytes(), kN * 11 / 10) << "in-memory size out of proportion to the payload";
  EXPECT_EQ(error_of([&] { (void)got.at<uint16_t>(0); }), "GGUF array of u8 read as u16");
  EXPECT_EQ(error_of([&] { (void)got.at<uint8_t>(kN); }), "GGUF array index 8388608 is out of range (8388608 elements)");
}

TEST(GgufMemory, ParsingALargeArrayFromAFileKeepsPeakRssProportional) {
  constexpr uint64_t kN = 8u << 20;
  const std::string path = ::testing::TempDir() + "/big_array.gguf";
  {
    GgufArray a;
    a.elem_type = GgufType::U8;
    a.count = kN;
    a.packed.assign(kN, 1);
    GgufWriter w;
    w.set("general.architecture", {std::string("kimi-k3")});
    w.set("big", {std::move(a)});
    w.write(path);
  }
  // In a fresh child: the parse adds at most ~2x the file (array + read window) to peak RSS.
  const pid_t pid = ::fork();
  if (pid == 0) {
    rusage before{};
    ::getrusage(RUSAGE_SELF, &before);
    const GgufFile f = GgufFile::open(path);
    rusage after{};
    ::getrusage(RUSAGE_SELF, &after);
    const long grown_kb = after.ru_maxrss - before.ru_maxrss;
    ::_exit(f.find("big") != nullptr && grown_kb < static_cast<long>(2 * kN / 1024) ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "peak RSS grew by more than twice the array";
}

TEST(GgufMemory, StringAndNestedArraysRoundTrip) {
  GgufWriter w;
  w.set("s", GgufValue::array(GgufType::STRING, {{std::string("a")}, {std::string("")}, {std::string("ccc")}}));
  w.set("n", GgufValue::array(GgufType::ARRAY, {GgufValue::array(GgufType::I16, {{int16_t{-2}}}),
                                                 GgufValue::array(GgufType::BOOL, {{true}, {false}})}));
  const std::vector<uint8_t> image = w.to_bytes();
  const GgufFile f = GgufFile::parse(image, "x.gguf");
  const GgufArray& s = f.find("s")->get<GgufArray>();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s.string_at(0), "a");
  EXPECT_EQ(s.string_at(1), "");
  EXPECT_EQ(s.string_at(2), "ccc");
  const GgufArray& n = f.find("n")->get<GgufArray>();
  EXPECT_EQ(n.array_at(0).at<int16_t>(0), -2);
  EXPECT_TRUE(n.array_at(1).at<bool>(0));
  EXPECT_EQ(gguf_value_to_json(*f.find("n")).dump(), "[[-2],[true,false]]");
  std::string streamed;
  write_gguf_value_json(*f.find("s"), [&](std::string_view t) {
    streamed += t;
    return true;
  });
  EXPECT_EQ(streamed, R"(["a","","ccc"])");
}

TEST(GgufMemory, BoolArrayElementOtherThanZeroOrOneIsRefused) {
  GgufArray raw;  // the writer copies packed bytes as they are
  raw.elem_type = GgufType::BOOL;
  raw.count = 2;
  raw.packed = {1, 2};
  GgufWriter bad;
  bad.set("b", {raw});
  const std::vector<uint8_t> bad_image = bad.to_bytes();
  EXPECT_EQ(error_of([&] { GgufFile::parse(bad_image, "b.gguf"); }), "b.gguf: field 'b': bool element 1 must be 0 or 1, got 2");
}

TEST(GgufMemory, TypedLookupsNameTheKeyAndTheTypeFound) {
  GgufWriter w;
  w.set("general.architecture", {uint32_t{7}});
  w.set("split.count", {std::string("two")});
  w.set("ok.count", {uint16_t{3}});
  const std::vector<uint8_t> image = w.to_bytes();
  const GgufFile f = GgufFile::parse(image, "m.gguf");
  EXPECT_EQ(error_of([&] { f.find_string("general.architecture"); }),
            "m.gguf: field 'general.architecture': must be a string (found u32)");
  EXPECT_EQ(error_of([&] { f.find_integer("split.count"); }), "m.gguf: field 'split.count': must be an integer (found str)");
  EXPECT_EQ(f.find_integer("ok.count"), 3);
  EXPECT_EQ(f.find_string("absent"), std::nullopt);
}

}  // namespace
}  // namespace k3
