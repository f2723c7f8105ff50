// The evaluation tasks of docs/eval-tasks.md (add, sort, copy, recall): each example is one user
// message and its exact answer. Examples are drawn deterministically from (task, seed, index):
//   - candidate `index` (0, 1, 2, …) of task T under seed S draws from a SplitMix64 generator whose
//     state starts at fnv1a64("T:S:index") (S and index in decimal, T the task name);
//   - uniform(lo, hi) over integers, inclusive: with r = hi − lo + 1, draw x = next() until
//     x < 2^64 − (2^64 mod r), then lo + x mod r (no modulo bias);
//   - draw order: add: da, db, a, b (a 1-digit number is 0..9, a d-digit one 10^(d−1)..10^d − 1);
//     sort: n, then the n values; copy: n, then the n characters (indices into
//     "abcdefghijklmnopqrstuvwxyz0123456789"); recall: n, then each key as three letters a..z
//     (a key equal to an earlier one is drawn again), then the n values, then the query position
//     uniform(1, n);
//   - a candidate is kept when it is held out (fnv1a64(prompt) % 8 == 0); the first N kept
//     candidates are the task's examples (a prompt drawn twice appears twice).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3::eval {

// 64-bit FNV-1a: offset basis 0xcbf29ce484222325, prime 0x100000001b3.
uint64_t fnv1a64(std::string_view bytes);

// Whether an example belongs to the evaluation split: fnv1a64(prompt) % 8 == 0.
bool held_out(std::string_view prompt);

// SplitMix64 (Steele, Lea, Flood 2014): state += 0x9E3779B97F4A7C15, then the variant-13 mix.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next();
  // Uniform over [lo, hi] by rejection (see the file comment). Requires lo ≤ hi.
  int64_t uniform(int64_t lo, int64_t hi);

 private:
  uint64_t state_;
};

enum class Task { kAdd, kSort, kCopy, kRecall };
inline constexpr Task kAllTasks[] = {Task::kAdd, Task::kSort, Task::kCopy, Task::kRecall};

const char* task_name(Task task);
// "add" | "sort" | "copy" | "recall" | "all", or a comma-separated list of them (repeats dropped,
// order kept). Throws k3::Error (field '--task') naming the unknown name and the known ones.
std::vector<Task> parse_tasks(const std::string& text);

struct Example {
  Task task = Task::kAdd;
  std::string prompt;  // the user message
  std::string answer;  // the exact expected content
};

// Candidate `index` of `task` under `seed`, held out or not.
Example draw_candidate(Task task, uint64_t seed, uint64_t index);

// The first `n` held-out candidates of `task` under `seed`.
std::vector<Example> make_examples(Task task, uint64_t seed, int64_t n);

}  // namespace k3::eval
