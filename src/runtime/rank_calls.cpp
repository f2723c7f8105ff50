#include "runtime/rank_calls.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/sha256.h"

namespace k3 {
namespace {

enum class Call : uint32_t { kStop, kAddSequence, kFreeSequence, kRun, kRunArgmax, kSaveSnapshot, kRestoreSnapshot };

// A flat little-endian message of integers and integer vectors.
class Message {
 public:
  Message() = default;
  explicit Message(std::vector<std::byte> bytes) : bytes_(std::move(bytes)) {}
  const std::vector<std::byte>& bytes() const { return bytes_; }

  void put(int64_t v) { append(&v, sizeof v); }
  void put(std::span<const int64_t> v) {
    put(static_cast<int64_t>(v.size()));
    append(v.data(), v.size_bytes());
  }
  void put(const std::vector<int32_t>& v) {
    put(static_cast<int64_t>(v.size()));
    append(v.data(), v.size() * sizeof(int32_t));
  }
  int64_t get() {
    int64_t v = 0;
    take(&v, sizeof v);
    return v;
  }
  template <typename T>
  std::vector<T> get_vector() {
    const int64_t n = get();
    if (n < 0 || static_cast<size_t>(n) * sizeof(T) > bytes_.size() - at_) throw Error("rank call: a malformed message");
    std::vector<T> v(static_cast<size_t>(n));
    take(v.data(), v.size() * sizeof(T));
    return v;
  }

 private:
  void append(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  void take(void* p, size_t n) {
    if (n > bytes_.size() - at_) throw Error("rank call: a malformed message");
    if (n != 0) std::memcpy(p, bytes_.data() + at_, n);
    at_ += n;
  }
  std::vector<std::byte> bytes_;
  size_t at_ = 0;
};

// Root's message on every rank: its length, then its bytes. The workers wait untimed for the
// length (the leader may be idle), then timed for the bytes.
Message broadcast_message(Communicator& world, const Message& sent) {
  int64_t length = static_cast<int64_t>(sent.bytes().size());
  world.broadcast_untimed(std::as_writable_bytes(std::span(&length, 1)), 0);
  std::vector<std::byte> bytes = world.rank() == 0 ? sent.bytes() : std::vector<std::byte>(static_cast<size_t>(length));
  world.broadcast(bytes, 0);
  return Message(std::move(bytes));
}

void put_forward(Message& m, std::span<const int64_t> ids, std::span<const BatchSlice> slices, std::span<const int64_t> logit_rows) {
  m.put(ids);
  m.put(static_cast<int64_t>(slices.size()));
  for (const BatchSlice& s : slices) {
    m.put(s.sequence);
    m.put(s.row0);
    m.put(s.n);
    m.put(*s.blocks);
  }
  m.put(logit_rows);
}

// A forward call as received: the slices point into `blocks`.
struct ForwardCall {
  std::vector<int64_t> ids, logit_rows;
  std::vector<std::vector<int32_t>> blocks;
  std::vector<BatchSlice> slices;
};

ForwardCall get_forward(Message& m) {
  ForwardCall f;
  f.ids = m.get_vector<int64_t>();
  const int64_t n = m.get();
  if (n < 0 || n > static_cast<int64_t>(f.ids.size())) throw Error("rank call: a malformed message");
  f.blocks.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    BatchSlice s;
    s.sequence = m.get();
    s.row0 = m.get();
    s.n = m.get();
    f.blocks[static_cast<size_t>(i)] = m.get_vector<int32_t>();
    s.blocks = &f.blocks[static_cast<size_t>(i)];
    f.slices.push_back(s);
  }
  f.logit_rows = m.get_vector<int64_t>();
  return f;
}

class LeaderExecutor final : public Executor {
 public:
  LeaderExecutor(std::unique_ptr<Executor> local, Communicator& world) : local_(std::move(local)), world_(world) {}
  ~LeaderExecutor() override {
    try {
      send(Call::kStop, {});
    } catch (const Error&) {
      // The world failed already: the workers end with it.
    }
  }

  CacheGeometry caches() const override { return local_->caches(); }
  void add_sequence(int64_t sequence, int64_t length) override {
    send(Call::kAddSequence, {sequence, length});
    local_->add_sequence(sequence, length);
  }
  void free_sequence(int64_t sequence) override {
    send(Call::kFreeSequence, {sequence});
    local_->free_sequence(sequence);
  }
  void save_snapshot(int64_t sequence, int32_t snapshot) override {
    send(Call::kSaveSnapshot, {sequence, snapshot});
    local_->save_snapshot(sequence, snapshot);
  }
  void restore_snapshot(int64_t sequence, int32_t snapshot) override {
    send(Call::kRestoreSnapshot, {sequence, snapshot});
    local_->restore_snapshot(sequence, snapshot);
  }
  Tensor run(std::span<const int64_t> ids, std::span<const BatchSlice> slices, std::span<const int64_t> logit_rows) override {
    send_forward(Call::kRun, ids, slices, logit_rows);
    return local_->run(ids, slices, logit_rows);
  }
  std::vector<int64_t> run_argmax(std::span<const int64_t> ids, std::span<const BatchSlice> slices,
                                  std::span<const int64_t> logit_rows) override {
    send_forward(Call::kRunArgmax, ids, slices, logit_rows);
    return local_->run_argmax(ids, slices, logit_rows);
  }

 private:
  void send(Call call, std::initializer_list<int64_t> args) {
    Message m;
    m.put(static_cast<int64_t>(call));
    for (int64_t a : args) m.put(a);
    broadcast_message(world_, m);
  }
  void send_forward(Call call, std::span<const int64_t> ids, std::span<const BatchSlice> slices, std::span<const int64_t> logit_rows) {
    Message m;
    m.put(static_cast<int64_t>(call));
    put_forward(m, ids, slices, logit_rows);
    broadcast_message(world_, m);
  }

  std::unique_ptr<Executor> local_;
  Communicator& world_;
};

}  // namespace

std::string model_fingerprint(const K3Config& config, const LoadPlan& plan, const std::string& settings) {
  Sha256 h;
  std::ifstream in(config.file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  h.update(text.str());
  h.update("\n" + plan.family + "\n" + settings + "\n");
  for (size_t i = 0; i < plan.params.size(); ++i) {
    std::string line = plan.params[i].name;
    for (uint64_t d : plan.params[i].shape) line += " " + std::to_string(d);
    h.update(line + " " + scheme_kind_name(plan.bindings[i].scheme.kind) + "\n");
  }
  for (const std::string& file : plan.files) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(file, ec);
    h.update(std::filesystem::path(file).filename().string() + " " + std::to_string(ec ? 0 : size) + "\n");
  }
  return to_hex(h.finish());
}

void agree_on_model(Communicator& world, const std::string& fingerprint) {
  std::vector<char> mine(64, '\0'), all(64 * static_cast<size_t>(world.size()));
  std::copy_n(fingerprint.begin(), std::min<size_t>(64, fingerprint.size()), mine.begin());
  world.all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(all)));
  std::string differ;
  for (int q = 1; q < world.size(); ++q) {
    if (!std::equal(all.begin() + 64 * q, all.begin() + 64 * (q + 1), all.begin())) differ += (differ.empty() ? "" : ", ") + std::to_string(q);
  }
  if (!differ.empty()) {
    throw Error(Where{"", "", "ranks"}, "rank(s) " + differ + " would load a different model, plan or layout than rank 0 "
                                        "(config.json, checkpoint files or flags differ)");
  }
}

CacheSizes leader_cache_sizes(Communicator& world, const CacheSizes& mine) {
  int64_t v[3] = {mine.kv_blocks, mine.state_slots, mine.snapshot_slots};
  world.broadcast(std::as_writable_bytes(std::span(v)), 0);
  return {v[0], v[1], v[2]};
}

std::unique_ptr<Executor> make_leader_executor(std::unique_ptr<Executor> local, Communicator& world) {
  return std::make_unique<LeaderExecutor>(std::move(local), world);
}

void follow_calls(Executor& local, Communicator& world) {
  while (true) {
    Message m = broadcast_message(world, Message());
    const int64_t code = m.get();
    if (code < 0 || code > static_cast<int64_t>(Call::kRestoreSnapshot)) throw Error("rank call: unknown call " + std::to_string(code));
    const Call call = static_cast<Call>(code);
    if (call == Call::kStop) return;
    if (call == Call::kRun || call == Call::kRunArgmax) {
      const ForwardCall f = get_forward(m);
      if (call == Call::kRun) {
        local.run(f.ids, f.slices, f.logit_rows);
      } else {
        local.run_argmax(f.ids, f.slices, f.logit_rows);
      }
      continue;
    }
    const int64_t sequence = m.get();
    try {
      switch (call) {
        case Call::kAddSequence: local.add_sequence(sequence, m.get()); break;
        case Call::kFreeSequence: local.free_sequence(sequence); break;
        case Call::kSaveSnapshot: local.save_snapshot(sequence, static_cast<int32_t>(m.get())); break;
        default: local.restore_snapshot(sequence, static_cast<int32_t>(m.get())); break;
      }
    } catch (const Error&) {
      // The leader's executor refused the same call; the engine above it handles that.
    }
  }
}

}  // namespace k3
