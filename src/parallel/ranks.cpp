#include "parallel/ranks.h"

#include "core/error.h"

namespace k3 {

void check_parallel_layout(const ParallelLayout& layout, const std::string& tensor_field, const std::string& experts_field) {
  const auto in_range = [](int n, const std::string& field) {
    if (n < 1 || n > kMaxParallelRanks) {
      throw Error(Where{"", "", field}, "must be in [1, " + std::to_string(kMaxParallelRanks) + "], got " + std::to_string(n));
    }
  };
  in_range(layout.tensor, tensor_field);
  in_range(layout.experts, experts_field);
  if (layout.tensor > 1 && layout.experts > 1 && layout.experts % layout.tensor != 0) {
    throw Error(Where{"", "", experts_field}, std::to_string(layout.experts) + " is not a multiple of " + tensor_field + " " +
                                                  std::to_string(layout.tensor) +
                                                  " (experts are divided among every rank, in groups of the tensor-parallel size)");
  }
}

}  // namespace k3
