// The family writers run over a dense checkpoint (k3 quantize's source) instead of make-tiny's master:
// byte for byte the same checkpoint of every family, and the GGUF recipes' types.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "family_test_util.h"
#include "io/gguf.h"
#include "quant/families/family_writer.h"
#include "quant/families/gguf_names.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every file of `a` is in `b` with the same bytes, and the other way round.
void expect_same_files(const std::string& a, const std::string& b) {
  size_t count = 0;
  for (const auto& e : fs::directory_iterator(a)) {
    const fs::path other = fs::path(b) / e.path().filename();
    ASSERT_TRUE(fs::exists(other)) << other;
    EXPECT_TRUE(slurp(e.path()) == slurp(other)) << e.path().filename() << " differs";
    ++count;
  }
  EXPECT_EQ(count, static_cast<size_t>(std::distance(fs::directory_iterator(b), fs::directory_iterator{})));
}

struct DenseSource {
  std::string dir;
  Json doc;
  MasterWeights master;
};

// The master written as an exact (F32) dense checkpoint: what k3 quantize reads.
DenseSource f32_checkpoint(TinyArch arch, uint64_t seed) {
  const std::string dir = ::testing::TempDir() + "/k3_quantize_src_" + (arch == TinyArch::KimiK3 ? "k3" : "linear");
  fs::remove_all(dir);
  Json doc = tiny_config_json(arch, TinySize::Tiny);
  const K3Config config = parse_k3_config(parse_json(doc.dump(), dir + "/config.json"));
  MasterWeights master = make_master(config, seed);
  run_write_plan(family::write_plan_dense(MasterSource(master), doc, Dtype::F32), dir);
  return {dir, doc, std::move(master)};
}

// k3 make-tiny is "master → family writer"; k3 quantize is "dense checkpoint → the same writer": from
// an exact checkpoint of the master, every family's output is byte-identical to make-tiny's (so its
// logits are too).
TEST(Quantize, FromAnExactCheckpointEveryFamilyIsMakeTinysBytes) {
  for (TinyArch arch : {TinyArch::KimiK3, TinyArch::KimiLinear}) {
    const DenseSource src = f32_checkpoint(arch, 7);
    const CheckpointSource source(src.dir);
    for (FamilyId family : all_families()) {
      if (family == FamilyId::GgufExpertPack && arch == TinyArch::KimiLinear) continue;  // a Kimi-K3 format
      SCOPED_TRACE(std::string(family_name(family)) + (arch == TinyArch::KimiK3 ? " kimi-k3" : " kimi-linear"));
      const std::string made = ::testing::TempDir() + "/k3_quantize_made", quantized = ::testing::TempDir() + "/k3_quantize_out";
      fs::remove_all(made);
      fs::remove_all(quantized);
      write_family_checkpoint(family, src.master, src.doc, made);
      const WriteSummary s = write_family(family, source, source.checkpoint().config_json->value(), quantized);
      EXPECT_GT(s.units, 0u);
      expect_same_files(made, quantized);
      const LoadPlan plan = test::plan_headers_only(quantized);
      EXPECT_TRUE(plan.ok()) << test::problems_text(plan);
    }
  }
}

// A checkpoint of another family, or a GGUF, is not a quantizer's source.
TEST(Quantize, SourceMustBeADenseFloatCheckpoint) {
  const auto fp8 = test::make_tiny(FamilyId::Fp8Block, TinyArch::KimiK3);
  try {
    CheckpointSource source(fp8.dir);
    FAIL() << "a fp8-block checkpoint was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), fp8.dir + ": is a fp8-block checkpoint; quantizing needs a dense float one (BF16, F16 or F32 safetensors)");
  }
  const auto gguf = test::make_tiny(FamilyId::Gguf, TinyArch::KimiK3);
  EXPECT_THROW(CheckpointSource{gguf.dir}, Error);
}

GgmlType type_of(const GgufModel& m, const std::string& name) {
  const GgufTensorInfo* t = m.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? t->type : GgmlType::F32;
}

// q4_k_m: Q4_K, with Q6_K for lm_head and, in the layers llama.cpp's use_more_bits picks (2 and 5 of
// 6: i ≥ 7n/8 or (i − n/8) % 3 == 2), the attn_v-like (KDA v_proj, MLA kv_b) and ffn_down-like
// tensors (dense, shared and routed down); rows of 128 fall back to Q5_0; the embedding stays Q4_K;
// norms, router and derived tensors F32; the KDA gate projections BF16/F16 as in every recipe.
TEST(Quantize, Q4KMRecipeTypes) {
  const auto t = test::make_tiny(FamilyId::Bf16, TinyArch::KimiK3);
  const CheckpointSource source(t.dir);
  const std::string out = ::testing::TempDir() + "/k3_quantize_q4km";
  fs::remove_all(out);
  QuantizeOptions options;
  options.gguf_recipe = GgufRecipe::kQ4KM;
  write_family(FamilyId::Gguf, source, t.config_doc, out, options);
  const GgufModel m = GgufModel::open(out + "/model-00001-of-00002.gguf");
  const K3Config& c = source.config();
  ASSERT_EQ(c.num_layers, 6);
  EXPECT_EQ(type_of(m, "token_embd.weight"), GgmlType::Q4_K);
  EXPECT_EQ(type_of(m, "output.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of(m, "output_norm.weight"), GgmlType::F32);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const bool more = l == 2 || l == 5;
    const GgmlType big = more ? GgmlType::Q6_K : GgmlType::Q4_K;
    EXPECT_EQ(type_of(m, gguf::blk(l, c.is_kda(l) ? "attn_v.weight" : "attn_kv_b.weight")), big);
    EXPECT_EQ(type_of(m, gguf::blk(l, "attn_output.weight")), GgmlType::Q5_0);  // K = 128
    EXPECT_EQ(type_of(m, gguf::blk(l, "attn_norm.weight")), GgmlType::F32);
    if (c.is_kda(l)) {
      EXPECT_EQ(type_of(m, gguf::blk(l, "attn_q.weight")), GgmlType::Q4_K);
      EXPECT_EQ(type_of(m, gguf::blk(l, "ssm_f_a.weight")), GgmlType::BF16);
      EXPECT_EQ(type_of(m, gguf::blk(l, "ssm_beta.weight")), GgmlType::F16);
    } else {
      EXPECT_EQ(type_of(m, gguf::blk(l, "attn_q_a.weight")), GgmlType::Q4_K);
    }
    if (c.is_moe(l)) {
      EXPECT_EQ(type_of(m, gguf::blk(l, "ffn_down_exps.weight")), big);
      EXPECT_EQ(type_of(m, gguf::blk(l, "ffn_down_shexp.weight")), big);
      EXPECT_EQ(type_of(m, gguf::blk(l, "ffn_gate_exps.weight")), GgmlType::Q4_K);
      EXPECT_EQ(type_of(m, gguf::blk(l, "ffn_up_shexp.weight")), GgmlType::Q4_K);
      EXPECT_EQ(type_of(m, gguf::blk(l, "ffn_routed_down.weight")), GgmlType::Q4_K);  // the latent projection is no ffn_down
      EXPECT_EQ(type_of(m, gguf::blk(l, "ffn_gate_inp.weight")), GgmlType::F32);
    } else {
      EXPECT_EQ(type_of(m, gguf::blk(l, "ffn_down.weight")), big);
      EXPECT_EQ(type_of(m, gguf::blk(l, "ffn_gate.weight")), GgmlType::Q4_K);
    }
  }
  EXPECT_TRUE(test::plan_headers_only(out).ok());
}

// q2_k_experts: routed experts Q2_K (gate, up) / Q3_K (down), everything else as the default.
TEST(Quantize, Q2KExpertsRecipeTypes) {
  const auto t = test::make_tiny(FamilyId::Bf16, TinyArch::KimiK3);
  const CheckpointSource source(t.dir);
  const std::string out = ::testing::TempDir() + "/k3_quantize_q2k", ref = ::testing::TempDir() + "/k3_quantize_q2k_ref";
  fs::remove_all(out);
  fs::remove_all(ref);
  QuantizeOptions options;
  options.gguf_recipe = GgufRecipe::kQ2KExperts;
  write_family(FamilyId::Gguf, source, t.config_doc, out, options);
  write_family(FamilyId::Gguf, source, t.config_doc, ref);
  const GgufModel m = GgufModel::open(out + "/model-00001-of-00002.gguf");
  const GgufModel d = GgufModel::open(ref + "/model-00001-of-00002.gguf");
  ASSERT_EQ(m.tensors().size(), d.tensors().size());
  for (size_t i = 0; i < m.tensors().size(); ++i) {
    const std::string& name = m.tensors()[i].name;
    const bool gate_up = name.find("ffn_gate_exps") != std::string::npos || name.find("ffn_up_exps") != std::string::npos;
    const bool down = name.find("ffn_down_exps") != std::string::npos;
    const GgmlType want = gate_up ? GgmlType::Q2_K : down ? GgmlType::Q3_K : d.tensors()[i].type;
    EXPECT_EQ(m.tensors()[i].type, want) << name;
  }
  EXPECT_TRUE(test::plan_headers_only(out).ok());
}

TEST(Quantize, RecipeNames) {
  EXPECT_EQ(gguf_recipe_names(), (std::vector<std::string>{"default", "q4_k_m", "q2_k_experts"}));
  EXPECT_EQ(parse_gguf_recipe("q4_k_m"), GgufRecipe::kQ4KM);
  try {
    parse_gguf_recipe("q4_k_s");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "field '--recipe': unknown recipe 'q4_k_s' (expected one of default, q4_k_m, q2_k_experts)");
  }
}

}  // namespace
}  // namespace k3
