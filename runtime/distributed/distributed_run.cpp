#include "runtime/distributed/distributed_run.h"

#include <map>
#include <set>

#include "runtime/cut_model.h"
#include "runtime/microbatch.h"

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
    int rank = static_cast<int>(i % static_cast<std::size_t>(world));
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
      : model_(model), comm_(comm), routes_(routes), me_(comm.rank()), world_(comm.worldSize()) {}

  // One microbatch through this rank's submodules; the plan outputs it gathers (rank 0).
  Expected<TensorMap> run(const TensorMap& inputs, std::size_t microbatch) {
    TensorMap values = inputs;
    for (std::size_t i = 0; i < model_.size(); ++i) {
      if (static_cast<int>(i % static_cast<std::size_t>(world_)) != me_)
        continue;
      CLEAVE_CHECK(receiveInputs(i, values, microbatch));
      CLEAVE_TRY(TensorMap results, model_.runStep(i, values));
      for (auto& [name, tensor] : results) {
        CLEAVE_CHECK(sendToReaders(name, tensor, microbatch));
        values[name] = std::move(tensor);
      }
    }
    if (me_ != 0)
      return TensorMap{};
    TensorMap outputs;
    for (const std::string& name : model_.graphOutputs()) {
      CLEAVE_CHECK(receive(name, values, microbatch));
      outputs[name] = toDense(values.at(name));
    }
    return outputs;
  }

private:
  Status receive(const std::string& name, TensorMap& values, std::size_t microbatch) {
    auto producer = routes_.producerRank.find(name);
    if (values.count(name) || producer == routes_.producerRank.end() || producer->second == me_)
      return {};
    CLEAVE_TRY(at::Tensor tensor, comm_.recv(producer->second, tagOf(routes_, name, microbatch)));
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
        CLEAVE_CHECK(comm_.send(tensor, rank, tagOf(routes_, name, microbatch)));
    return {};
  }

  CutModel& model_;
  Communicator& comm_;
  const ValueRoutes& routes_;
  int me_, world_;
};
} // namespace

Expected<CutModel> loadRankModel(const std::string& planDir, int rank, int worldSize, const Backend& acc,
                                 const Backend& cpu) {
  return CutModel::load(planDir, acc, cpu, [&](std::size_t i) {
    return static_cast<int>(i % static_cast<std::size_t>(worldSize)) == rank;
  });
}

Expected<DistributedRunResult> runDistributed(CutModel& model, const TensorMap& inputs, std::int64_t microbatches,
                                              Communicator& comm) {
  int world = comm.worldSize(), me = comm.rank();
  ValueRoutes routes = routeValues(model, world);
  CLEAVE_TRY(std::vector<TensorMap> chunks, splitMicrobatches(inputs, microbatches));
  DistributedRunResult result;
  for (std::size_t i = 0; i < model.size(); ++i)
    if (static_cast<int>(i % static_cast<std::size_t>(world)) == me)
      result.ownSteps.push_back(model.stepName(i));
  RankRunner runner(model, comm, routes);
  std::vector<TensorMap> outputs;
  for (std::size_t m = 0; m < chunks.size(); ++m) {
    CLEAVE_TRY(TensorMap part, runner.run(chunks[m], m));
    outputs.push_back(std::move(part));
  }
  CLEAVE_CHECK(comm.finish());
  if (me == 0)
    result.outputs = mergeMicrobatches(outputs);
  return result;
}

} // namespace cleave::runtime::distributed
