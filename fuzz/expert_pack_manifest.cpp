// libFuzzer target for the ExpertPack manifest: each input replaces expert_pack_manifest.json in a
// tiny kimi-k3 gguf-expert-pack checkpoint (written once, under $TMPDIR) and the whole plan is
// computed. Any k3::Error is an accepted rejection; every other exception, crash or sanitizer
// report is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "model/tiny_config.h"
#include "quant/families/expert_pack.h"
#include "quant/families/family.h"
#include "quant/families/master.h"

namespace {

std::string g_dir;

void write_checkpoint() {
  const char* tmp = std::getenv("TMPDIR");
  g_dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/k3_fuzz_manifest_" + std::to_string(::getpid());
  std::filesystem::remove_all(g_dir);
  const k3::Json config_doc = k3::tiny_config_json(k3::TinyArch::KimiK3, k3::TinySize::Tiny);
  const k3::K3Config config = k3::parse_k3_config(k3::parse_json(config_doc.dump(), g_dir + "/config.json"));
  k3::write_family_checkpoint(k3::FamilyId::GgufExpertPack, k3::make_master(config, 1), config_doc, g_dir);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  write_checkpoint();
  std::atexit([] { std::filesystem::remove_all(g_dir); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string manifest = g_dir + "/" + k3::kExpertPackManifestName;
  std::FILE* f = std::fopen(manifest.c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    (void)k3::plan_checkpoint(g_dir);
  } catch (const k3::Error&) {
  }
  return 0;
}
