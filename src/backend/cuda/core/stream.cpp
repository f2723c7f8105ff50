#include "backend/cuda/core/stream.h"

#include "backend/cuda/core/check.h"

namespace k3::cuda {

Stream::Stream() { K3_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void Stream::sync() const { K3_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

Event::Event() { K3_CUDA_CHECK(cudaEventCreate(&event_)); }

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

void Event::record(cudaStream_t stream) { K3_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void Event::sync() const { K3_CUDA_CHECK(cudaEventSynchronize(event_)); }

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  K3_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

Graph::Graph(cudaStream_t stream, const std::function<void(cudaStream_t)>& body) {
  K3_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    body(stream);
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);  // leave the stream usable
    if (broken != nullptr) cudaGraphDestroy(broken);
    cudaGetLastError();
    throw;
  }
  K3_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
  K3_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

Graph::~Graph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
}

void Graph::launch(cudaStream_t stream) const { K3_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

}  // namespace k3::cuda
