#include "harness.h"

#include "cuda_ops.h"

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
#include <stdexcept>

namespace k3::op_parity {

// ---- targets --------------------------------------------------------------------------------

const std::vector<Target>& targets() {
  static const std::vector<Target> all = [] {
    std::vector<Target> out;
    for (cpu::CpuIsa isa : cpu::runnable_isas()) out.push_back({cpu::isa_name(isa), TargetKind::Cpu, isa});
    if (cuda_absent_reason().empty()) out.push_back({"cuda", TargetKind::Cuda, cpu::CpuIsa::Scalar});
    return out;
  }();
  return all;
}

std::string cuda_absent_reason() {
  static const std::string reason = []() -> std::string {
    if (cuda_ops() == nullptr) return "not built (configure with -DK3_CUDA=ON)";
    if (cuda_ops()->device().empty()) return "no CUDA device at run time";
    return "";
  }();
  return reason;
}

ScopedTarget::ScopedTarget(const Target& target) {
  if (target.kind != TargetKind::Cpu) {
    cpu_ = false;
    return;
  }
  const char* old = std::getenv("K3_CPU_ISA");
  had_ = old != nullptr;
  if (had_) previous_ = old;
  ::setenv("K3_CPU_ISA", cpu::isa_name(target.isa), 1);
}

ScopedTarget::~ScopedTarget() {
  if (!cpu_) return;
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

Expectation with_tolerance(Expectation e, double tolerance, const std::string& why) {
  e.bound.clear();
  e.tolerance = tolerance;
  e.note += "; CUDA allowance " + number(tolerance) + " of the row's max (" + why + ")";
  return e;
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
  std::optional<Expectation> expectation, cuda_expectation;
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

namespace {

// `first` followed by " item;" per item, wrapped before 110 columns onto lines that start with
// `indent`; the last ';' dropped.
void print_wrapped(std::ostream& out, std::string first, const std::string& indent, const std::vector<std::string>& items) {
  std::string line = std::move(first);
  for (const std::string& item : items) {
    if (line.size() + item.size() > 110) {
      out << line << "\n";
      line = indent;
    }
    line += " " + item + ";";
  }
  line.pop_back();
  out << line << "\n";
}

// The expectation `target` is checked against, and whether it is also checked against the first target.
const Expectation& expectation_for(size_t index, const Target& target, bool* agreement) {
  const OpCase& c = all_cases().at(index);
  CaseResults& r = results(index);
  if (!r.expectation) r.expectation = c.reference();
  *agreement = true;
  if (target.kind != TargetKind::Cuda) return *r.expectation;
  if (!r.cuda_expectation) {
    if (c.cuda_reference) {
      r.cuda_expectation = c.cuda_reference();
    } else {
      if (c.cuda_tolerance <= 0) throw std::logic_error(c.op + " " + c.name + ": no CUDA allowance");
      r.cuda_expectation = with_tolerance(*r.expectation, c.cuda_tolerance, "tolerances.h, CUDA");
    }
  }
  *agreement = !c.cuda_reference;
  return *r.cuda_expectation;
}

}  // namespace

void run_case(size_t index, size_t target) {
  const OpCase& c = all_cases().at(index);
  const Target& t = targets().at(target);
  if (!c.skip.empty()) GTEST_SKIP() << c.skip;
  if (t.kind == TargetKind::Cuda && !c.cuda_skip.empty()) GTEST_SKIP() << c.cuda_skip;
  bool agreement = true;
  const Expectation& e = expectation_for(index, t, &agreement);
  const std::vector<float>& got = output_of(index, target);
  const Verdict vs_ref = compare(e, got);
  ::testing::Test::RecordProperty("error_over_allowance", number(vs_ref.worst_ratio));
  ::testing::Test::RecordProperty("relative_error", number(vs_ref.worst_relative));
  EXPECT_TRUE(vs_ref.failure.empty()) << c.op << " " << c.name << " on " << t.name << " from " << c.source << ": "
                                      << vs_ref.failure << "\n  reference: " << e.note;
  if (target == 0 || !agreement) return;
  const Verdict vs_first = agree(e, got, output_of(index, 0));
  EXPECT_TRUE(vs_first.failure.empty()) << c.op << " " << c.name << ": " << t.name << " vs " << targets()[0].name
                                        << ": " << vs_first.failure;
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

// The cases the CUDA target skips, per reason: the ops and the case names.
void print_cuda_skips(std::ostream& out, const std::vector<OpCase>& cases) {
  std::vector<std::string> reasons;
  std::map<std::string, std::vector<std::string>> cases_of;
  for (const OpCase& c : cases) {
    if (!c.skip.empty() || c.cuda_skip.empty()) continue;
    if (!cases_of.count(c.cuda_skip)) reasons.push_back(c.cuda_skip);
    cases_of[c.cuda_skip].push_back(c.op + " " + c.name);
  }
  if (reasons.empty()) return;
  out << "\nskipped on cuda (the CUDA kernels do not take the shape or weight form):\n";
  for (const std::string& r : reasons) {
    out << "  - " << r << ":\n";
    print_wrapped(out, "     ", "     ", cases_of[r]);
  }
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
  size_t tiers = 0;
  for (const Target& t : targets()) {
    if (t.kind != TargetKind::Cpu) continue;
    tier_list += (tier_list.empty() ? "" : " ") + t.name;
    ++tiers;
  }
  const bool cuda = cuda_absent_reason().empty();
  // Per op: cases the CUDA target runs, of those not skipped on every target.
  std::map<std::string, std::pair<int, int>> cuda_cell;
  int cuda_tests = 0;

  // cell[op][column] = cases that exercise the column (each runs on every target).
  std::map<std::string, std::map<std::string, int>> cell;
  int skipped = 0;
  for (const OpCase& c : cases) {
    if (!c.skip.empty()) {
      ++skipped;
      continue;
    }
    for (const std::string& f : c.formats) ++cell[c.op][f];
    ++cuda_cell[c.op].second;
    if (c.cuda_skip.empty()) ++cuda_cell[c.op].first, ++cuda_tests;
  }
  const std::string cuda_line = cuda ? cuda_ops()->device() + " (" + std::to_string(cuda_tests) + " cases run on it)"
                                     : "absent, " + cuda_absent_reason() + " (its cases are skipped)";
  out << "k3 op parity: coverage of the backends' coarse ops (" << cases.size() << " cases x " << tiers
      << " CPU targets" << (cuda ? " + cuda" : "") << " = " << cases.size() * (tiers + (cuda ? 1 : 0)) << " tests)\n"
      << "targets: CPU tiers " << tier_list << " (K3_CPU_ISA per test); CUDA: " << cuda_line << "\n"
      << "cell: shapes x tiers = cases exercising the format x CPU targets each runs on; '-': the op takes no weight\n"
      << "of that format; vec: fp32 vectors only (norm weights, AttnRes scores, router bias) or no weight\n"
      << "references: linear = float64 materialize(W)·x; rms_norm, attn_res_mix_norm, gated_activation, route =\n"
      << "float64 in the harness; kda, mla, moe, mlp = per-block float64 reference (tests/model/reference_forward:\n"
      << "kda_block, mla_block, ffn_block) on each family's tiny checkpoint layer\n"
      << "cuda: cases of the op the CUDA target runs / cases of the op (in parentheses when the target is absent);\n"
      << "the rest are skipped on CUDA for the reasons listed at the end; the tiny checkpoints' KDA (head dim 32)\n"
      << "and MLA dims are not the fast kernels' (KDA 128; MLA 128/64/128/512): on CUDA their blocks run the\n"
      << "generic attention kernels, as the model does at those dims\n\n";
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
    for (size_t i = 0; i < width.size(); ++i) row << std::setw(static_cast<int>(width[i])) << text(i);
    std::string line = row.str();
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  };
  const size_t cuda_column = columns.size();
  width.push_back(4);
  const auto cell_text = [&](const std::string& op, size_t i) {
    if (i == cuda_column) {
      const auto [run, all] = cuda_cell[op];
      const std::string n = std::to_string(run) + "/" + std::to_string(all);
      return cuda ? n : "(" + n + ")";
    }
    const int n = cell[op][columns[i]];
    return n > 0 ? std::to_string(n) + "x" + std::to_string(tiers) : std::string("-");
  };
  print_row("op \\ format", [&](size_t i) { return i == cuda_column ? std::string("cuda") : columns[i]; });
  for (const std::string& op : ops) print_row(op, [&](size_t i) { return cell_text(op, i); });

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
        print_wrapped(out, "    " + shapes + ":", "      ", sources_of[shapes]);
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
  print_cuda_skips(out, cases);
}

}  // namespace k3::op_parity
