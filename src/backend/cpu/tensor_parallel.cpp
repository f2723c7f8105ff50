#include "backend/cpu/tensor_parallel.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/ops.h"
#include "core/error.h"
#include "parallel/sharding.h"

namespace k3::cpu {
namespace {

IndexRange my_share(Communicator& ranks, int64_t n) { return split_range(n, ranks.size(), ranks.rank()); }
IndexRange scaled(IndexRange r, int64_t width) { return {r.first * width, r.count * width}; }

// A linear whose output rows are divided among the ranks: this rank computes its rows from the
// whole input, then the ranks all-gather the outputs. With an `input_unit` (> 0), the input arrives
// as this rank's columns of it — its share of the input's groups of `input_unit` columns (its heads'
// or channels' values) — and is all-gathered first.
class GatheredLinear final : public CpuLinear {
 public:
  GatheredLinear(std::unique_ptr<CpuLinear> whole, Communicator& ranks, int64_t input_unit)
      : CpuLinear(whole->rows(), input_unit > 0 ? scaled(my_share(ranks, whole->cols() / input_unit), input_unit).count
                                                : whole->cols()),
        ranks_(&ranks),
        full_cols_(whole->cols()),
        input_unit_(input_unit) {
    const IndexRange mine = my_share(ranks, whole->rows());
    mine_ = whole->rows_view(mine.first, mine.count);
    set_origin(whole->scheme(), whole->bytes_location());
  }
  void forward(const float* x, int64_t m, float* y) const override { run(x, m, y, false); }
  void forward_accumulators(const float* x, int64_t m, float* y) const override { run(x, m, y, true); }
  float output_scale() const override { return mine_->output_scale(); }
  uint64_t weight_bytes() const override { return mine_->weight_bytes(); }
  std::string kernel_name() const override { return mine_->kernel_name() + "+tensor-parallel"; }
  std::unique_ptr<CpuLinear> rows_view(int64_t, int64_t) const override {
    throw Error("a tensor-parallel linear is divided once: it has no row views");
  }

 private:
  void run(const float* x, int64_t m, float* y, bool accumulators) const {
    std::vector<float> input;
    if (input_unit_ > 0) {
      input.resize(static_cast<size_t>(m * full_cols_));
      gather_columns(*ranks_, x, m, cols(), full_cols_, input_unit_, input.data());
      x = input.data();
    }
    Tensor part(m, mine_->rows());
    if (m > 0 && mine_->rows() > 0) {
      accumulators ? mine_->forward_accumulators(x, m, part.data.data()) : mine_->forward(x, m, part.data.data());
    }
    gather_columns(*ranks_, part.data.data(), m, part.cols, rows(), 1, y);
  }

  Communicator* ranks_;
  int64_t full_cols_;
  int64_t input_unit_;  // 0: the input arrives whole
  std::unique_ptr<CpuLinear> mine_;
};

void keep_rows(Linear& l, IndexRange range) { l = l->rows_view(range.first, range.count); }
void gather_output(Linear& l, Communicator& ranks, int64_t input_unit) {
  l = std::make_unique<GatheredLinear>(std::move(l), ranks, input_unit);
}
// Entries [range.first · width, range.end() · width) of v.
void keep_entries(Floats& v, IndexRange range, int64_t width) {
  const IndexRange e = scaled(range, width);
  if (static_cast<int64_t>(v.size()) < e.end()) throw Error("tensor parallelism: a vector is shorter than its split");
  v = Floats(v.begin() + e.first, v.begin() + e.end());
}

// Gate and up by intermediate channel; down gathers the channels' values first.
void shard_mlp(MlpWeights& w, Communicator& ranks) {
  const IndexRange channels = my_share(ranks, w.gate->rows());
  keep_rows(w.gate, channels);
  keep_rows(w.up, channels);
  gather_output(w.down, ranks, 1);
}

void shard_kda(const KdaConfig& k, KdaWeights& w, Communicator& ranks) {
  const IndexRange heads = my_share(ranks, k.num_heads), channels = scaled(heads, k.head_dim);
  for (Linear* l : {&w.q, &w.k, &w.v, &w.f_b}) keep_rows(*l, channels);
  keep_rows(w.g ? w.g : w.g_b, channels);
  keep_rows(w.b, heads);
  for (Floats* conv : {&w.conv.q, &w.conv.k, &w.conv.v}) keep_entries(*conv, channels, k.short_conv_kernel_size);
  keep_entries(w.a_log, heads, 1);
  keep_entries(w.dt_bias, channels, 1);
  gather_output(w.o, ranks, k.head_dim);
}

void shard_mla(const MlaConfig& m, MlaWeights& w, Communicator& ranks) {
  const IndexRange heads = my_share(ranks, m.num_heads);
  keep_rows(w.q_b ? w.q_b : w.q, scaled(heads, m.qk_head_dim()));
  keep_rows(w.kv_b, scaled(heads, m.qk_nope_head_dim + m.v_head_dim));
  keep_entries(w.absorbed.w_uk, heads, m.qk_nope_head_dim * m.kv_lora_rank);
  keep_entries(w.absorbed.w_uv, heads, m.v_head_dim * m.kv_lora_rank);
  if (w.g) keep_rows(w.g, scaled(heads, m.v_head_dim));
  gather_output(w.o, ranks, m.v_head_dim);
}

void shard_moe(MoeWeights& w, Communicator& ranks) {
  if (w.latent_down) gather_output(w.latent_down, ranks, 0);
  if (w.latent_up) gather_output(w.latent_up, ranks, 0);
  if (w.shared.gate) shard_mlp(w.shared, ranks);
}

// One rank's greedy candidate for a row.
struct Candidate {
  double value;  // a float's value (double: no padding bytes in the exchange)
  int64_t id;    // −1: the rank's columns hold a NaN or an infinity; −2: the rank has no columns
};

}  // namespace

K3Config tensor_parallel_config(const K3Config& config, int64_t ranks, int64_t rank) {
  K3Config local = config;
  local.kda.num_heads = split_range(config.kda.num_heads, ranks, rank).count;
  local.mla.num_heads = split_range(config.mla.num_heads, ranks, rank).count;
  return local;
}

void shard_tensor_parallel(const K3Config& config, ModelWeights& w, Communicator& ranks) {
  keep_entries(w.embed, my_share(ranks, config.vocab_size), config.hidden_size);
  for (int64_t l = 0; l < config.num_layers; ++l) {
    LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    if (config.is_kda(l)) {
      shard_kda(config.kda, lw.kda, ranks);
    } else {
      shard_mla(config.mla, lw.mla, ranks);
    }
    if (config.is_moe(l)) {
      shard_moe(lw.moe, ranks);
    } else {
      shard_mlp(lw.mlp, ranks);
    }
  }
  keep_rows(w.lm_head, my_share(ranks, w.lm_head->rows()));
}

void gather_columns(Communicator& ranks, const float* local, int64_t rows, int64_t local_cols, int64_t full_cols,
                    int64_t unit, float* out) {
  gather_column_groups(ranks, reinterpret_cast<const std::byte*>(local), rows, local_cols, full_cols, unit, sizeof(float),
                       reinterpret_cast<std::byte*>(out));
}

Tensor gather_columns(Communicator& ranks, const Tensor& local, int64_t full_cols, int64_t unit) {
  Tensor out(local.rows, full_cols);
  gather_columns(ranks, local.data.data(), local.rows, local.cols, full_cols, unit, out.data.data());
  return out;
}

void embed_vocab_split(Communicator& ranks, const Floats& table_rows, int64_t vocab, std::span<const int64_t> ids,
                       Tensor& out) {
  const int64_t n = ranks.size(), hidden = out.cols, T = static_cast<int64_t>(ids.size());
  // Every rank knows every id, so every rank knows which rows each rank sends, in token order.
  std::vector<std::vector<int64_t>> tokens_of(static_cast<size_t>(n));
  for (int64_t t = 0; t < T; ++t) tokens_of[static_cast<size_t>(split_owner(ids[t], vocab, n))].push_back(t);
  size_t most = 0;
  for (const auto& tokens : tokens_of) most = std::max(most, tokens.size());
  const IndexRange mine = my_share(ranks, vocab);
  std::vector<float> sent(most * static_cast<size_t>(hidden), 0.0f), all(sent.size() * static_cast<size_t>(n));
  const std::vector<int64_t>& my_tokens = tokens_of[static_cast<size_t>(ranks.rank())];
  for (size_t i = 0; i < my_tokens.size(); ++i) {
    const int64_t id = ids[my_tokens[i]];
    std::memcpy(&sent[i * hidden], table_rows.data() + (id - mine.first) * hidden, sizeof(float) * hidden);
  }
  ranks.all_gather(bytes_of(sent), bytes_of(all));
  for (int64_t q = 0; q < n; ++q) {
    const std::vector<int64_t>& tokens = tokens_of[static_cast<size_t>(q)];
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::memcpy(out.row(tokens[i]), &all[(static_cast<size_t>(q) * most + i) * hidden], sizeof(float) * hidden);
    }
  }
}

std::vector<int64_t> argmax_vocab_split(Communicator& ranks, const Tensor& local, int64_t vocab) {
  const int64_t n = ranks.size(), rows = local.rows, first = my_share(ranks, vocab).first;
  std::vector<Candidate> mine(static_cast<size_t>(rows)), all(mine.size() * static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    Candidate best{0.0, local.cols > 0 ? first : -2};
    for (int64_t c = 0; c < local.cols; ++c) {
      const float v = local.row(r)[c];
      if (!std::isfinite(v)) {
        best.id = -1;
        break;
      }
      if (c == 0 || v > best.value) best = {v, first + c};
    }
    mine[static_cast<size_t>(r)] = best;
  }
  ranks.all_gather(bytes_of(mine), bytes_of(all));
  std::vector<int64_t> picks(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t pick = -2;
    double value = 0;
    for (int64_t q = 0; q < n; ++q) {  // ascending ids: a later rank wins only with a larger value
      const Candidate& c = all[static_cast<size_t>(q * rows + r)];
      if (c.id == -1) {
        pick = -1;
        break;
      }
      if (c.id >= 0 && (pick == -2 || c.value > value)) {
        pick = c.id;
        value = c.value;
      }
    }
    picks[static_cast<size_t>(r)] = pick;
  }
  return picks;
}

}  // namespace k3::cpu
