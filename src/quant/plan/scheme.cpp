#include "quant/plan/scheme.h"

namespace k3 {

const char* scheme_kind_name(SchemeKind kind) {
  switch (kind) {
    case SchemeKind::Dense: return "DENSE";
    case SchemeKind::Fp8Tensor: return "FP8_TENSOR";
    case SchemeKind::Fp8Block: return "FP8_BLOCK";
    case SchemeKind::Nvfp4: return "NVFP4";
    case SchemeKind::Mxfp4: return "MXFP4";
    case SchemeKind::W4A8: return "W4A8";
    case SchemeKind::W8A8: return "W8A8";
    case SchemeKind::Ggml: return "GGUF";
    case SchemeKind::GgmlSplitKvB: return "GGUF_SPLIT_KV_B";
  }
  return "?";
}

std::string Scheme::name() const {
  switch (kind) {
    case SchemeKind::Dense: return storage;
    case SchemeKind::Fp8Tensor: return "FP8_TENSOR";
    case SchemeKind::Fp8Block: return "FP8_BLOCK" + std::to_string(block_n) + "x" + std::to_string(block_k);
    case SchemeKind::Nvfp4: return "NVFP4/g" + std::to_string(group_size);
    case SchemeKind::Mxfp4: return "MXFP4/g" + std::to_string(group_size);
    case SchemeKind::W4A8:
      return std::string("W4A8") + (group_size ? "/g" + std::to_string(group_size) : "/channel") +
             (int4_packed_along_n ? "/packed" : "/unpacked");
    case SchemeKind::W8A8: return static_activation ? "W8A8_STATIC" : "W8A8_DYNAMIC";
    case SchemeKind::Ggml: return "GGUF:" + storage;
    case SchemeKind::GgmlSplitKvB: return "GGUF_SPLIT_KV_B(Q4_0,Q2_K)";
  }
  return "?";
}

}  // namespace k3
