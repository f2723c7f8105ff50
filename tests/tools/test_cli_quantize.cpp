// k3 quantize on the command line: every family from a make-tiny bf16 checkpoint (plans cleanly,
// loads, runs; tokenizer files carried over; progress on stderr, one summary line), the one-line
// errors of bad input, the output folder rules, and the streaming bound on a larger checkpoint.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "model/tiny_config.h"
#include "quant/families/family_writer.h"
#include "runtime/engine.h"
#include "tools/cli_runner.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;

class QuantizeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = ::testing::TempDir() + "/k3_quantize_cli_" + std::to_string(::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
    src_ = root_ + "/src";
    const test::CliResult r = test::run_k3("make-tiny --arch kimi-k3 --family bf16 --seed 3 --out " + src_);
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static std::string out(const std::string& name) {
    const std::string d = root_ + "/" + name;
    fs::remove_all(d);
    return d;
  }
  // A one-line error of `k3 quantize`, exit 1, nothing written (no output, no temporary folder).
  static void expect_error(const std::string& args, const std::string& text, const std::string& out_dir) {
    const test::CliResult r = test::run_k3("quantize " + args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("k3 quantize: error: ", 0), 0u) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(text), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << args;
    if (!out_dir.empty()) {
      EXPECT_FALSE(fs::exists(out_dir) && !fs::is_empty(out_dir)) << args;
    }
    for (const auto& e : fs::directory_iterator(root_)) EXPECT_EQ(e.path().filename().string().find(".k3tmp-"), std::string::npos) << e.path();
  }

  static std::string root_, src_;
};
std::string QuantizeCli::root_, QuantizeCli::src_;

TEST_F(QuantizeCli, EveryFamilyFromABf16CheckpointPlansLoadsAndRuns) {
  for (FamilyId family : all_families()) {
    const std::string name = family_name(family);
    SCOPED_TRACE(name);
    const std::string dir = out("q_" + name);
    const test::CliResult r = test::run_k3("quantize --from " + src_ + " --family " + name + " --out " + dir);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("wrote " + dir + ": " + name, 0), 0u) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_EQ(r.err.rfind("[1/", 0), 0u) << r.err.substr(0, 200);
    EXPECT_NE(r.err.find("] lm_head  "), std::string::npos);
    const LoadPlan plan = plan_checkpoint(dir);
    EXPECT_TRUE(plan.ok()) << (plan.problems.empty() ? "" : plan.problems.front().text());
    EXPECT_EQ(plan.family, name);
    for (const char* f : {"tiktoken.model", "tokenizer_config.json", "generation_config.json"}) {
      EXPECT_EQ(test::slurp(dir + "/" + f), test::slurp(src_ + "/" + f)) << f;
    }
    EngineOptions options;
    options.threads = 2;
    options.max_context = 16;
    Engine engine(dir, options);
    const int64_t seq = engine.new_sequence();
    const std::vector<StepResult> step = engine.step({{seq, {1, 7, 42, 3}, false}});
    ASSERT_EQ(step.front().logits.size(), static_cast<size_t>(engine.config().vocab_size));
    EXPECT_TRUE(std::all_of(step.front().logits.begin(), step.front().logits.end(), [](float v) { return std::isfinite(v); }));
  }
}

TEST_F(QuantizeCli, RecipesAndCalibration) {
  const std::string q4 = out("q4km");
  const test::CliResult r = test::run_k3("quantize --from " + src_ + " --family gguf-expert-pack --recipe q4_k_m --out " + q4);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("gguf-expert-pack, recipe q4_k_m"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("] lm_head  q6_K  "), std::string::npos);
  EXPECT_TRUE(plan_checkpoint(q4).ok());

  const std::string calib = root_ + "/calib.json";
  std::ofstream(calib) << "[[1, 2, 3, 4, 5, 6], [7, 8, 9, 10]]\n";
  const std::string nv = out("nvfp4_calib");
  const test::CliResult c = test::run_k3("quantize --from " + src_ + " --family modelopt-nvfp4 --calib " + calib + " --threads 2 --out " + nv);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("modelopt-nvfp4, calibrated on 2 sequences"), std::string::npos) << c.out;
  EXPECT_NE(c.err.find("calibrating: sequence 2/2\n"), std::string::npos);
  EXPECT_TRUE(plan_checkpoint(nv).ok());
}

TEST_F(QuantizeCli, BadInputIsOneLineNamingWhatIsWrong) {
  const std::string o = root_ + "/never";
  expect_error("--from " + src_ + " --family gguf --recipe q4_k_m --out " + src_, src_ + ": field '--out': exists and is not empty", "");
  // --out is its input: refused the same way (never overwritten).
  const std::string quantized = out("fp8");
  ASSERT_EQ(test::run_k3("quantize --from " + src_ + " --family fp8-block --out " + quantized).code, 0);
  expect_error("--from " + quantized + " --family gguf --out " + o, quantized + ": is a fp8-block checkpoint; quantizing needs a dense float one", o);
  const std::string gguf = out("gguf_src");
  ASSERT_EQ(test::run_k3("quantize --from " + src_ + " --family gguf --out " + gguf).code, 0);
  expect_error("--from " + gguf + " --family bf16 --out " + o, gguf + ": is a gguf checkpoint", o);
  expect_error("--from " + root_ + "/missing --family bf16 --out " + o, root_ + "/missing: not a checkpoint directory", o);
  expect_error("--from " + src_ + " --family bf16 --recipe q4_k_m --out " + o,
               "field '--recipe': applies to the gguf and gguf-expert-pack families only, not bf16", o);
  expect_error("--from " + src_ + " --family fp8-block --calib x.json --out " + o, "field '--calib': calibrates static activation scales", o);

  // A checkpoint without config.json, with a tensor missing, with a shape the config does not imply.
  const std::string no_config = out("no_config");
  fs::copy(src_, no_config);
  fs::remove(no_config + "/config.json");
  expect_error("--from " + no_config + " --family bf16 --out " + o, no_config + "/config.json: missing config.json", o);
  const std::string missing = out("missing_tensor");
  fs::copy(src_, missing);
  {
    std::ifstream in(missing + "/model.safetensors.index.json");
    Json index = Json::parse(in);
    index["weight_map"].erase("language_model.model.layers.0.self_attn.q_proj.weight");
    std::ofstream(missing + "/model.safetensors.index.json") << index.dump();
  }
  expect_error("--from " + missing + " --family bf16 --out " + o, "model.layers.0.self_attn.q_proj.weight", o);
  const std::string shape = out("wrong_shape");
  fs::copy(src_, shape);
  {
    std::ifstream in(shape + "/config.json");
    Json config = Json::parse(in);
    config["text_config"]["intermediate_size"] = 768;
    std::ofstream(shape + "/config.json") << config.dump();
  }
  expect_error("--from " + shape + " --family bf16 --out " + o, "does not match parameter 'model.layers.0.mlp.", o);

  // Calibration files: unreadable, ids outside the vocabulary.
  expect_error("--from " + src_ + " --family modelopt-fp8 --calib " + root_ + "/nope.json --out " + o, root_ + "/nope.json: ", o);
  const std::string calib = root_ + "/bad_calib.json";
  std::ofstream(calib) << "[[1, 2], [3, 512]]";
  expect_error("--from " + src_ + " --family modelopt-fp8 --calib " + calib + " --out " + o,
               calib + ": field '[1][1]': 512 is out of range [0, 511]", o);
}

TEST_F(QuantizeCli, FlagValuesAreUsageErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"quantize --from x --out y", "--family is required"},
      {"quantize --from x --family nope --out y", "--family: unknown family 'nope'"},
      {"quantize --from x --family gguf --recipe q4_k_s --out y",
       "--recipe: unknown recipe 'q4_k_s' (expected one of default, q4_k_m, q2_k_experts)"},
      {"quantize --family gguf --out y", "--from is required"},
      {"quantize --bogus", "unknown option --bogus"},
  };
  for (const auto& [args, text] : cases) {
    const test::CliResult r = test::run_k3(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(text), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// An empty --out folder is replaced by the output; a file there is refused.
TEST_F(QuantizeCli, OutputFolderRules) {
  const std::string empty = out("empty_out");
  fs::create_directories(empty);
  ASSERT_EQ(test::run_k3("quantize --from " + src_ + " --family bf16 --out " + empty).code, 0);
  EXPECT_TRUE(fs::exists(empty + "/config.json"));
  const std::string file = root_ + "/a_file";
  std::ofstream(file) << "x";
  expect_error("--from " + src_ + " --family bf16 --out " + file, file + ": field '--out': exists and is not a directory", "");
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Values for a large synthetic checkpoint, cheap to make (the streaming test needs size, not realism).
class PatternSource final : public FloatSource {
 public:
  explicit PatternSource(const K3Config& c) : config_(c), params_(parameter_inventory(c)) {}
  const K3Config& config() const override { return config_; }
  const std::vector<ParamSpec>& params() const override { return params_; }
  std::vector<float> read(const ParamSpec& spec, int64_t expert) const override {
    const uint64_t n = expert < 0 ? spec.numel() : spec.shape[1] * spec.shape[2];
    std::vector<float> v(n);
    for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int64_t>((i * 2654435761u) % 2001) - 1000) * 1e-4f;
    return v;
  }

 private:
  K3Config config_;
  std::vector<ParamSpec> params_;
};

// Peak resident memory of `k3 args…` run as a child process, in bytes.
uint64_t peak_rss_of_k3(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string exe = K3_CLI_PATH;
  argv.push_back(exe.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

// Streaming: quantizing a ~500 MB checkpoint (the small Kimi-K3 with a 4096-token vocabulary, so
// that no tensor exceeds 8 MB) never holds more than a few of its tensors at once.
TEST_F(QuantizeCli, PeakMemoryIsAFewTensorsNotTheModel) {
  if (kSanitized) GTEST_SKIP() << "resident memory is not meaningful under the address sanitizer";
  Json doc = tiny_config_json(TinyArch::KimiK3, TinySize::Small);
  constexpr int64_t kVocab = 4096;
  for (Json* j : {&doc, &text_config_of(doc)}) {
    if (j != &doc) (*j)["vocab_size"] = kVocab;
    for (const auto& [key, id] : {std::pair{"bos_token_id", kVocab - 256}, {"eos_token_id", kVocab - 254}, {"pad_token_id", kVocab - 1}}) {
      if (j->contains(key)) (*j)[key] = id;
    }
  }
  const std::string src = out("large_src"), dst = out("large_fp8");
  const K3Config config = parse_k3_config(parse_json(doc.dump(), src + "/config.json"));
  run_write_plan(family::write_plan_dense(PatternSource(config), doc), src);
  const CheckpointSource source(src);
  uint64_t largest = 0;
  for (const Binding& b : source.plan().bindings) {
    for (const SourcePart& p : b.parts) {
      for (const SourceTensor& t : p.tensors) largest = std::max(largest, t.nbytes);
    }
  }
  const uint64_t total = source.stored_bytes();
  ASSERT_GT(total, uint64_t{400} << 20);
  ASSERT_LE(largest, uint64_t{8} << 20);
  // The same command on the ~3 MB tiny checkpoint is the baseline: what the process costs before
  // any checkpoint (its binary's resident pages, which include every GPU kernel image in a CUDA
  // build, the runtime's, and the pages the test process had when it forked the child).
  const uint64_t baseline = peak_rss_of_k3({"quantize", "--from", src_, "--family", "fp8-block", "--out", out("small_fp8")});
  const uint64_t peak = peak_rss_of_k3({"quantize", "--from", src, "--family", "fp8-block", "--out", dst});
  // Beyond the baseline: the allocator's retained heap (~20 MB) and per unit the source's mapped
  // bytes, their float32 copy and the output: a small multiple of the largest tensor.
  const uint64_t growth = peak > baseline ? peak - baseline : 0;
  EXPECT_LT(growth, (uint64_t{32} << 20) + 4 * largest)
      << "peak " << (peak >> 20) << " MiB (baseline " << (baseline >> 20) << " MiB) for a " << (total >> 20) << " MiB checkpoint";
  EXPECT_LT(growth, total / 4);
  EXPECT_TRUE(plan_checkpoint(dst).ok());
  fs::remove_all(src);
  fs::remove_all(dst);
}

}  // namespace
}  // namespace k3
