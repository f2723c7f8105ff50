// The LoadPlan: for every model parameter, which checkpoint tensors feed it, with which scheme
// and which load-time transforms. Computed from headers and configs only, before any weight
// byte is read; it is the single source of truth for binding weights and for `k3 check`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/file_digest.h"
#include "model/parameters.h"
#include "quant/plan/scheme.h"

namespace k3 {

// Capabilities a checkpoint family declares explicitly (never inferred from another flag).
struct FamilyCaps {
  bool quantized_latent_projections = false;  // routed_expert_{down,up}_proj may be quantized
  bool split_gguf_kv_b = false;               // MLA kv_b stored as GGUF k_b (Q4_0) + v_b (Q2_K)
  bool experts_from_pack = false;             // routed experts are slices of an ExpertPack file
};

// One stored tensor (or, for packs, one expert slice) that feeds a parameter.
struct SourceTensor {
  uint32_t file = 0;            // index into LoadPlan::files
  std::string name;             // tensor name inside that file
  std::string dtype;            // stored element type: "BF16", "F8_E4M3", "U8", "Q2_K", …
  std::vector<uint64_t> shape;  // outermost first (GGUF ne reversed)
  uint64_t offset = 0;          // absolute byte offset in the file
  uint64_t nbytes = 0;
};

// Load-time transforms, applied in order when the parameter is materialised.
enum class Transform : uint8_t {
  NarrowALog,         // A_log stored padded ([head_dim] or [1,1,H,1]): keep the first num_heads values
  ALogFromNegExp,     // GGUF ssm_a stores -exp(A_log): A_log = log(-v), v must be finite and < 0
  ProjFromResScore,   // GGUF *_res_score = norm ⊙ proj: proj = v[None, :]
  OnesFromResScore,   // … and the matching norm = 1
  SqueezeScale4D,     // a 4-D block scale [N/bn,1,K/bk,1] (ModelOpt) viewed as [N/bn,K/bk]
  DequantToBf16,      // tiny projection dequantized to BF16 at load (spec §2.4)
  SliceExpert,        // one expert of a 3-D bank [E, N, row_bytes] stored as one tensor
};
const char* transform_name(Transform t);

// A named group of source tensors: "weight", "weight_scale", "weight_scale_2", "input_scale",
// "weight_offset", "weight_scale_second", "k_b", "v_b", … Expert banks hold one tensor per expert.
struct SourcePart {
  std::string role;
  std::vector<SourceTensor> tensors;
};

struct Binding {
  std::string param;            // logical parameter name (see model/parameters.h)
  Scheme scheme;
  std::vector<SourcePart> parts;
  std::vector<Transform> transforms;

  const SourcePart* part(const std::string& role) const;
  // The source of `role` for expert `expert` of a bank (or the only one; expert −1 = not a bank).
  // Throws k3::Error naming the parameter and role when the binding has none.
  const SourceTensor& source(const char* role, int64_t expert = -1) const;
  uint64_t stored_bytes() const;
  // Only layout transforms (no value changes): kernels may read the stored bytes in place.
  bool layout_only() const;
};

struct Problem {
  Where where;
  std::string message;
  std::string text() const { return format_error(where, message); }
};

struct LoadPlan {
  std::string family;                 // "bf16", "modelopt-mixed", "gguf-expert-pack", …
  FamilyCaps caps;
  std::vector<std::string> files;     // every file the plan reads (shards, packs, configs excluded)
  std::vector<ParamSpec> params;      // the inventory the plan binds
  std::vector<Binding> bindings;      // bindings[i] binds params[i]
  std::vector<std::string> skipped;   // checkpoint tensors deliberately not loaded (e.g. vision tower)
  std::vector<Problem> problems;      // every problem found; a plan with problems must not load
  std::vector<FileDigest> digests;    // whole-file sha256 to check before the payload is used (packs)

  bool ok() const { return problems.empty(); }
  // Index of a parameter in params/bindings, or -1.
  int64_t index_of(const std::string& param) const;
};

}  // namespace k3
