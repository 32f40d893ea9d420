// runtime/distributed/plan_shapes.h - the concrete shapes of a plan's values for one microbatch:
// plan.json's value types with their symbolic dims bound by the graph inputs' tensors. The ranks
// declare them to the communicator (communicator.h's shape keys), so messages need no header.
//
// Guarantees: a shape is given only when every dim is static or a symbol bound consistently (a
// symbol seen with two sizes binds nothing); ranks given the same plan and inputs agree.
// Static-batch exports: an export that fixed the batch writes its rows as a static dim into every
// value type. When a microbatch's rows differ from that batch, the plan's static dims no longer
// say which of them are rows (a [16, 32] activation and a [16, 32] weight look alike), so such a
// shape is not declared: it is `learned`, its key's first message carrying the header. A value's
// shape is still a function of the microbatch's rows there (the graph's other dims are fixed), so
// later messages of the key travel without one.
// Complexity: bind is O(the tensors' dims); shapeOf is O(the value's dims + log values).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "plan/plan_file.h"
#include "runtime/engine/tensors.h"

namespace cleave::runtime::distributed {

// Sizes of symbolic dims, as one microbatch's inputs have them.
struct SymbolSizes {
  std::map<std::string, std::int64_t> sizes;
  std::set<std::string> conflicting;
  // A bound tensor's rows (dim 0) differ from the static rows its plan type has: an export with a
  // fixed batch, run on microbatches of another size.
  bool rowsDifferFromExport = false;
};

struct MessageShape {
  at::ScalarType type;
  std::vector<std::int64_t> dims;
  // False: the plan fixes the shape for these rows but cannot tell it (rowsDifferFromExport); the
  // communicator learns it from the key's first message, and `dims` are the export's.
  bool declared = true;
};

// Dense numbers for the distinct shapes of a microbatch's inputs (every input's dims, in name
// order), numbered as first seen. Message shapes follow the inputs' shapes (rows, and a sequence
// length that may change every step or microbatch), so a shape key made from the number names one
// set of message shapes. Every rank of a pipeline reads the same microbatches in the same order
// (the data is every rank's; nothing is exchanged), so the ranks number them alike.
// Complexity: classOf O(the inputs' dims x log classes).
class ShapeClasses {
public:
  std::int64_t classOf(const TensorMap& inputs);
  std::size_t size() const { return classes_.size(); }

private:
  std::map<std::vector<std::int64_t>, std::int64_t> classes_;
};

class PlanShapes {
public:
  explicit PlanShapes(const std::vector<plan::PlanFileValue>& values);
  // The plan's type of `name`, or null.
  const plan::PlanFileValue* value(const std::string& name) const;
  // The symbols' sizes in `tensors` (values of the plan by name, e.g. a microbatch's inputs).
  SymbolSizes bind(const TensorMap& tensors) const;
  // `name`'s dtype and dims under `symbols`, when the plan determines them (declared), or when it
  // determines them only as a function of the rows (not declared: see above).
  std::optional<MessageShape> shapeOf(const std::string& name, const SymbolSizes& symbols) const;
  // Whether `tensor` fits value `name` whose dim 0 is rows (data split into batches): its dtype,
  // rank and every static dim after the first; a value the plan leaves open fits.
  Status checkRows(const std::string& name, const at::Tensor& tensor) const;

private:
  std::map<std::string, plan::PlanFileValue> values_;
};

} // namespace cleave::runtime::distributed
