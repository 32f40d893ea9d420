// runtime/distributed/pipeline_train_messages.cpp - the messages a pipeline step sends and receives: their shapes declared from the plan, what
// each action sends, and each channel's receives planned in its sender's order
// (pipeline_train_state.h).
#include "runtime/distributed/pipeline_train_state.h"

namespace cleave::runtime::distributed {

void PipelineTrainer::State::declareMessageShapes(const TensorMap& chunk, std::size_t m) {
  const SymbolSizes symbols = planShapes->bind(chunk);
  for (std::uint32_t v = 0; v < plan->values(); ++v) {
    const ValueRoute& route = plan->route(v);
    const std::string& name = route.name;
    const int made = route.producer;
    if (made == kGraphInput)
      continue;
    for (int reader : route.readers) {
      int from = stages[made].rank, to = stages[reader].rank;
      if (from == to || (from != rank && to != rank))
        continue;
      if (std::optional<MessageShape> shape = planShapes->shapeOf(name, symbols)) {
        planGivesShape.insert({microbatchShapes[m], v});
        if (!shape->declared) // keyed all the same: the key's first message carries its shape
          continue;
        int peer = from == rank ? to : from;
        comm->declareShape(peer, shapeKey(m, name, reader, false), shape->type, shape->dims);
        comm->declareShape(peer, shapeKey(m, name, reader, true), shape->type, shape->dims);
      }
    }
  }
}

Expected<std::vector<OutgoingMessage>> PipelineTrainer::State::sendsOf(int sender, const pipeline::Action& a) const {
  using pipeline::ActionType;
  std::vector<OutgoingMessage> out;
  const int i = static_cast<int>(a.stage);
  const std::size_t m = a.microbatch;
  if (a.type == ActionType::Forward) {
    for (const std::string& name : stages[i].outputs)
      for (std::uint32_t reader : readersOf(name))
        if (stages[reader].rank != sender) {
          CLEAVE_TRY(std::uint32_t t, tag(m, name, static_cast<int>(reader), false));
          out.push_back({stages[reader].rank, t, shapeKey(m, name, static_cast<int>(reader), false), name,
                         {reader, ActionType::Forward, a.microbatch}});
        }
  } else if (a.type == ActionType::Backward || a.type == ActionType::BackwardInput) {
    std::vector<std::string> made; // the inputs other stages make: the stage's leaves, by name
    for (const std::string& name : stages[i].inputs)
      if (producerOf(name) != kGraphInput)
        made.push_back(name);
    std::sort(made.begin(), made.end());
    for (const std::string& name : made) {
      const int producer = producerOf(name);
      if (stages[producer].rank == sender)
        continue;
      CLEAVE_TRY(std::uint32_t t, tag(m, name, i, true));
      out.push_back({stages[producer].rank, t, shapeKey(m, name, i, true), name,
                     {static_cast<std::uint32_t>(producer), ActionType::Backward, a.microbatch}});
    }
  }
  return out;
}

Expected<ReceiveOrder> PipelineTrainer::State::planReceives(const pipeline::Schedule* schedule, std::size_t microbatches,
                                                            const std::vector<pipeline::Action>& actions,
                                                            bool backward) const {
  const auto stageCount = static_cast<std::uint32_t>(stages.size());
  const auto ranks = static_cast<std::uint32_t>(worldSize);
  return ReceiveOrder::plan(
      rank, worldSize, actions,
      [&](int peer) {
        return pipeline::rankComputeActions(schedule, stageCount, static_cast<std::uint32_t>(microbatches), ranks,
                                            static_cast<std::uint32_t>(peer), backward);
      },
      [&](int sender, const pipeline::Action& a) { return sendsOf(sender, a); });
}

std::vector<double> PipelineTrainer::State::startMicrobatches(const std::vector<TensorMap>& chunks) {
  std::vector<double> shares;
  microbatchShapes.clear();
  // Classes are numbered densely as first seen: this step's new ones are those from the count before it on,
  // met in increasing order.
  auto next = static_cast<std::int64_t>(shapeClasses.size());
  for (const TensorMap& chunk : chunks) {
    microbatchShapes.push_back(shapeClasses.classOf(chunk));
    shares.push_back(static_cast<double>(chunk.begin()->second.size(0)) / static_cast<double>(options.batch));
  }
  for (std::size_t m = 0; m < chunks.size(); ++m)
    if (microbatchShapes[m] == next) {
      declareMessageShapes(chunks[m], m);
      ++next;
    }
  return shares;
}

Expected<ReceiveOrder*> PipelineTrainer::State::restartReceives(const pipeline::Schedule* schedule,
                                                                std::size_t microbatches,
                                                                const std::vector<pipeline::Action>& actions,
                                                                bool backward) {
  if (!receiveOrder || receiveOrder->schedule != schedule || receiveOrder->shapes != microbatchShapes ||
      receiveOrder->backward != backward) {
    CLEAVE_TRY(ReceiveOrder planned, planReceives(schedule, microbatches, actions, backward));
    receiveOrder = PlannedReceives{schedule, microbatchShapes, backward, std::move(planned)};
  }
  receiveOrder->order.restart();
  return &receiveOrder->order;
}

} // namespace cleave::runtime::distributed
