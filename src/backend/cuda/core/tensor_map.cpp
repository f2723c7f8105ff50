// TMA tensor maps (tensor_map.h).
#include "backend/cuda/core/tensor_map.h"

#include <string>

#include "backend/cuda/core/check.h"

namespace k3::cuda {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || p == nullptr) {
      (void)cudaGetLastError();
      throw Error("tensor maps: the driver has no cuTensorMapEncodeTiled");
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

}  // namespace

CUtensorMap tensor_map_bf16_sw128(const DeviceTensor& t, int box_rows, int box_cols, const char* what) {
  if (t.dtype != DType::kBF16 || box_cols * 2 != 128 || box_rows <= 0 || box_rows > 256 ||
      reinterpret_cast<uintptr_t>(t.data) % 16 != 0 || (t.ld * 2) % 16 != 0) {
    throw Error(std::string(what) + ": a 128-byte-swizzled tensor map needs 16-byte aligned bf16 rows and 64-column boxes, got " +
                t.describe());
  }
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(t.cols), static_cast<cuuint64_t>(t.rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(t.ld * 2)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, t.data, dims, strides, box, elem_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw Error(std::string(what) + ": cuTensorMapEncodeTiled failed (" + std::to_string(static_cast<int>(r)) + ") for " +
                t.describe());
  }
  return map;
}

CUtensorMap tensor_map_u32_3d(const void* base, const int64_t (&dims)[3], const int64_t (&stride_bytes)[2],
                              const int (&box)[3], const char* what) {
  CUtensorMap map{};
  const cuuint64_t gd[3] = {static_cast<cuuint64_t>(dims[0]), static_cast<cuuint64_t>(dims[1]),
                            static_cast<cuuint64_t>(dims[2])};
  const cuuint64_t gs[2] = {static_cast<cuuint64_t>(stride_bytes[0]), static_cast<cuuint64_t>(stride_bytes[1])};
  const cuuint32_t bd[3] = {static_cast<cuuint32_t>(box[0]), static_cast<cuuint32_t>(box[1]),
                            static_cast<cuuint32_t>(box[2])};
  const cuuint32_t es[3] = {1, 1, 1};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 3, const_cast<void*>(base), gd, gs, bd, es,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw Error(std::string(what) + ": cuTensorMapEncodeTiled failed (" + std::to_string(static_cast<int>(r)) +
                ") for a [" + std::to_string(dims[2]) + ", " + std::to_string(dims[1]) + ", " + std::to_string(dims[0]) +
                "] word array");
  }
  return map;
}

}  // namespace k3::cuda
