// The KDA chunked prefill's inter-chunk pass variants (kda.h), for the kernels, the tests and the
// benchmarks; everything else calls kda_prefill without them. Host-only header.
#pragma once

#include "backend/cuda/attention/kda/kda.h"

namespace k3::cuda {

// State columns per CTA of the sequential pass (kAuto: 16 when sequences·heads·8 CTAs fit one wave
// of the SMs, else 32) and the way the chunk tiles reach shared memory (kAuto: 16-byte cp.async with
// 16 columns, Hopper bulk copies with 32). docs/decisions/attention-kernel-defaults.md.
enum class KdaLoads { kAuto, kCpAsync, kBulk };
enum class KdaInterCols { kAuto, k16, k32 };

// kda_prefill with the inter pass's variant forced (kAuto: the choice of kda_prefill).
void kda_prefill(const KdaBatch& batch, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                 const DeviceTensor& f, const DeviceTensor& b, const KdaGate& gate, const KdaStatePool& pool,
                 void* workspace, const DeviceTensor& o, cudaStream_t stream, KdaLoads loads, KdaInterCols cols);

}  // namespace k3::cuda
