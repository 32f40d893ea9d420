#include "runtime/model/minimizer.h"

namespace cleave::runtime {
using ir::NodeId;

namespace {
class Search {
public:
  Search(const ReferenceRun& reference, const Backend& backend, const AllClose& tolerance, MinimizeResult& result)
      : reference_(reference), backend_(backend), tolerance_(tolerance), result_(result) {}

  TrialResult trial(const std::vector<NodeId>& nodes) {
    ++result_.trials;
    return tryNodes(reference_, nodes, backend_, tolerance_);
  }

  void bisect(const std::vector<NodeId>& nodes, TrialResult failing) {
    if (nodes.size() == 1) {
      result_.culprits.push_back({nodes, failing});
      return;
    }
    std::size_t half = nodes.size() / 2;
    std::vector<NodeId> left(nodes.begin(), nodes.begin() + static_cast<std::ptrdiff_t>(half));
    std::vector<NodeId> right(nodes.begin() + static_cast<std::ptrdiff_t>(half), nodes.end());
    TrialResult leftResult = trial(left), rightResult = trial(right);
    if (!leftResult.passed())
      bisect(left, leftResult);
    if (!rightResult.passed())
      bisect(right, rightResult);
    if (leftResult.passed() && rightResult.passed()) // only together: the set is the culprit
      result_.culprits.push_back({nodes, failing});
  }

private:
  const ReferenceRun& reference_;
  const Backend& backend_;
  const AllClose& tolerance_;
  MinimizeResult& result_;
};

std::vector<NodeId> range(const std::vector<NodeId>& nodes, std::size_t begin, std::size_t end) {
  return {nodes.begin() + static_cast<std::ptrdiff_t>(begin), nodes.begin() + static_cast<std::ptrdiff_t>(end)};
}
} // namespace

MinimizeResult minimize(const ReferenceRun& reference, const std::vector<NodeId>& candidates, const Backend& b,
                        const AllClose& tolerance, MinimizeMode mode) {
  MinimizeResult result;
  if (candidates.empty())
    return result;
  Search search(reference, b, tolerance, result);
  TrialResult whole = search.trial(candidates);
  result.wholeFails = !whole.passed();
  switch (mode) {
  case MinimizeMode::Sequential:
    for (NodeId node : candidates)
      if (TrialResult alone = search.trial({node}); !alone.passed())
        result.culprits.push_back({{node}, alone});
    break;
  case MinimizeMode::Binary:
    if (result.wholeFails)
      search.bisect(candidates, whole);
    break;
  case MinimizeMode::Accumulate:
    for (std::size_t end = 1; end <= candidates.size(); ++end)
      if (TrialResult prefix = search.trial(range(candidates, 0, end)); !prefix.passed()) {
        result.culprits.push_back({range(candidates, 0, end), prefix});
        break;
      }
    break;
  case MinimizeMode::Block: {
    if (!result.wholeFails)
      break;
    // The first end whose prefix fails (the whole list does), then the last start that keeps
    // [start, end) failing.
    std::size_t low = 1, high = candidates.size();
    while (low < high) {
      std::size_t mid = (low + high) / 2;
      if (search.trial(range(candidates, 0, mid)).passed())
        low = mid + 1;
      else
        high = mid;
    }
    std::size_t end = low, first = 0, last = end - 1;
    while (first < last) {
      std::size_t mid = (first + last + 1) / 2;
      if (search.trial(range(candidates, mid, end)).passed())
        last = mid - 1;
      else
        first = mid;
    }
    std::vector<NodeId> block = range(candidates, first, end);
    result.culprits.push_back({block, search.trial(block)});
    break;
  }
  }
  return result;
}

} // namespace cleave::runtime
