// runtime/distributed/plan_shapes.h - the concrete shapes of a plan's values for one microbatch:
// plan.json's value types with their symbolic dims bound by the graph inputs' tensors. The ranks
// declare them to the communicator (communicator.h's shape keys), so messages need no header.
//
// Guarantees: a shape is given only when every dim is static or a symbol bound consistently (a
// symbol seen with two sizes binds nothing); ranks given the same plan and inputs agree.
// Complexity: bind is O(the tensors' dims); shapeOf is O(the value's dims + log values).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "plan/plan_file.h"
#include "runtime/tensors.h"

namespace cleave::runtime::distributed {

// Sizes of symbolic dims, as one microbatch's inputs have them.
struct SymbolSizes {
  std::map<std::string, std::int64_t> sizes;
  std::set<std::string> conflicting;
};

struct MessageShape {
  at::ScalarType type;
  std::vector<std::int64_t> dims;
};

class PlanShapes {
public:
  explicit PlanShapes(const std::vector<plan::PlanFileValue>& values);
  // The plan's type of `name`, or null.
  const plan::PlanFileValue* value(const std::string& name) const;
  // The symbols' sizes in `tensors` (values of the plan by name, e.g. a microbatch's inputs).
  SymbolSizes bind(const TensorMap& tensors) const;
  // `name`'s dtype and dims under `symbols`, when the plan determines them.
  std::optional<MessageShape> shapeOf(const std::string& name, const SymbolSizes& symbols) const;
  // Whether `tensor` fits value `name` whose dim 0 is rows (data split into batches): its dtype,
  // rank and every static dim after the first; a value the plan leaves open fits.
  Status checkRows(const std::string& name, const at::Tensor& tensor) const;

private:
  std::map<std::string, plan::PlanFileValue> values_;
};

} // namespace cleave::runtime::distributed
