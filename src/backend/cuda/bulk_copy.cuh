// Hopper bulk copies (the TMA unit's 1-D form, cp.async.bulk, sm_90) global → shared completing on
// an mbarrier, for kernels whose tiles are contiguous runs of bytes (.cu files only). One thread
// announces the bytes (arrive.expect_tx) and issues the copies; every consumer waits on the
// barrier's phase parity. The copies do not hold per-thread request slots, so one CTA per
// multiprocessor can keep far more bytes in flight than with 16-byte cp.async.
// Rules kept by the callers: addresses and sizes multiples of 16 bytes; a buffer is refilled only
// after a __syncthreads that follows its last read; shared memory written by ordinary stores before
// a bulk copy writes it is fenced (fence_proxy_async) by the writing threads before that barrier.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace k3::cuda::bulk {

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// Initialise with one expected arrival; call from one thread, then fence_init() and __syncthreads().
__device__ __forceinline__ void init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(bar)));
}
__device__ __forceinline__ void fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The single arrival of this phase, announcing `bytes` to come from bulk copies.
__device__ __forceinline__ void arrive_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// bytes (multiple of 16) from global src to shared dst, counted against bar.
__device__ __forceinline__ void copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
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
