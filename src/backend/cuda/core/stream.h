// RAII owners of a CUDA stream, an event and an instantiated CUDA graph. Destructors never throw
// (they release and ignore the status); everything else is checked. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace k3::cuda {

class Stream {
 public:
  // A non-blocking stream on the current device (it does not synchronise with the legacy stream 0).
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  operator cudaStream_t() const { return stream_; }
  void sync() const;

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event();  // timing enabled
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  void sync() const;
  // Milliseconds from `start` to this event (both recorded and complete).
  float elapsed_ms_since(const Event& start) const;

 private:
  cudaEvent_t event_ = nullptr;
};

// A captured sequence of stream work, replayed with one launch (decode steps: the many small kernels
// of one token cost one launch). The captured work must use only memory that outlives the graph.
class Graph {
 public:
  // Runs `body(stream)` under stream capture and instantiates the result.
  Graph(cudaStream_t stream, const std::function<void(cudaStream_t)>& body);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void launch(cudaStream_t stream) const;

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace k3::cuda
