#include "runtime/distributed/distributed_run.h"

#include <map>
#include <set>

#include "runtime/model/cut_model.h"
#include "runtime/model/microbatch.h"
#include "pipeline/schedule.h"

namespace cleave::runtime::distributed {

namespace {
// Who makes and who reads each value, by plan index; values get dense ids for message tags.
struct ValueRoutes {
  std::map<std::string, std::uint32_t> id;
  std::map<std::string, int> producerRank; // values made by a submodule (not graph inputs)
  std::map<std::string, std::set<int>> readerRanks;
};

ValueRoutes routeValues(const CutModel& model, int world) {
  ValueRoutes routes;
  auto idOf = [&](const std::string& name) {
    routes.id.emplace(name, static_cast<std::uint32_t>(routes.id.size()));
  };
  for (std::size_t i = 0; i < model.size(); ++i) {
    int rank = pipeline::stageRank(i, world);
    for (const std::string& name : model.stepInputs(i)) {
      idOf(name);
      routes.readerRanks[name].insert(rank);
    }
    for (const std::string& name : model.stepOutputs(i)) {
      idOf(name);
      routes.producerRank[name] = rank;
    }
  }
  for (const std::string& name : model.graphOutputs()) {
    idOf(name);
    routes.readerRanks[name].insert(0); // rank 0 gathers the outputs
  }
  return routes;
}

std::uint32_t tagOf(const ValueRoutes& routes, const std::string& name, std::size_t microbatch) {
  return static_cast<std::uint32_t>(microbatch * routes.id.size() + routes.id.at(name));
}

class RankRunner {
public:
  RankRunner(CutModel& model, Communicator& comm, const ValueRoutes& routes)
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
      for (const auto& [name, producer] : routes_.producerRank) {
        auto readers = routes_.readerRanks.find(name);
        if (readers == routes_.readerRanks.end())
          continue;
        std::optional<MessageShape> shape = shapes.shapeOf(name, symbols);
        if (!shape)
          continue;
        declared_.insert({rows, routes_.id.at(name)});
        if (!shape->declared) // keyed all the same: the key's first message carries its shape
          continue;
        for (int reader : readers->second)
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
        outputs[m][name] = toDense(values[m].at(name));
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
    auto producer = routes_.producerRank.find(name);
    if (values.count(name) || producer == routes_.producerRank.end() || producer->second == me_)
      return {};
    CLEAVE_TRY(at::Tensor tensor, comm_.recv(producer->second, tagOf(routes_, name, microbatch), declaredKey(name, microbatch)));
    values[name] = std::move(tensor);
    return {};
  }

  Status receiveInputs(std::size_t step, TensorMap& values, std::size_t microbatch) {
    for (const std::string& name : model_.stepInputs(step))
      CLEAVE_CHECK(receive(name, values, microbatch));
    return {};
  }

  Status sendToReaders(const std::string& name, const at::Tensor& tensor, std::size_t microbatch) {
    auto readers = routes_.readerRanks.find(name);
    if (readers == routes_.readerRanks.end())
      return {};
    for (int rank : readers->second)
      if (rank != me_)
        CLEAVE_CHECK(comm_.send(tensor, rank, tagOf(routes_, name, microbatch), declaredKey(name, microbatch)));
    return {};
  }

  // A message's shape key: its value and its microbatch's rows (never 0: no key).
  std::uint64_t keyOf(const std::string& name, std::size_t microbatch) const {
    return 1 + static_cast<std::uint64_t>(rows_[microbatch]) * routes_.id.size() + routes_.id.at(name);
  }
  // Its key when the plan fixes its shape for these rows (declared or learned), else 0 (a header
  // with every message).
  std::uint64_t declaredKey(const std::string& name, std::size_t microbatch) const {
    if (microbatch >= rows_.size() || !declared_.count({rows_[microbatch], routes_.id.at(name)}))
      return 0;
    return keyOf(name, microbatch);
  }

  CutModel& model_;
  Communicator& comm_;
  const ValueRoutes& routes_;
  int me_;
  std::vector<std::int64_t> rows_;                              // per microbatch
  std::set<std::int64_t> declaredRows_;                         // row counts already declared
  std::set<std::pair<std::int64_t, std::uint32_t>> declared_;   // (rows, value id) keyed: a shape from the plan
};
} // namespace

Expected<CutModel> loadRankModel(const std::string& planDir, int rank, int worldSize, const Backend& acc,
                                 const Backend& cpu) {
  CutModelOptions options;
  options.lowers = [&](std::size_t i) { return pipeline::stageRank(i, worldSize) == rank; };
  return CutModel::load(planDir, acc, cpu, options);
}

Expected<DistributedRunResult> runDistributed(CutModel& model, const TensorMap& inputs, std::int64_t microbatches,
                                              Communicator& comm, const pipeline::Schedule* schedule,
                                              const PlanShapes* shapes) {
  int world = comm.worldSize(), me = comm.rank();
  ValueRoutes routes = routeValues(model, world);
  CLEAVE_TRY(std::vector<TensorMap> chunks, splitMicrobatches(inputs, microbatches));
  if (schedule && (schedule->stages != model.size() || schedule->microbatches != chunks.size() ||
                   schedule->ranks != static_cast<std::uint32_t>(world)))
    return Error(ErrorCode::InvalidArgument) << "the schedule is for " << schedule->stages << " stages, "
                                             << schedule->microbatches << " microbatches and " << schedule->ranks
                                             << " ranks; this run has " << model.size() << ", " << chunks.size()
                                             << " and " << world;
  DistributedRunResult result;
  for (std::size_t i = 0; i < model.size(); ++i)
    if (pipeline::stageRank(i, world) == me)
      result.ownSteps.push_back(model.stepName(i));
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
