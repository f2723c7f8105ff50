// Device runtime: error checks, the arena, streams, events, graphs, uploads.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/stream.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"

namespace k3::cuda {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// These two need no device: the status is given, only the message is built.
TEST(CudaCheck, RuntimeErrorNamesCallFileAndLine) {
  const std::string m = message_of([] { K3_CUDA_CHECK(cudaErrorInvalidValue); });
  EXPECT_NE(m.find("cudaErrorInvalidValue"), std::string::npos) << m;
  EXPECT_NE(m.find("in cudaErrorInvalidValue at "), std::string::npos) << m;
  EXPECT_NE(m.find("test_runtime.cpp:"), std::string::npos) << m;
}

TEST(CudaCheck, CublasErrorNamesStatus) {
  const std::string m = message_of([] { K3_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED); });
  EXPECT_NE(m.find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos) << m;
  EXPECT_NE(m.find("test_runtime.cpp:"), std::string::npos) << m;
}

TEST(CudaArena, ParseSize) {
  EXPECT_EQ(parse_arena_size("1024", 0), 1024u);
  EXPECT_EQ(parse_arena_size("2K", 0), 2048u);
  EXPECT_EQ(parse_arena_size("1.5G", 0), size_t{3} << 29);
  EXPECT_EQ(parse_arena_size("512M", 0), size_t{512} << 20);
  EXPECT_EQ(parse_arena_size("50%", 1000), 500u);
  for (const char* bad : {"", "G", "-1G", "12T", "101%", "1e400", "nanG"}) {
    const std::string m = message_of([&] { parse_arena_size(bad, 1000, "--gpu-memory"); });
    EXPECT_NE(m.find("--gpu-memory"), std::string::npos) << bad;
  }
}

TEST(CudaCheck, FailingRuntimeCallThrows) {
  K3_REQUIRE_GPU();
  const std::string m = message_of([] { K3_CUDA_CHECK(cudaSetDevice(1 << 20)); });
  EXPECT_NE(m.find("cudaErrorInvalidDevice"), std::string::npos) << m;
  EXPECT_NE(m.find("cudaSetDevice(1 << 20)"), std::string::npos) << m;
  K3_CUDA_CHECK(cudaSetDevice(0));
}

TEST(CudaArena, AlignedBumpMarkResetAndExhaustion) {
  K3_REQUIRE_GPU();
  Arena a(0, size_t{1} << 20);
  void* p1 = a.alloc(1, "one byte");
  void* p2 = a.alloc(1000, "a kilobyte");
  void* p3 = a.alloc(3, "three bytes", 64);
  for (void* p : {p1, p2, p3}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % Arena::kAlign, 0u);
  EXPECT_EQ(static_cast<char*>(p2) - static_cast<char*>(p1), 256);
  EXPECT_EQ(static_cast<char*>(p3) - static_cast<char*>(p2), 1024);
  const size_t mark = a.mark();
  void* scratch = a.alloc(4096, "scratch");
  a.reset(mark);
  EXPECT_EQ(a.alloc(16, "again"), scratch);  // the same memory comes back
  EXPECT_GE(a.peak(), mark + 4096);
  const std::string m = message_of([&] { a.alloc(size_t{2} << 20, "kv cache"); });
  EXPECT_NE(m.find("CUDA arena exhausted"), std::string::npos) << m;
  EXPECT_NE(m.find("'kv cache'"), std::string::npos) << m;
  EXPECT_NE(m.find("2.0 MiB"), std::string::npos) << m;
  EXPECT_THROW(a.reset(a.used() + 1), Error);
}

TEST(CudaArena, TooLargeForTheDeviceFailsClearly) {
  K3_REQUIRE_GPU();
  const std::string m = message_of([] { Arena a(0, size_t{1} << 50); });
  EXPECT_NE(m.find("CUDA arena: cannot allocate"), std::string::npos) << m;
  EXPECT_NE(m.find("free of"), std::string::npos) << m;
}

TEST(CudaRuntime, UploadDownloadRoundTripAndSlices) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const std::vector<float> host = rng.normal(6 * 40);
  const DeviceTensor f = upload_f32(test::arena(), host.data(), 6, 40, DType::kF32, "f");
  const DeviceTensor b = upload_f32(test::arena(), host.data(), 6, 40, DType::kBF16, "b");
  EXPECT_EQ(download_f32(f), host);
  const std::vector<float> back = download_f32(b);
  for (size_t i = 0; i < host.size(); ++i) EXPECT_EQ(back[i], test::round_bf16(host[i])) << i;
  const DeviceTensor rows = f.row_slice(2, 3);
  EXPECT_EQ(rows.rows, 3);
  EXPECT_EQ(download_f32(rows)[0], host[2 * 40]);
  EXPECT_FALSE(f.col_slice(8, 16).contiguous());
  EXPECT_THROW(f.row_slice(5, 2), Error);
  poison(f);
  for (float v : download_f32(f)) EXPECT_TRUE(std::isnan(v));
}

TEST(CudaRuntime, StreamEventAndGraph) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  Stream stream;
  std::vector<float> ones(1 << 20, 1.0f);
  const DeviceTensor src = upload_f32(test::arena(), ones.data(), 1, 1 << 20, DType::kF32, "src");
  const DeviceTensor dst = test::arena().alloc_tensor(DType::kF32, 1, 1 << 20, "dst");
  poison(dst);
  Event start, stop;
  Graph graph(stream, [&](cudaStream_t s) {
    K3_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, s));
  });
  start.record(stream);
  graph.launch(stream);
  stop.record(stream);
  stop.sync();
  EXPECT_GE(stop.elapsed_ms_since(start), 0.0f);
  EXPECT_EQ(download_f32(dst), ones);
}

}  // namespace
}  // namespace k3::cuda
