// Device helpers of the MLA kernels (mla_*.cu only): cp.async with zero fill, bf16 packing and the
// mma.sync m16n8k16 bf16 → fp32 tensor-core instruction with the PTX ISA fragment layouts
// (g = lane / 4, t = lane % 4):
//   A 16×16 (row-major): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B 16×8  (k × n):     b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C 16×8:              c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
// A pair of values goes into one 32-bit register with the lower index in the low half.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace k3::cuda::mla_detail {

using bf16 = __nv_bfloat16;

// 16 bytes global → shared; src_bytes = 0 writes zeros (src must still be a valid address).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes = 16) {
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ldmatrix (shared → fragments, 8×8 b16 matrices; lanes 8i…8i+7 address the rows of matrix i).
// Without .trans a lane receives M[g][2t..2t+1] of each matrix, with .trans M[2t..2t+1][g].
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x2(uint32_t& r0, uint32_t& r1, const bf16* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const bf16* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
// A fragment (rows r0…r0+15, columns k0…k0+15) of a row-major tile: matrices (r0,k0), (r0+8,k0),
// (r0,k0+8), (r0+8,k0+8) are a0…a3. Rows must start on 16-byte boundaries.
__device__ __forceinline__ void load_a_ldsm(uint32_t (&a)[4], const bf16* base, int ld, int r0, int k0, int lane) {
  ldsm_x4(a, base + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + k0 + (lane >> 4) * 8);
}
// B fragments of the n-tiles n0 and n0+8 over k0…k0+15, from a tile stored [n][k] (keys by row):
// b = {b0(n0), b1(n0), b0(n0+8), b1(n0+8)}.
__device__ __forceinline__ void load_b_nk_ldsm(uint32_t (&b)[4], const bf16* base, int ld, int n0, int k0, int lane) {
  ldsm_x4(b, base + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + k0 + ((lane >> 3) & 1) * 8);
}
// The same for the single n-tile n0: b0, b1.
__device__ __forceinline__ void load_b_nk_ldsm1(uint32_t& b0, uint32_t& b1, const bf16* base, int ld, int n0, int k0,
                                                int lane) {
  ldsm_x2(b0, b1, base + (n0 + (lane & 7)) * ld + k0 + ((lane >> 3) & 1) * 8);
}
// B fragments of the n-tiles n0 and n0+8 over k0…k0+15, from a tile stored [k][n] (values by row):
// b = {b0(n0), b1(n0), b0(n0+8), b1(n0+8)} through the transposing load.
__device__ __forceinline__ void load_b_kn_ldsm(uint32_t (&b)[4], const bf16* base, int ld, int k0, int n0, int lane) {
  ldsm_x4_trans(b, base + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8);
}

__device__ __forceinline__ void store_val(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_val(bf16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ float load_val(const float* p) { return *p; }
__device__ __forceinline__ float load_val(const bf16* p) { return __bfloat162float(*p); }

}  // namespace k3::cuda::mla_detail
