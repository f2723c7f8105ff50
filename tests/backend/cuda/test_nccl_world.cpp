// GPU ranks over NCCL (parallel/nccl/nccl_world.h), on the GPUs of this process: every collective
// against its serial definition with one rank per GPU (world size 1 on a one-GPU machine), the CUDA
// executor's exchanges on device buffers against their host path, the CPU backend's tensor- and
// expert-parallel path over an NCCL world of one rank giving the one-rank logits bit for bit, and,
// with two GPUs or more, a rank that stops calling failing the others within the timeout. Skipped
// without a GPU or in builds without NCCL.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#ifdef K3_HAVE_NCCL
#include <cmath>
#include <cstring>

#include "backend/cuda/core/upload.h"
#include "backend/cuda/executor/rank_exchange.h"
#include "core/numeric.h"
#include "model/engine_test_util.h"
#include "parallel/collective_checks.h"
#include "parallel/sharding.h"
#include "parallel/nccl/nccl_world.h"
#include "parallel/thread_world.h"

namespace k3 {
namespace {

int gpu_count() { return static_cast<int>(cuda::list_devices().size()); }

TEST(NcclWorld, CollectivesMatchTheirSerialDefinitionsOnEveryGpu) {
  K3_REQUIRE_GPU();
  for (int n = 1; n <= gpu_count(); n *= 2) {
    ThreadWorld bootstrap(n);
    bootstrap.run([&](Communicator& c) {
      NcclWorld nccl(c, c.rank());
      for (const std::string& f : test::collective_failures(nccl)) ADD_FAILURE() << n << " GPUs: " << f;
    });
  }
}

// The CUDA executor's exchanges (rank_exchange.h) over the NCCL world take their device path, over the
// bootstrap world their host path: the same bits, and the gathered heads where each rank put them.
// Heads 2n + 1 over n ranks (rank 0 one more), each rank's columns a slice of a wider tensor.
TEST(NcclWorld, TheCudaRanksExchangesOnDeviceEqualTheHostPath) {
  K3_REQUIRE_GPU();
  for (int n = 1; n <= gpu_count(); n *= 2) {
    ThreadWorld bootstrap(n);
    bootstrap.run([&](Communicator& c) {
      NcclWorld nccl(c, c.rank());
      cuda::Arena arena(c.rank(), size_t{64} << 20);
      const cudaStream_t stream = nullptr;
      const int64_t rows = 5, width = 24;
      std::vector<float> part(static_cast<size_t>(rows * width));
      for (size_t i = 0; i < part.size(); ++i) part[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(c.rank())) * static_cast<float>(1 + i % 7);
      const cuda::DeviceTensor on_device = cuda::upload_f32(arena, part.data(), rows, width, cuda::DType::kF32, "routed, device path");
      const cuda::DeviceTensor on_host = cuda::upload_f32(arena, part.data(), rows, width, cuda::DType::kF32, "routed, host path");
      cuda::RoutedSumAcrossRanks(nccl).all_reduce(on_device, arena, stream);
      cuda::RoutedSumAcrossRanks(c).all_reduce(on_host, arena, stream);
      EXPECT_EQ(cuda::download_bytes(on_device), cuda::download_bytes(on_host)) << n << " ranks";

      const int64_t heads = 2 * n + 1, unit = 8;
      // Exact in bf16 (7 fraction bits), distinct per rank and row by the exponent, per column by the fraction.
      const auto value = [](int rank, int64_t row, int64_t col) {
        return std::ldexp(1.0f + static_cast<float>(col % 128) / 128.0f, static_cast<int>(row + 6 * rank));
      };
      const IndexRange mine = split_range(heads, n, c.rank());
      std::vector<float> wide(static_cast<size_t>(rows * (mine.count * unit + unit)));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < mine.count * unit + unit; ++j) wide[static_cast<size_t>(r * (mine.count * unit + unit) + j)] = value(c.rank(), r, j);
      }
      const cuda::DeviceTensor sent =
          cuda::upload_f32(arena, wide.data(), rows, mine.count * unit + unit, cuda::DType::kBF16, "heads").col_slice(0, mine.count * unit);
      const cuda::DeviceTensor gathered_device = arena.alloc_tensor(cuda::DType::kBF16, rows, heads * unit, "gathered, device path");
      const cuda::DeviceTensor gathered_host = arena.alloc_tensor(cuda::DType::kBF16, rows, heads * unit, "gathered, host path");
      cuda::HeadsAcrossRanks(nccl).all_gather(sent, gathered_device, unit, arena, stream);
      cuda::HeadsAcrossRanks(c).all_gather(sent, gathered_host, unit, arena, stream);
      const std::vector<uint8_t> got = cuda::download_bytes(gathered_device);
      EXPECT_EQ(got, cuda::download_bytes(gathered_host)) << n << " ranks";
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t col = 0; col < heads * unit; ++col) {
          const int owner = static_cast<int>(split_owner(col / unit, heads, n));
          const int64_t local = col - split_range(heads, n, owner).first * unit;
          uint16_t bits = 0;
          std::memcpy(&bits, &got[static_cast<size_t>(r * heads * unit + col) * 2], 2);
          ASSERT_EQ(decode_bf16(bits), value(owner, r, local)) << n << " ranks, row " << r << ", column " << col;
        }
      }
    });
  }
}

// Logits of a prefill of two sequences and two batched decode steps.
std::vector<std::vector<float>> logits_of(const std::string& dir, ParallelRanks ranks) {
  EngineOptions o;
  o.threads = 2;
  o.max_sequences = 4;
  o.max_context = 256;
  o.ranks = ranks;
  Engine e(dir, o);
  const int64_t vocab = e.config().vocab_size;
  const int64_t a = e.new_sequence(), b = e.new_sequence();
  std::vector<std::vector<float>> out;
  std::vector<StepResult> step = e.step({{a, test::test_prompt(19, vocab, 1), true}, {b, test::test_prompt(6, vocab, 2), true}});
  for (int i = 0; i < 3; ++i) {
    for (const StepResult& s : step) out.push_back(s.logits);
    if (i < 2) step = e.step({{a, {(i * 5 + 1) % vocab}}, {b, {(i * 3 + 2) % vocab}}});
  }
  return out;
}

TEST(NcclWorld, TheParallelPathOverOneGpuRankGivesTheOneRankLogits) {
  K3_REQUIRE_GPU();
  for (TinyArch arch : {TinyArch::KimiK3, TinyArch::KimiLinear}) {
    const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, arch, 41);
    const auto alone = logits_of(tiny.dir, {});
    ThreadWorld bootstrap(1);
    bootstrap.run([&](Communicator& c) {
      NcclWorld nccl(c, 0);
      const auto got = logits_of(tiny.dir, {&nccl, &nccl});
      ASSERT_EQ(got.size(), alone.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(std::memcmp(got[i].data(), alone[i].data(), alone[i].size() * sizeof(float)), 0) << "output " << i;
      }
    });
  }
}

TEST(NcclWorld, ARankThatStopsCallingFailsTheOthersWithinTheTimeout) {
  K3_REQUIRE_GPU();
  if (gpu_count() < 2) GTEST_SKIP() << "needs two GPUs";
  ThreadWorld bootstrap(2);
  std::string error;
  bootstrap.run([&](Communicator& c) {
    NcclWorld nccl(c, c.rank(), std::chrono::milliseconds(1000));
    if (c.rank() == 1) return;  // stops calling
    std::vector<float> v(8, 1.0f);
    try {
      nccl.all_reduce(v, ReduceOp::kSum);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  EXPECT_NE(error.find("rank 0 waited 1000 ms for the other ranks in all_gather"), std::string::npos) << error;
}

}  // namespace
}  // namespace k3
#else
TEST(NcclWorld, NeedsNccl) { GTEST_SKIP() << "built without NCCL"; }
#endif
