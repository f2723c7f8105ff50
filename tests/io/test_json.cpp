#include "io/json.h"

#include <gtest/gtest.h>

#include "error_of.h"
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace k3 {
namespace {

using test::error_of;

JsonNode parse(const std::string& text) { return parse_json(text, "c.json"); }

TEST(Json, BadJsonNamesFileLineAndColumn) {
  EXPECT_EQ(error_of([] { parse("{\n  \"a\": 1,\n  \"b\" 2\n}"); }),
            "c.json: invalid JSON at line 3, column 7: syntax error while parsing object separator - unexpected "
            "number literal; expected ':'");
  EXPECT_EQ(error_of([] { parse(""); }),
            "c.json: invalid JSON at line 1, column 1: syntax error while parsing value - unexpected end of input; "
            "expected '[', '{', or a literal");
  EXPECT_EQ(error_of([] { parse("[1e400]"); }),
            "c.json: invalid JSON at line 1, column 6: number overflow parsing '1e400'");
  EXPECT_EQ(error_of([] { parse("{\"a\": \"\xff\"}"); }),
            "c.json: invalid JSON at line 1, column 8: syntax error while parsing value - invalid string: "
            "ill-formed UTF-8 byte; last read: '\"\xff'");
}

TEST(Json, DuplicateKeysAreRejected) {
  EXPECT_EQ(error_of([] { parse(R"({"x": {"a": 1, "b": 2, "a": 3}})"); }),
            "c.json: invalid JSON: duplicate object key \"a\"");
}

TEST(Json, NestingIsBounded) {
  std::string deep(kMaxJsonDepth, '[');
  deep += std::string(kMaxJsonDepth, ']');
  EXPECT_NO_THROW(parse(deep));
  std::string deeper = "[" + deep + "]";
  EXPECT_EQ(error_of([&] { parse(deeper); }), "c.json: invalid JSON: nesting deeper than 256 levels");
}

TEST(Json, MembersKeepFileOrder) {
  JsonNode root = parse(R"({"zeta": 1, "alpha": {"y": 2, "b": 3}, "mid": 4})");
  std::vector<std::string> keys;
  for (const auto& [key, value] : root.members()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"zeta", "alpha", "mid"}));
  std::vector<std::string> inner;
  for (const auto& [key, value] : root.object("alpha").members()) inner.push_back(value.path());
  EXPECT_EQ(inner, (std::vector<std::string>{"alpha.y", "alpha.b"}));
}

TEST(Json, PathsQuoteKeysThatAreNotPlainNames) {
  JsonNode root = parse(R"({"layers": {"model.layers.0.q_proj": {"algo": [1, {"x y": 5}]}}})");
  JsonNode entry = root.object("layers").members()[0].second;
  JsonNode leaf = entry.at("algo").elements()[1].at("x y");
  EXPECT_EQ(leaf.path(), R"(layers["model.layers.0.q_proj"].algo[1]["x y"])");
  EXPECT_EQ(error_of([&] { leaf.as<std::string>(); }),
            R"(c.json: field 'layers["model.layers.0.q_proj"].algo[1]["x y"]': expected a string, got 5)");
}

TEST(Json, RangeCheckedIntegers) {
  JsonNode root = parse(R"({"ok": 128, "big": 4294967296, "u": 18446744073709551615, "neg": -5, "f": 4.0,
                            "list": [1, 4294967424], "null": null})");
  EXPECT_EQ(root.required_int("ok", 1, 65536), 128);
  EXPECT_EQ(root.at("ok").as_int_in(128, 128), 128);
  EXPECT_EQ(error_of([&] { root.required_int("big", 1, 65536); }), "c.json: field 'big': 4294967296 is out of range [1, 65536]");
  // An unsigned value is reported as written, not wrapped to a negative number.
  EXPECT_EQ(error_of([&] { root.required_int("u", 0, INT64_MAX); }),
            "c.json: field 'u': 18446744073709551615 is out of range [0, 9223372036854775807]");
  EXPECT_EQ(error_of([&] { root.required_int("neg", 0, 10); }), "c.json: field 'neg': -5 is out of range [0, 10]");
  EXPECT_EQ(error_of([&] { root.required_int("f", 0, 10); }), "c.json: field 'f': expected an integer, got 4.0");
  EXPECT_EQ(error_of([&] { root.required_int("null", 0, 10); }), "c.json: field 'null': must not be null");
  EXPECT_EQ(error_of([&] { root.required_int("absent", 0, 10); }), "c.json: field 'absent': missing required field");
  EXPECT_EQ(root.optional_int("absent", 0, 10), std::nullopt);
  EXPECT_EQ(root.optional_int("null", 0, 10), std::nullopt);
  EXPECT_EQ(error_of([&] { root.at("list").as_int_list_in(1, 65536); }),
            "c.json: field 'list[1]': 4294967424 is out of range [1, 65536]");
}

TEST(Json, RangeCheckedDoublesKeepNumbersShort) {
  JsonNode root = parse(R"({"eps": 1e-5, "huge": 1e308, "tiny": 5e-324, "int": 3, "s": "1"})");
  EXPECT_EQ(root.required_double("eps", 1e-12, 0.1), 1e-5);
  EXPECT_EQ(root.required_double("int", 0, 10), 3.0);
  EXPECT_EQ(error_of([&] { root.required_double("huge", 1e-3, 1e3); }),
            "c.json: field 'huge': 1e+308 is out of range [0.001, 1000]");
  EXPECT_EQ(error_of([&] { root.required_double("tiny", 1e-12, 0.1); }),
            "c.json: field 'tiny': 4.94066e-324 is out of range [1e-12, 0.1]");
  EXPECT_EQ(error_of([&] { root.required_double("int", 5, 10); }), "c.json: field 'int': 3 is out of range [5, 10]");
  EXPECT_EQ(error_of([&] { root.required_double("s", 0, 10); }), "c.json: field 's': expected a number, got the string \"1\"");
}

TEST(Json, IntegersAreExactAndStrict) {
  JsonNode root = parse(R"({"max": 9223372036854775807, "min": -9223372036854775808, "u": 18446744073709551615,
                            "f": 4.0, "e": 1e3, "s": "7", "neg": -1, "b": true})");
  EXPECT_EQ(root.required<int64_t>("max"), INT64_MAX);
  EXPECT_EQ(root.required<int64_t>("min"), INT64_MIN);
  EXPECT_EQ(root.required<uint64_t>("u"), UINT64_MAX);
  EXPECT_EQ(error_of([&] { root.required<int64_t>("u"); }),
            "c.json: field 'u': integer 18446744073709551615 does not fit a signed 64-bit value");
  EXPECT_EQ(error_of([&] { root.required<int64_t>("f"); }), "c.json: field 'f': expected an integer, got 4.0");
  EXPECT_EQ(error_of([&] { root.required<int64_t>("e"); }), "c.json: field 'e': expected an integer, got 1000.0");
  EXPECT_EQ(error_of([&] { root.required<int64_t>("s"); }),
            "c.json: field 's': expected an integer, got the string \"7\"");
  EXPECT_EQ(error_of([&] { root.required<uint64_t>("neg"); }),
            "c.json: field 'neg': expected a non-negative integer, got -1");
  EXPECT_EQ(error_of([&] { root.required<int64_t>("b"); }), "c.json: field 'b': expected an integer, got true");
}

TEST(Json, BooleansAndStringsAreStrict) {
  JsonNode root = parse(R"({"one": 1, "t": "true", "yes": true, "n": null, "obj": {}, "arr": []})");
  EXPECT_TRUE(root.required<bool>("yes"));
  EXPECT_EQ(error_of([&] { root.required<bool>("one"); }), "c.json: field 'one': expected true or false, got 1");
  EXPECT_EQ(error_of([&] { root.required<bool>("t"); }),
            "c.json: field 't': expected true or false, got the string \"true\"");
  EXPECT_EQ(error_of([&] { root.required<std::string>("obj"); }),
            "c.json: field 'obj': expected a string, got an object");
  EXPECT_EQ(error_of([&] { root.required<std::string>("arr"); }), "c.json: field 'arr': expected a string, got an array");
  EXPECT_EQ(error_of([&] { root.required<double>("t"); }),
            "c.json: field 't': expected a number, got the string \"true\"");
}

TEST(Json, DoublesAcceptEveryNumber) {
  JsonNode root = parse(R"({"i": 3, "f": -5.0, "e": 1e-05})");
  EXPECT_EQ(root.required<double>("i"), 3.0);
  EXPECT_EQ(root.required<double>("f"), -5.0);
  EXPECT_EQ(root.required<double>("e"), 1e-05);
}

TEST(Json, RequiredNullableOptional) {
  JsonNode root = parse(R"({"n": null, "v": 2})");
  EXPECT_EQ(error_of([&] { root.required<int64_t>("absent"); }), "c.json: field 'absent': missing required field");
  EXPECT_EQ(error_of([&] { root.required<int64_t>("n"); }), "c.json: field 'n': must not be null");
  EXPECT_EQ(root.nullable<int64_t>("n"), std::nullopt);
  EXPECT_EQ(root.nullable<int64_t>("v"), 2);
  EXPECT_EQ(error_of([&] { root.nullable<int64_t>("absent"); }), "c.json: field 'absent': missing required field");
  EXPECT_EQ(root.optional<int64_t>("absent"), std::nullopt);
  EXPECT_EQ(root.optional<int64_t>("n"), std::nullopt);
  EXPECT_EQ(root.optional<int64_t>("absent", 7), 7);
  EXPECT_EQ(root.optional<int64_t>("v", 7), 2);
  EXPECT_EQ(error_of([&] { root.optional<int64_t>("n", 7); }), "c.json: field 'n': must not be null");
  EXPECT_EQ(error_of([&] { root.at("v").at("x"); }), "c.json: field 'v': expected an object, got 2");
  EXPECT_EQ(error_of([&] { parse("[1]").has("x"); }), "c.json: expected an object, got an array");
}

TEST(Json, ListsNameTheBadElement) {
  JsonNode root = parse(R"({"ids": [1, 2, "3"], "one": 5, "list": [5, 6], "bad": 1.5})");
  EXPECT_EQ(error_of([&] { root.required<std::vector<int64_t>>("ids"); }),
            "c.json: field 'ids[2]': expected an integer, got the string \"3\"");
  EXPECT_EQ(root.at("one").as_int_or_int_list(), (std::vector<int64_t>{5}));
  EXPECT_EQ(root.at("list").as_int_or_int_list(), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(error_of([&] { root.at("bad").as_int_or_int_list(); }),
            "c.json: field 'bad': expected an integer or a list of integers, got 1.5");
  EXPECT_EQ(error_of([&] { root.at("one").elements(); }), "c.json: field 'one': expected an array, got 5");
}

TEST(Json, LoadFileNamesThePath) {
  const std::string path = ::testing::TempDir() + "k3_json_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << "{\"a\": [1, 2,]}";
  EXPECT_EQ(error_of([&] { load_json_file(path); }),
            path + ": invalid JSON at line 1, column 13: syntax error while parsing value - unexpected ']'; "
                   "expected '[', '{', or a literal");
  std::ofstream(path) << "{\"a\": [1, 2]}";
  EXPECT_EQ(load_json_file(path).required<std::vector<int64_t>>("a"), (std::vector<int64_t>{1, 2}));
  std::remove(path.c_str());
  EXPECT_EQ(error_of([&] { load_json_file(path); }), path + ": cannot open: No such file or directory");
}

}  // namespace
}  // namespace k3
