// Blas: the cuBLASLt handle, the workspace, the plan cache and the one place that builds matmul
// descriptors for every GEMM kind (see gemm.h for the row-major -> TN mapping).
#include <cublasLt.h>

#include <string>

#include "backend/cuda/core/check.h"
#include "backend/cuda/gemm/gemm.h"

namespace k3::cuda {

struct Blas::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

namespace {

cublasLtHandle_t lt(void* h) { return static_cast<cublasLtHandle_t>(h); }

uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a >>= 1;
  return a;
}

const char* kind_name(Blas::Kind k) {
  switch (k) {
    case Blas::Kind::kBf16: return "bf16";
    case Blas::Kind::kFp8Tensor: return "fp8 per-tensor";
    case Blas::Kind::kFp8Block: return "fp8 1x128/128x128 block-scaled";
  }
  return "?";
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  K3_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

}  // namespace

Blas::Blas(Arena& arena, size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  cublasLtHandle_t h = nullptr;
  K3_CUBLAS_CHECK(cublasLtCreate(&h));
  handle_ = h;
  try {
    if (workspace_bytes_ > 0) workspace_ = arena.alloc(workspace_bytes_, "cuBLASLt workspace");
  } catch (...) {
    cublasLtDestroy(h);
    throw;
  }
}

Blas::~Blas() {
  plans_.clear();
  if (handle_) cublasLtDestroy(lt(handle_));
}

Blas::Plan& Blas::plan(const Key& key, const float* x_scale, const float* w_scale) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const auto [kind, out, M, N, K, ldx, ldw, ldy, ax, aw, ay] = key;
  auto p = std::make_unique<Plan>();
  const bool fp8 = kind != Kind::kBf16;
  const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  K3_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  if (kind == Kind::kFp8Block) {
    // A is the weight (128×128 blocks), B the activation (1×128 along K).
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F));
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
  }
  if (fp8) {
    // The heuristic refuses block scale modes without scale pointers (CUBLAS_STATUS_INVALID_VALUE):
    // set this call's; run() sets each later call's own.
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scale));
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scale));
  }
  K3_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, in_type, static_cast<uint64_t>(K), static_cast<uint64_t>(N), ldw));
  K3_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, in_type, static_cast<uint64_t>(K), static_cast<uint64_t>(M), ldx));
  K3_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, out == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF, static_cast<uint64_t>(N), static_cast<uint64_t>(M), ldy));

  cublasLtMatmulPreference_t pref = nullptr;
  K3_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, auto value) {
    if (status == CUBLAS_STATUS_SUCCESS) status = cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value));
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace_bytes_));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, aw);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, ax);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, ay);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, ay);
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(lt(handle_), p->desc, p->a, p->b, p->d, p->d, pref, 1, &result, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  const std::string shape = std::string(kind_name(kind)) + " GEMM M=" + std::to_string(M) + " N=" + std::to_string(N) +
                            " K=" + std::to_string(K);
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error("cuBLASLt heuristic failed for " + shape + ": " + cublas_status_name(status));
  }
  if (found == 0) throw Error("cuBLASLt has no algorithm for " + shape + " on this device");
  p->algo = result.algo;
  return *plans_.emplace(key, std::move(p)).first->second;
}

void Blas::run(Kind kind, const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& y, const float* x_scale,
               const float* w_scale, cudaStream_t stream) {
  const int64_t M = x.rows, N = w.rows, K = x.cols;
  expect_shape(w, N, K, "GEMM weight (must be [N, K] with K the input width)");
  expect_shape(y, M, N, "GEMM output");
  if (kind != Kind::kBf16 || y.dtype != DType::kF32) expect_dtype(y, DType::kBF16, "GEMM output");
  if (M == 0 || N == 0) return;
  const Key key{kind, y.dtype, M, N, K, x.ld, w.ld, y.ld, alignment(x.data), alignment(w.data), alignment(y.data)};
  Plan& p = plan(key, x_scale, w_scale);
  if (kind != Kind::kBf16) {
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scale));
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scale));
  }
  const float alpha = 1.0f, beta = 0.0f;
  K3_CUBLAS_CHECK(cublasLtMatmul(lt(handle_), p.desc, &alpha, w.data, p.a, x.data, p.b, &beta, y.data, p.d, y.data, p.d,
                                 &p.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace k3::cuda
