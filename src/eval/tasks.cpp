#include "eval/tasks.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace k3::eval {
namespace {

constexpr std::string_view kCopyAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789";

// The smallest number with `digits` decimal digits (0 for one digit) and the largest.
int64_t lowest_with_digits(int64_t digits) {
  int64_t v = 1;
  for (int64_t i = 1; i < digits; ++i) v *= 10;
  return digits == 1 ? 0 : v;
}
int64_t highest_with_digits(int64_t digits) {
  int64_t v = 1;
  for (int64_t i = 0; i < digits; ++i) v *= 10;
  return v - 1;
}

Example draw_add(SplitMix64& g) {
  const int64_t da = g.uniform(1, 5), db = g.uniform(1, 5);
  const int64_t a = g.uniform(lowest_with_digits(da), highest_with_digits(da));
  const int64_t b = g.uniform(lowest_with_digits(db), highest_with_digits(db));
  return {Task::kAdd, "What is " + std::to_string(a) + "+" + std::to_string(b) + "?", std::to_string(a + b)};
}

std::string join_numbers(const std::vector<int64_t>& values, std::string_view separator) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) s += separator;
    s += std::to_string(values[i]);
  }
  return s;
}

Example draw_sort(SplitMix64& g) {
  const int64_t n = g.uniform(3, 8);
  std::vector<int64_t> values;
  for (int64_t i = 0; i < n; ++i) values.push_back(g.uniform(0, 99));
  Example e{Task::kSort, "Sort: " + join_numbers(values, " "), ""};
  std::sort(values.begin(), values.end());
  e.answer = join_numbers(values, " ");
  return e;
}

Example draw_copy(SplitMix64& g) {
  const int64_t n = g.uniform(4, 32);
  std::string s;
  for (int64_t i = 0; i < n; ++i) s += kCopyAlphabet[static_cast<size_t>(g.uniform(0, static_cast<int64_t>(kCopyAlphabet.size()) - 1))];
  return {Task::kCopy, "Repeat: " + s, s};
}

Example draw_recall(SplitMix64& g) {
  const int64_t n = g.uniform(8, 24);
  std::vector<std::string> keys;
  while (static_cast<int64_t>(keys.size()) < n) {
    std::string key;
    for (int i = 0; i < 3; ++i) key += static_cast<char>('a' + g.uniform(0, 25));
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(std::move(key));
  }
  std::vector<int64_t> values;
  for (int64_t i = 0; i < n; ++i) values.push_back(g.uniform(0, 999));
  const size_t q = static_cast<size_t>(g.uniform(1, n) - 1);
  std::string prompt;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) prompt += ", ";
    prompt += keys[i] + "=" + std::to_string(values[i]);
  }
  prompt += ". What is " + keys[q] + "?";
  return {Task::kRecall, std::move(prompt), std::to_string(values[q])};
}

}  // namespace

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

bool held_out(std::string_view prompt) { return fnv1a64(prompt) % 8 == 0; }

uint64_t SplitMix64::next() {
  state_ += 0x9E3779B97F4A7C15ull;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t SplitMix64::uniform(int64_t lo, int64_t hi) {
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
  if (range == 0) return static_cast<int64_t>(next());  // the whole 64-bit range
  const uint64_t rejected = (0 - range) % range;          // 2^64 mod range
  uint64_t x = next();
  while (x > std::numeric_limits<uint64_t>::max() - rejected) x = next();
  return lo + static_cast<int64_t>(x % range);
}

const char* task_name(Task task) {
  switch (task) {
    case Task::kAdd: return "add";
    case Task::kSort: return "sort";
    case Task::kCopy: return "copy";
    case Task::kRecall: return "recall";
  }
  return "?";
}

std::vector<Task> parse_tasks(const std::string& text) {
  std::vector<Task> tasks;
  auto add = [&](Task t) {
    if (std::find(tasks.begin(), tasks.end(), t) == tasks.end()) tasks.push_back(t);
  };
  size_t start = 0;
  while (true) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string name = text.substr(start, end - start);
    bool known = false;
    for (const Task t : kAllTasks) {
      if (name == task_name(t) || name == "all") {
        add(t);
        known = true;
      }
    }
    if (!known) {
      throw Error(Where{"", "", "--task"}, quote_bytes(name) + " is not a task (add, sort, copy, recall or all)");
    }
    if (end == text.size()) return tasks;
    start = end + 1;
  }
}

Example draw_candidate(Task task, uint64_t seed, uint64_t index) {
  SplitMix64 g(fnv1a64(std::string(task_name(task)) + ":" + std::to_string(seed) + ":" + std::to_string(index)));
  switch (task) {
    case Task::kAdd: return draw_add(g);
    case Task::kSort: return draw_sort(g);
    case Task::kCopy: return draw_copy(g);
    case Task::kRecall: return draw_recall(g);
  }
  return {};
}

std::vector<Example> make_examples(Task task, uint64_t seed, int64_t n) {
  std::vector<Example> examples;
  for (uint64_t index = 0; static_cast<int64_t>(examples.size()) < n; ++index) {
    Example e = draw_candidate(task, seed, index);
    if (held_out(e.prompt)) examples.push_back(std::move(e));
  }
  return examples;
}

}  // namespace k3::eval
