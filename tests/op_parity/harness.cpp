#include "harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>

namespace k3::op_parity {

// ---- targets --------------------------------------------------------------------------------

const std::vector<Target>& targets() {
  static const std::vector<Target> all = [] {
    std::vector<Target> out;
    for (cpu::CpuIsa isa : cpu::runnable_isas()) out.push_back({cpu::isa_name(isa), TargetKind::Cpu, isa});
    // A CUDA target would be appended here when a device is present (see harness.h).
    return out;
  }();
  return all;
}

ScopedTarget::ScopedTarget(const Target& target) {
  const char* old = std::getenv("K3_CPU_ISA");
  had_ = old != nullptr;
  if (had_) previous_ = old;
  ::setenv("K3_CPU_ISA", cpu::isa_name(target.isa), 1);
}

ScopedTarget::~ScopedTarget() {
  if (had_) {
    ::setenv("K3_CPU_ISA", previous_.c_str(), 1);
  } else {
    ::unsetenv("K3_CPU_ISA");
  }
}

// ---- comparison -------------------------------------------------------------------------------
namespace {

std::string number(double v) {
  std::ostringstream s;
  s << std::setprecision(3) << std::scientific << v;
  return s.str();
}

// Compares `got` with `want` row by row under e's allowance (bound, tolerance, exact positions).
Verdict check(const Expectation& e, const std::vector<double>& want, const std::vector<float>& got, const char* what) {
  Verdict v;
  if (got.size() != want.size()) {
    v.failure = std::string(what) + ": " + std::to_string(got.size()) + " values, expected " + std::to_string(want.size());
    v.worst_ratio = INFINITY;
    return v;
  }
  const int64_t width = e.row_width > 0 ? e.row_width : static_cast<int64_t>(want.size());
  const std::set<size_t> exact(e.exact.begin(), e.exact.end());
  for (size_t r0 = 0; r0 < want.size(); r0 += static_cast<size_t>(width)) {
    const size_t r1 = std::min(want.size(), r0 + static_cast<size_t>(width));
    double ref_max = 0, err_max = 0, ratio = 0;
    size_t worst = r0;
    for (size_t i = r0; i < r1; ++i) {
      if (!exact.count(i)) ref_max = std::max(ref_max, std::fabs(e.want[i]));  // ids are no magnitudes
    }
    for (size_t i = r0; i < r1; ++i) {
      const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
      if (!std::isfinite(static_cast<double>(got[i]))) {
        v.failure = std::string(what) + ": value " + std::to_string(i) + " is not finite";
        v.worst_ratio = INFINITY;
        return v;
      }
      if (exact.count(i) && err != 0) {
        v.failure = std::string(what) + ": value " + std::to_string(i) + " is " + number(got[i]) + ", must equal " +
                    number(want[i]);
        v.worst_ratio = INFINITY;
        return v;
      }
      err_max = std::max(err_max, err);
      const double allowed = e.bound.empty() ? e.tolerance * ref_max : e.bound[i];
      const double r = err == 0 ? 0 : (allowed > 0 ? err / allowed : INFINITY);
      if (r > ratio) ratio = r, worst = i;
    }
    v.worst_relative = std::max(v.worst_relative, ref_max > 0 ? err_max / ref_max : err_max);
    if (ratio > v.worst_ratio) {
      v.worst_ratio = ratio;
      if (ratio > 1.0) {  // the worst row so far
        const double allowed = e.bound.empty() ? e.tolerance * ref_max : e.bound[worst];
        v.failure = std::string(what) + ": row " + std::to_string(r0 / static_cast<size_t>(width)) + " value " +
                    std::to_string(worst - r0) + ": got " + number(got[worst]) + ", want " + number(want[worst]) +
                    " (|Δ| " + number(std::fabs(got[worst] - want[worst])) + " > allowed " + number(allowed) + ")";
      }
    }
  }
  return v;
}

}  // namespace

Verdict compare(const Expectation& e, const std::vector<float>& got) { return check(e, e.want, got, "vs reference"); }

Verdict agree(const Expectation& e, const std::vector<float>& a, const std::vector<float>& b) {
  return check(e, std::vector<double>(b.begin(), b.end()), a, "vs first target");
}

// ---- running ----------------------------------------------------------------------------------

const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> all = [] {
    std::vector<OpCase> out;
    for (auto* make : {&linear_cases, &pointwise_cases, &block_cases}) {
      std::vector<OpCase> part = (*make)();
      std::move(part.begin(), part.end(), std::back_inserter(out));
    }
    return out;
  }();
  return all;
}

namespace {

// Per case: the reference and each target's output, evaluated once.
struct CaseResults {
  std::optional<Expectation> expectation;
  std::map<size_t, std::vector<float>> outputs;
};

CaseResults& results(size_t index) {
  static std::map<size_t, CaseResults> all;
  return all[index];
}

const std::vector<float>& output_of(size_t index, size_t target) {
  CaseResults& r = results(index);
  auto it = r.outputs.find(target);
  if (it == r.outputs.end()) {
    const Target& t = targets().at(target);
    ScopedTarget scope(t);
    it = r.outputs.emplace(target, all_cases().at(index).run(t)).first;
  }
  return it->second;
}

}  // namespace

void run_case(size_t index, size_t target) {
  const OpCase& c = all_cases().at(index);
  if (!c.skip.empty()) GTEST_SKIP() << c.skip;
  CaseResults& r = results(index);
  if (!r.expectation) r.expectation = c.reference();
  const Expectation& e = *r.expectation;
  const std::vector<float>& got = output_of(index, target);
  const Verdict vs_ref = compare(e, got);
  ::testing::Test::RecordProperty("error_over_allowance", number(vs_ref.worst_ratio));
  ::testing::Test::RecordProperty("relative_error", number(vs_ref.worst_relative));
  EXPECT_TRUE(vs_ref.failure.empty()) << c.op << " " << c.name << " on " << targets()[target].name << " from "
                                      << c.source << ": " << vs_ref.failure << "\n  reference: " << e.note;
  if (target == 0) return;
  const Verdict vs_first = agree(e, got, output_of(index, 0));
  EXPECT_TRUE(vs_first.failure.empty()) << c.op << " " << c.name << ": " << targets()[target].name << " vs "
                                        << targets()[0].name << ": " << vs_first.failure;
}

// ---- coverage ---------------------------------------------------------------------------------

const std::vector<std::string>& format_columns() {
  static const std::vector<std::string> columns = {"vec",  "f32",  "bf16", "f16",  "fp8-tensor", "fp8-block",
                                                   "nvfp4", "mxfp4", "w4a8", "w8a8", "q4_0",       "q8_0",
                                                   "q2_K", "q3_K", "q4_K", "q5_K", "q6_K",       "q4_0+q2_K"};
  return columns;
}

std::string safe_name(const std::string& s) {
  std::string out;
  for (char ch : s) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out;
}

namespace {

// "128x256 m1", "128x256 m3", "128x256 m37" → "128x256 m1,3,37" (shapes ending in m<n> / rows<n>).
std::string compact_shapes(const std::vector<std::string>& shapes) {
  std::vector<std::string> keys;
  std::map<std::string, std::string> numbers;
  for (const std::string& sh : shapes) {
    size_t digits = sh.size();
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(sh[digits - 1]))) --digits;
    const bool counted = digits < sh.size() && digits > 0 && (sh[digits - 1] == 'm' || sh.compare(0, digits, "rows") == 0 ||
                                                               (digits >= 4 && sh.compare(digits - 4, 4, "rows") == 0));
    const std::string key = counted ? sh.substr(0, digits) : sh;
    if (!numbers.count(key)) keys.push_back(key);
    if (counted) numbers[key] += (numbers[key].empty() ? "" : ",") + sh.substr(digits);
    else numbers[key];
  }
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + k + numbers[k];
  return out;
}

}  // namespace

void print_coverage(std::ostream& out) {
  const auto& cases = all_cases();
  const auto& columns = format_columns();
  std::vector<std::string> ops;
  for (const OpCase& c : cases) {
    if (std::find(ops.begin(), ops.end(), c.op) == ops.end()) ops.push_back(c.op);
  }
  std::string tier_list;
  for (const Target& t : targets()) tier_list += (tier_list.empty() ? "" : " ") + t.name;
  const size_t tiers = targets().size();

  // cell[op][column] = cases that exercise the column (each runs on every target).
  std::map<std::string, std::map<std::string, int>> cell;
  int skipped = 0;
  for (const OpCase& c : cases) {
    if (!c.skip.empty()) {
      ++skipped;
      continue;
    }
    for (const std::string& f : c.formats) ++cell[c.op][f];
  }
  out << "k3 op parity: coverage of the CPU backend's coarse ops (" << cases.size() << " cases x " << tiers
      << " targets = " << cases.size() * tiers << " tests)\n"
      << "targets: CPU tiers " << tier_list << " (K3_CPU_ISA per test); CUDA: not registered (see harness.h)\n"
      << "cell: shapes x tiers = cases exercising the format x targets each runs on; '-': the op takes no weight\n"
      << "of that format; vec: fp32 vectors only (norm weights, AttnRes scores, router bias) or no weight\n"
      << "references: linear = float64 materialize(W)·x; rms_norm, attn_res_mix_norm, gated_activation, route =\n"
      << "float64 in the harness; kda, mla, moe, mlp = per-block float64 reference (tests/model/reference_forward:\n"
      << "kda_block, mla_block, ffn_block) on each family's tiny checkpoint layer\n\n";
  size_t label = 18;
  std::vector<size_t> width;
  for (const std::string& col : columns) {
    size_t w = col.size();
    for (const std::string& op : ops) {
      const int n = cell[op][col];
      if (n > 0) w = std::max(w, std::to_string(n).size() + 1 + std::to_string(tiers).size());
    }
    width.push_back(w + 2);
  }
  const auto print_row = [&](const std::string& head, const std::function<std::string(size_t)>& text) {
    std::ostringstream row;
    row << std::left << std::setw(static_cast<int>(label)) << head;
    for (size_t i = 0; i < columns.size(); ++i) row << std::setw(static_cast<int>(width[i])) << text(i);
    std::string line = row.str();
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  };
  print_row("op \\ format", [&](size_t i) { return columns[i]; });
  for (const std::string& op : ops) {
    print_row(op, [&](size_t i) {
      const int n = cell[op][columns[i]];
      return n > 0 ? std::to_string(n) + "x" + std::to_string(tiers) : std::string("-");
    });
  }

  out << "\nshapes and weight sources per op and format (each case on every target):\n";
  for (const std::string& op : ops) {
    for (const std::string& col : columns) {
      // source -> its shapes, compacted ("128x256 m1,3,37"); then sources grouped by shapes.
      std::vector<std::string> order;
      std::map<std::string, std::vector<std::string>> shapes_of;
      for (const OpCase& c : cases) {
        if (c.op != op || !c.skip.empty() || std::find(c.formats.begin(), c.formats.end(), col) == c.formats.end()) continue;
        if (!shapes_of.count(c.source)) order.push_back(c.source);
        shapes_of[c.source].push_back(c.shape);
      }
      if (order.empty()) continue;
      std::vector<std::string> shape_order;
      std::map<std::string, std::vector<std::string>> sources_of;
      for (const std::string& src : order) {
        const std::string shapes = compact_shapes(shapes_of[src]);
        if (!sources_of.count(shapes)) shape_order.push_back(shapes);
        sources_of[shapes].push_back(src);
      }
      out << "  " << op << " x " << col << "\n";
      for (const std::string& shapes : shape_order) {
        std::string line = "    " + shapes + ":";
        for (const std::string& src : sources_of[shapes]) {
          if (line.size() + src.size() > 110) {
            out << line << "\n";
            line = "      ";
          }
          line += " " + src + ";";
        }
        line.pop_back();
        out << line << "\n";
      }
    }
  }
  if (skipped > 0) {
    out << "\nnot expressible (registered, skipped):\n";
    std::vector<std::string> reasons;
    std::map<std::string, std::string> ops_of;
    for (const OpCase& c : cases) {
      if (c.skip.empty()) continue;
      if (!ops_of.count(c.skip)) reasons.push_back(c.skip);
      std::string& list = ops_of[c.skip];
      if (list.find(c.op + " ") == std::string::npos) list += c.op + " ";
    }
    for (const std::string& r : reasons) out << "  " << ops_of[r] << "- " << r << "\n";
  }
}

}  // namespace k3::op_parity
