#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "core/error.h"
#include "grammar/state_walker.h"

namespace k3::grammar {
namespace {

using Kind = FlatGrammar::Kind;

// Where a stack can rest: the start, and every position that follows an element.
std::vector<uint32_t> resting_positions(const FlatGrammar& g) {
  std::vector<uint8_t> alt_start(g.elements.size(), 0);
  for (uint32_t a : g.alts) alt_start[a] = 1;
  std::vector<uint32_t> out;
  for (uint32_t p = 0; p < g.elements.size(); ++p)
    if (g.elements[p].kind != Kind::kEnd && (!alt_start[p] || p == g.start_pos)) out.push_back(p);
  return out;
}

struct PositionResult {
  std::vector<uint32_t> accepted, uncertain;
};

}  // namespace

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(const Grammar& grammar,
                                                                std::shared_ptr<const TokenVocabulary> vocab,
                                                                CompileOptions options) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<CompiledGrammar> cg(new CompiledGrammar());
  cg->vocab_ = std::move(vocab);
  cg->flat_ = lower_grammar(grammar);
  const FlatGrammar& g = cg->flat_;
  for (const std::string& name : g.specials) {
    const auto id = cg->vocab_->special_id(name);
    if (!id) throw Error("grammar: unknown special token '" + name + "'");
    cg->special_ids_.push_back(*id);
  }

  // Levels of a chain deeper than the longest token cannot be told apart by any token: they share
  // the classification of the level at that depth.
  const std::vector<uint32_t> resting = resting_positions(g);
  std::vector<uint32_t> same_as(g.elements.size(), kNone);
  const uint32_t cut = uint32_t{cg->vocab_->trie().max_depth} + 2;
  for (const FlatGrammar::Chain& c : g.chains) {
    if (c.levels <= cut || g.nullable[c.first]) continue;
    for (uint32_t p = c.first + cut * c.stride; p < c.first + c.levels * c.stride; ++p)
      same_as[p] = p - ((p - c.first) / c.stride + 1 - cut) * c.stride;
  }
  std::vector<uint32_t> positions;
  for (uint32_t p : resting)
    if (same_as[p] == kNone) positions.push_back(p);
  std::vector<PositionResult> results(positions.size());
  unsigned threads = options.threads ? options.threads : std::min(16u, std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<unsigned>(std::min<size_t>(threads, std::max<size_t>(1, positions.size() / 8)));
  std::atomic<size_t> next{0};
  auto work = [&] {
    StateWalker walker(g, cg->special_ids_);
    const TokenTrie& trie = cg->vocab_->trie();
    for (size_t k; (k = next.fetch_add(1)) < positions.size();) {
      const uint32_t p = positions[k];
      walker.classify(trie, p, results[k].accepted, results[k].uncertain);
    }
  };
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (unsigned i = 0; i < threads; ++i) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }

  const size_t words = cg->mask_words();
  cg->slot_of_.assign(g.elements.size(), kNone);
  std::map<std::vector<uint32_t>, uint32_t> dense_ids;
  for (size_t k = 0; k < positions.size(); ++k) {
    PositionResult& r = results[k];
    Slot s;
    if (r.accepted.size() > words) {
      std::vector<uint32_t> bits(words, 0);
      for (uint32_t id : r.accepted) bits[id >> 5] |= 1u << (id & 31);
      const auto [it, added] = dense_ids.emplace(std::move(bits), static_cast<uint32_t>(dense_ids.size()));
      if (added) cg->dense_.insert(cg->dense_.end(), it->first.begin(), it->first.end());
      s.dense = it->second;
    } else {
      std::sort(r.accepted.begin(), r.accepted.end());
      s.sparse_begin = static_cast<uint32_t>(cg->sparse_.size());
      cg->sparse_.insert(cg->sparse_.end(), r.accepted.begin(), r.accepted.end());
      s.sparse_end = static_cast<uint32_t>(cg->sparse_.size());
    }
    if (!r.uncertain.empty()) {
      s.uncertain = static_cast<uint32_t>(cg->uncertain_.size());
      cg->stats_.uncertain_tokens += r.uncertain.size();
      cg->uncertain_.push_back(TokenTrie::build(std::move(r.uncertain), *cg->vocab_));
    }
    cg->slot_of_[positions[k]] = static_cast<uint32_t>(cg->slots_.size());
    cg->slots_.push_back(s);
    r = {};
  }
  for (uint32_t p : resting)
    if (same_as[p] != kNone) cg->slot_of_[p] = cg->slot_of_[same_as[p]];
  cg->stats_.positions = positions.size();
  cg->stats_.dense_sets = dense_ids.size();
  size_t bytes = cg->dense_.size() * 4 + cg->sparse_.size() * 4 + cg->slots_.size() * sizeof(Slot) +
                 g.elements.size() * (sizeof(FlatGrammar::Element) + sizeof(ByteSet) + 24);
  for (const TokenTrie& t : cg->uncertain_) bytes += t.size() * 11 + t.ids.size() * 4;
  cg->stats_.memory_bytes = bytes;
  cg->stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return cg;
}

}  // namespace k3::grammar
