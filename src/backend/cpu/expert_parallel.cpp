#include "backend/cpu/expert_parallel.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/ops.h"
#include "core/error.h"

namespace k3::cpu {
namespace {

// One of my tokens' picks, sent to the rank owning its expert (which receives only the expert id
// and the token's row).
struct Pick {
  int64_t token, expert;
  float weight;
};

// Byte counts per rank of per-rank element counts.
std::vector<size_t> byte_counts(const std::vector<size_t>& counts, size_t element_bytes) {
  std::vector<size_t> b(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) b[i] = counts[i] * element_bytes;
  return b;
}

// Every rank's `elements` per destination (all-to-all of the counts themselves).
std::vector<size_t> exchange_counts(Communicator& ranks, const std::vector<size_t>& to_each) {
  std::vector<size_t> from_each(to_each.size());
  const std::vector<size_t> one(to_each.size(), sizeof(size_t));
  ranks.all_to_all_v(bytes_of(to_each), one, bytes_of(from_each), one);
  return from_each;
}

}  // namespace

void routed_experts_across(const K3Config& config, int64_t layer, const MoeWeights& w, const Tensor& z,
                           const Routing& routing, Tensor& routed, Communicator& ranks, const ExpertPlacement& placement) {
  const MoeConfig& m = *config.moe;
  const int64_t n = ranks.size(), me = ranks.rank(), T = z.rows, D = z.cols;
  const int64_t first_token = me * T / n, end_token = (me + 1) * T / n;

  // 1. Dispatch: my tokens' picks, grouped by the rank owning the expert.
  std::vector<std::vector<Pick>> sent(static_cast<size_t>(n));
  for (int64_t t = first_token; t < end_token; ++t) {
    for (const Route& r : routing[static_cast<size_t>(t)]) {
      sent[static_cast<size_t>(placement.holder(layer, r.expert, t))].push_back({t, r.expert, r.weight});
    }
  }
  std::vector<size_t> picks_to(static_cast<size_t>(n));
  std::vector<int64_t> experts_out;
  std::vector<float> row_buf;
  for (size_t q = 0; q < sent.size(); ++q) {
    picks_to[q] = sent[q].size();
    for (const Pick& p : sent[q]) {
      experts_out.push_back(p.expert);
      row_buf.insert(row_buf.end(), z.row(p.token), z.row(p.token) + D);
    }
  }
  const std::vector<size_t> picks_from = exchange_counts(ranks, picks_to);
  size_t received = 0;
  for (size_t c : picks_from) received += c;
  std::vector<int64_t> experts_in(received);
  std::vector<float> rows_in(received * static_cast<size_t>(D));
  ranks.all_to_all_v(bytes_of(experts_out), byte_counts(picks_to, sizeof(int64_t)), bytes_of(experts_in),
                     byte_counts(picks_from, sizeof(int64_t)));
  ranks.all_to_all_v(bytes_of(row_buf), byte_counts(picks_to, sizeof(float) * D), bytes_of(rows_in),
                     byte_counts(picks_from, sizeof(float) * D));

  // 2. My experts over the rows they received; outputs in the order the rows came.
  std::vector<float> out_rows(received * static_cast<size_t>(D));
  std::vector<std::vector<size_t>> by_expert(static_cast<size_t>(m.num_experts));
  for (size_t i = 0; i < received; ++i) {
    const int64_t e = experts_in[i];
    if (e < 0 || e >= m.num_experts || !w.experts.w1[static_cast<size_t>(e)]) {
      throw Error("expert parallelism: rank " + std::to_string(me) + " got rows of expert " + std::to_string(e) + " it does not hold");
    }
    by_expert[static_cast<size_t>(e)].push_back(i);
  }
  for (int64_t e = 0; e < m.num_experts; ++e) {
    const std::vector<size_t>& rows = by_expert[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    Tensor in(static_cast<int64_t>(rows.size()), D), y;
    for (size_t i = 0; i < rows.size(); ++i) std::copy_n(&rows_in[rows[i] * D], D, in.row(static_cast<int64_t>(i)));
    gated_mlp(config.activation, *w.experts.w1[e], *w.experts.w3[e], *w.experts.w2[e], in, y);
    for (size_t i = 0; i < rows.size(); ++i) std::copy_n(y.row(static_cast<int64_t>(i)), D, &out_rows[rows[i] * D]);
  }

  // 3. Combine: the outputs go back to the tokens' ranks, in the order their picks were sent.
  std::vector<float> back(experts_out.size() * static_cast<size_t>(D));
  ranks.all_to_all_v(bytes_of(out_rows), byte_counts(picks_from, sizeof(float) * D), bytes_of(back),
                     byte_counts(picks_to, sizeof(float) * D));
  struct Contribution {
    int64_t expert;
    float weight;
    const float* y;
  };
  std::vector<std::vector<Contribution>> per_token(static_cast<size_t>(end_token - first_token));
  size_t at = 0;
  for (size_t q = 0; q < sent.size(); ++q) {
    for (size_t i = 0; i < sent[q].size(); ++i, ++at) {
      const Pick& p = sent[q][i];
      per_token[static_cast<size_t>(p.token - first_token)].push_back({p.expert, p.weight, &back[at * D]});
    }
  }
  // Ascending expert order per token: the one-rank loop's order of additions.
  for (int64_t t = first_token; t < end_token; ++t) {
    std::vector<Contribution>& parts = per_token[static_cast<size_t>(t - first_token)];
    std::sort(parts.begin(), parts.end(), [](const Contribution& a, const Contribution& b) { return a.expert < b.expert; });
    for (const Contribution& part : parts) add_weighted_row(part.y, part.weight, routed.row(t), D);
  }

  // 4. Every rank gets every token's routed sum (blocks padded to the largest token range).
  const int64_t block = (T + n - 1) / n;
  std::vector<float> mine_padded(static_cast<size_t>(block * D), 0.0f), all(static_cast<size_t>(block * D * n));
  std::copy_n(routed.row(first_token), (end_token - first_token) * D, mine_padded.data());
  ranks.all_gather(bytes_of(mine_padded), bytes_of(all));
  for (int64_t q = 0; q < n; ++q) {
    const int64_t from = q * T / n, to = (q + 1) * T / n;
    if (q != me) std::copy_n(&all[static_cast<size_t>(q * block * D)], (to - from) * D, routed.row(from));
  }
}

}  // namespace k3::cpu
