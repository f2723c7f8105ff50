// Hopper bulk copies (the TMA unit: cp.async.bulk, 1-D runs of bytes, and cp.async.bulk.tensor, 2-/3-D
// boxes of a tensor map; sm_90) global → shared completing on an mbarrier (.cu files only). One thread
// announces the bytes (arrive.expect_tx) and issues the copies; every consumer waits on the
// barrier's phase parity. The copies do not hold per-thread request slots, so one CTA per
// multiprocessor can keep far more bytes in flight than with 16-byte cp.async.
// Rules kept by the callers: addresses and sizes multiples of 16 bytes; a buffer is refilled only
// after a __syncthreads that follows its last read, or after its readers released it on an mbarrier;
// shared memory written by ordinary stores before a bulk copy writes it is fenced (fence_proxy_async)
// by the writing threads before that barrier.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace k3::cuda::bulk {

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// Initialise with `count` expected arrivals per phase; call from one thread, then fence_init() and
// __syncthreads().
__device__ __forceinline__ void init(uint64_t* bar, unsigned count = 1) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The single arrival of this phase, announcing `bytes` to come from bulk copies.
__device__ __forceinline__ void arrive_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// One arrival without bytes (a consumer releasing a buffer to its producer).
__device__ __forceinline__ void arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// bytes (multiple of 16) from global src to shared dst, counted against bar.
__device__ __forceinline__ void copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

// Starts fetching a tensor map (a __grid_constant__ kernel parameter) into the descriptor cache, so
// that the first copy_tile_2d does not wait for it.
__device__ __forceinline__ void prefetch_tensor_map(const void* tensor_map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(tensor_map)) : "memory");
}

// The box of a 2-D tensor map (tensor_map.h) at element coordinates (col, row) into shared dst (the
// map's swizzle applied; 1024-byte aligned for the 128-byte swizzle), counted against bar. Parts of the
// box outside the tensor arrive as zeros and count as bytes.
__device__ __forceinline__ void copy_tile_2d(void* dst, const void* tensor_map, int col, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_addr(dst)),
      "l"(tensor_map), "r"(col), "r"(row), "r"(smem_addr(bar))
      : "memory");
}

// The box of a 3-D tensor map at element coordinates (x, y, z) into shared dst (16-byte aligned).
__device__ __forceinline__ void copy_tile_3d(void* dst, const void* tensor_map, int x, int y, int z, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          smem_addr(dst)),
      "l"(tensor_map), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar))
      : "memory");
}

// Blocks until the barrier's phase with the given parity has completed. A phase that never completes
// (a byte count that does not match the copies) traps after ~4M polls instead of hanging the GPU.
__device__ __forceinline__ void wait(uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  unsigned polls = 0;
  do {
    if (++polls > (1u << 22)) __trap();
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

}  // namespace k3::cuda::bulk
