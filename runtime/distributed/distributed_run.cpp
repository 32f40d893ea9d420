#include "runtime/distributed/distributed_run.h"

#include <map>
#include <set>

#include "runtime/distributed/message_name.h"
#include "runtime/model/cut_model.h"
#include "runtime/model/microbatch.h"
#include "pipeline/schedule.h"

namespace cleave::runtime::distributed {

namespace {
// The ranks each value of the plan travels between, by value id (LoadedPlan's routes placed on
// the world): the rank that makes it (-1: a graph input, which every rank has) and the ranks that
// read it, rank 0 among them for a plan output (it gathers them).
struct RankRoutes {
  const LoadedPlan* plan = nullptr;
  std::vector<int> producerRank;
  std::vector<std::vector<int>> readerRanks; // ascending, no repeats
  std::uint32_t id(const std::string& name) const { return *plan->valueId(name); }
  std::uint32_t values() const { return static_cast<std::uint32_t>(producerRank.size()); }
};

RankRoutes rankRoutes(const LoadedPlan& plan) {
  RankRoutes routes;
  routes.plan = &plan;
  for (std::uint32_t v = 0; v < plan.values(); ++v) {
    const ValueRoute& route = plan.route(v);
    routes.producerRank.push_back(route.producer == kGraphInput ? -1 : plan.submodules()[route.producer].rank);
    std::set<int> readers;
    for (std::uint32_t reader : route.readers)
      readers.insert(plan.submodules()[reader].rank);
    if (route.planOutput)
      readers.insert(0);
    routes.readerRanks.emplace_back(readers.begin(), readers.end());
  }
  return routes;
}

// A value's messages go forward, once to each reading rank: one reader in the space.
MessageName messageOf(const RankRoutes& routes, const std::string& name, std::size_t microbatch) {
  return {microbatch, routes.id(name), 0, false};
}

class RankRunner {
public:
  RankRunner(CutModel& model, Communicator& comm, const RankRoutes& routes)
      : model_(model), comm_(comm), routes_(routes), me_(comm.rank()) {}

  // Declares to the communicator the shape of every message this rank sends or receives for the
  // microbatches, where `shapes` determines it (those travel without a header; any other value,
  // data-dependent shapes included, keeps a header on every message).
  void declareShapes(const PlanShapes& shapes, const std::vector<TensorMap>& chunks) {
    for (std::size_t m = 0; m < chunks.size(); ++m) {
      const std::int64_t rows = chunks[m].empty() || chunks[m].begin()->second.dim() == 0 ? -1
                                                                                          : chunks[m].begin()->second.size(0);
      rows_.push_back(rows);
      if (rows < 0 || declaredRows_.count(rows))
        continue;
      declaredRows_.insert(rows);
      const SymbolSizes symbols = shapes.bind(chunks[m]);
      for (std::uint32_t v = 0; v < routes_.values(); ++v) {
        const int producer = routes_.producerRank[v];
        const std::string& name = routes_.plan->route(v).name;
        if (producer < 0 || routes_.readerRanks[v].empty())
          continue;
        std::optional<MessageShape> shape = shapes.shapeOf(name, symbols);
        if (!shape)
          continue;
        declared_.insert({rows, v});
        if (!shape->declared) // keyed all the same: the key's first message carries its shape
          continue;
        for (int reader : routes_.readerRanks[v])
          if (reader != producer && (reader == me_ || producer == me_))
            comm_.declareShape(reader == me_ ? producer : reader, keyOf(name, m), shape->type, shape->dims);
      }
    }
  }

  // This rank's forwards in order (pipeline::rankComputeActions; stage = submodule); each
  // microbatch's values are dropped after its last one here (rank 0 keeps the plan outputs it
  // made). Returns each microbatch's plan outputs (rank 0; gathered from the ranks that made them)
  // or nothing.
  Expected<std::vector<TensorMap>> run(const std::vector<TensorMap>& chunks, const std::vector<pipeline::Action>& actions) {
    std::vector<TensorMap> values(chunks.begin(), chunks.end());
    std::vector<std::size_t> lastAction(chunks.size(), 0);
    for (std::size_t k = 0; k < actions.size(); ++k)
      lastAction[actions[k].microbatch] = k;
    for (std::size_t k = 0; k < actions.size(); ++k) {
      const std::size_t step = actions[k].stage, m = actions[k].microbatch;
      CLEAVE_CHECK(receiveInputs(step, values[m], m));
      CLEAVE_TRY(TensorMap results, model_.runStep(step, values[m]));
      for (auto& [name, tensor] : results) {
        CLEAVE_CHECK(sendToReaders(name, tensor, m));
        values[m][name] = std::move(tensor);
      }
      if (lastAction[m] == k)
        keepOutputs(values[m]);
    }
    if (me_ != 0)
      return std::vector<TensorMap>{};
    std::vector<TensorMap> outputs(chunks.size());
    for (std::size_t m = 0; m < chunks.size(); ++m) {
      for (const std::string& name : model_.graphOutputs()) {
        CLEAVE_CHECK(receive(name, values[m], m));
        outputs[m][name] = denseFromPrivateLayout(values[m].at(name));
      }
      values[m].clear();
    }
    return outputs;
  }

private:
  // What a microbatch's values shrink to once this rank is done with it: rank 0 keeps the plan
  // outputs it holds (the others send theirs), every other rank nothing.
  void keepOutputs(TensorMap& values) const {
    TensorMap kept;
    if (me_ == 0)
      for (const std::string& name : model_.graphOutputs())
        if (auto found = values.find(name); found != values.end())
          kept.emplace(name, found->second);
    values = std::move(kept);
  }

  Status receive(const std::string& name, TensorMap& values, std::size_t microbatch) {
    const int producer = routes_.producerRank[routes_.id(name)];
    if (values.count(name) || producer < 0 || producer == me_)
      return {};
    CLEAVE_TRY(std::uint32_t tag, messageTag(space(), messageOf(routes_, name, microbatch)));
    Expected<at::Tensor> tensor = comm_.recv(producer, tag, declaredKey(name, microbatch));
    if (!tensor)
      return Error(tensor.error().code()) << "microbatch " << microbatch << ", receiving '" << name << "' from rank "
                                          << producer << ": " << tensor.error().message();
    values[name] = std::move(*tensor);
    return {};
  }

  Status receiveInputs(std::size_t step, TensorMap& values, std::size_t microbatch) {
    for (const std::string& name : model_.stepInputs(step))
      if (Status received = receive(name, values, microbatch); !received) {
        const pipeline::Action forward{static_cast<std::uint32_t>(step), pipeline::ActionType::Forward,
                                       static_cast<std::uint32_t>(microbatch)};
        return std::move(received.error().withContext("submodule '" + model_.plan().file().submodules.at(step).name +
                                                      "', action " + pipeline::formatAction(forward)));
      }
    return {};
  }

  Status sendToReaders(const std::string& name, const at::Tensor& tensor, std::size_t microbatch) {
    CLEAVE_TRY(std::uint32_t tag, messageTag(space(), messageOf(routes_, name, microbatch)));
    for (int rank : routes_.readerRanks[routes_.id(name)])
      if (rank != me_)
        CLEAVE_CHECK(comm_.send(tensor, rank, tag, declaredKey(name, microbatch)));
    return {};
  }

  MessageSpace space() const { return {routes_.values(), 1}; }
  // A message's shape key: its value and its microbatch's rows.
  std::uint64_t keyOf(const std::string& name, std::size_t microbatch) const {
    return messageShapeKey(space(), messageOf(routes_, name, microbatch), rows_[microbatch]);
  }
  // Its key when the plan fixes its shape for these rows (declared or learned), else 0 (a header
  // with every message).
  std::uint64_t declaredKey(const std::string& name, std::size_t microbatch) const {
    if (microbatch >= rows_.size() || !declared_.count({rows_[microbatch], routes_.id(name)}))
      return 0;
    return keyOf(name, microbatch);
  }

  CutModel& model_;
  Communicator& comm_;
  const RankRoutes& routes_;
  int me_;
  std::vector<std::int64_t> rows_;                              // per microbatch
  std::set<std::int64_t> declaredRows_;                         // row counts already declared
  std::set<std::pair<std::int64_t, std::uint32_t>> declared_;   // (rows, value id) keyed: a shape from the plan
};
} // namespace

Expected<CutModel> loadRankModel(const std::string& planDir, int rank, int worldSize, const Backend& acc,
                                 const Backend& cpu) {
  CutModelOptions options;
  options.rank = rank;
  options.worldSize = worldSize;
  return CutModel::load(planDir, acc, cpu, options);
}

Expected<DistributedRunResult> runDistributed(CutModel& model, const TensorMap& inputs, std::int64_t microbatches,
                                              Communicator& comm, const pipeline::Schedule* schedule,
                                              const PlanShapes* shapes) {
  int world = comm.worldSize(), me = comm.rank();
  if (model.plan().worldSize() != world)
    return Error(ErrorCode::InvalidArgument) << "the model was placed on " << model.plan().worldSize()
                                             << " ranks; this run has " << world;
  RankRoutes routes = rankRoutes(model.plan());
  CLEAVE_TRY(std::vector<TensorMap> chunks, splitMicrobatches(inputs, microbatches));
  if (schedule && (schedule->stages != model.size() || schedule->microbatches != chunks.size() ||
                   schedule->ranks != static_cast<std::uint32_t>(world)))
    return Error(ErrorCode::InvalidArgument) << "the schedule is for " << schedule->stages << " stages, "
                                             << schedule->microbatches << " microbatches and " << schedule->ranks
                                             << " ranks; this run has " << model.size() << ", " << chunks.size()
                                             << " and " << world;
  DistributedRunResult result;
  for (const PlacedSubmodule& sub : model.plan().submodules())
    if (sub.rank == me)
      result.ownSteps.push_back(sub.name);
  RankRunner runner(model, comm, routes);
  if (shapes)
    runner.declareShapes(*shapes, chunks);
  const std::vector<pipeline::Action> forwards =
      pipeline::rankComputeActions(schedule, static_cast<std::uint32_t>(model.size()), static_cast<std::uint32_t>(chunks.size()),
                                   static_cast<std::uint32_t>(world), static_cast<std::uint32_t>(me), false);
  CLEAVE_TRY(std::vector<TensorMap> outputs, runner.run(chunks, forwards));
  CLEAVE_CHECK(comm.finish());
  if (me == 0)
    result.outputs = mergeMicrobatches(outputs);
  return result;
}

} // namespace cleave::runtime::distributed
