#include "runtime/training/checkpoint.h"

#include <c10/core/GradMode.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <type_traits>

#include "base/file_io.h"
#include "base/json.h"
#include "base/strings.h"
#include "ir/graph.h"
#include "runtime/engine/forward_replay.h"
#include "runtime/engine/tensors.h"
#include "runtime/model/tensor_files.h"
#include "runtime/training/train.h"

namespace cleave::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kFormat = "cleave-checkpoint";
constexpr std::int64_t kFormatVersion = 1;
constexpr int kMaxCheckpointRanks = 1 << 16; // a manifest claiming more is damaged

// libtorch keys an optimizer's per-parameter state by the parameter's TensorImpl pointer.
void* stateKey(const at::Tensor& param) { return param.unsafeGetTensorImpl(); }

torch::optim::OptimizerParamState* findState(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  auto& states = optimizer.state();
  auto found = states.find(stateKey(param));
  return found == states.end() ? nullptr : found->second.get();
}

void setState(torch::optim::Optimizer& optimizer, const at::Tensor& param,
              std::unique_ptr<torch::optim::OptimizerParamState> state) {
  auto& states = optimizer.state();
  states[stateKey(param)] = std::move(state);
}

std::string describeTensor(const at::Tensor& tensor) {
  return std::string(ir::dtypeName(dtypeOf(tensor.scalar_type()))) +
         ir::formatShape(ir::ValueType::tensor(ir::DType::F32, tensor.sizes().vec()).shape);
}

std::string rankFile(const std::string& folder, int rank, const char* extension) {
  return (fs::path(folder) / ("rank-" + std::to_string(rank) + extension)).string();
}

// A parameter's optimizer state as named tensors ("exp_avg", ...) plus AdamW's step (-1: none).
struct SavedState {
  std::string kind; // "", "sgd", "adamw"
  std::int64_t adamwStep = -1;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
};

SavedState saveState(torch::optim::OptimizerParamState* state) {
  SavedState saved;
  if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state)) {
    saved.kind = "sgd";
    if (sgd->momentum_buffer().defined())
      saved.tensors.emplace_back("momentum_buffer", sgd->momentum_buffer());
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(state)) {
    saved.kind = "adamw";
    saved.adamwStep = adamw->step();
    for (auto [name, tensor] : {std::pair<const char*, at::Tensor>{"exp_avg", adamw->exp_avg()},
                                {"exp_avg_sq", adamw->exp_avg_sq()},
                                {"max_exp_avg_sq", adamw->max_exp_avg_sq()}})
      if (tensor.defined())
        saved.tensors.emplace_back(name, tensor);
  }
  return saved;
}

// The optimizer state of one parameter back from the checkpoint's tensors.
Expected<std::unique_ptr<torch::optim::OptimizerParamState>> loadState(const std::string& kind, std::int64_t adamwStep,
                                                                      const TensorMap& tensors, const std::string& prefix) {
  auto take = [&](const char* name) {
    auto found = tensors.find(prefix + name);
    return found == tensors.end() ? at::Tensor() : found->second.clone();
  };
  if (kind == "sgd") {
    auto state = std::make_unique<torch::optim::SGDParamState>();
    state->momentum_buffer(take("momentum_buffer"));
    return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(state));
  }
  if (kind == "adamw") {
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(adamwStep);
    state->exp_avg(take("exp_avg"));
    state->exp_avg_sq(take("exp_avg_sq"));
    state->max_exp_avg_sq(take("max_exp_avg_sq"));
    if (!state->exp_avg().defined() || !state->exp_avg_sq().defined())
      return Error(ErrorCode::ParseError) << "no AdamW moments for " << prefix;
    return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(state));
  }
  return Error(ErrorCode::ParseError) << "unknown optimizer state '" << kind << "' for " << prefix;
}

std::string optimizerKindOf(torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<torch::optim::SGD*>(&optimizer))
    return "sgd";
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer))
    return "adamw";
  return "other";
}

// step-N or step-N.partial: N, and whether partial; none for any other name.
std::optional<std::pair<std::int64_t, bool>> parseFolderName(const std::string& name) {
  if (!name.starts_with("step-"))
    return std::nullopt;
  std::string digits = name.substr(5);
  const bool partial = digits.ends_with(".partial");
  if (partial)
    digits.resize(digits.size() - 8);
  if (digits.size() < 8 || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::pair{std::stoll(digits), partial};
}

// Only what cleave writes into a step folder: the manifest, rank files, and their temporaries.
bool holdsOnlyCheckpointFiles(const fs::path& folder) {
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(error) || !(name.starts_with("rank-") || name.starts_with(kManifest)))
      return false;
  }
  return !error;
}

Status checkIdentity(const nlohmann::json& manifest, const CheckpointIdentity& identity, const std::string& folder) {
  auto differs = [&](const char* what, const std::string& there, const std::string& here) {
    return Error(ErrorCode::InvalidArgument) << "checkpoint " << folder << " was written with " << what << " " << there
                                             << "; this run has " << here;
  };
  if (manifest.at("model").get<std::string>() != identity.model)
    return Error(ErrorCode::InvalidArgument) << "checkpoint " << folder << " was written training "
                                             << manifest.at("model").get<std::string>() << "; this run trains "
                                             << identity.model;
  if (manifest.at("batch").get<std::int64_t>() != identity.batch)
    return differs("--batch", std::to_string(manifest.at("batch").get<std::int64_t>()), std::to_string(identity.batch));
  if (manifest.at("optimizer").get<std::string>() != identity.optimizer)
    return differs("--optimizer", manifest.at("optimizer").get<std::string>(), identity.optimizer);
  if (manifest.at("lr_schedule").get<std::string>() != identity.lrSchedule)
    return differs("the learning-rate schedule", manifest.at("lr_schedule").get<std::string>(), identity.lrSchedule);
  if (manifest.contains("data") && manifest.at("data").get<std::string>() != identity.data)
    return differs("data", manifest.at("data").get<std::string>(), identity.data);
  // The data position: the rows read before the step resumed. They follow from the step while
  // --batch is the checkpoint's (checked above); a manifest that says otherwise is damaged.
  const std::int64_t step = manifest.at("step").get<std::int64_t>();
  if (manifest.value("data_rows_read", step * identity.batch) != step * identity.batch)
    return Error(ErrorCode::ParseError) << "checkpoint " << folder << ": data_rows_read "
                                        << manifest.at("data_rows_read").get<std::int64_t>() << " is not step " << step
                                        << " x --batch " << identity.batch;
  return {};
}

// The rank file's tensors must be the trainer's, in order: names, dtypes and shapes.
Status checkTensors(const nlohmann::json& listed, const RankTrainingState& state, const std::string& what) {
  if (listed.size() != state.parameters.size())
    return Error(ErrorCode::InvalidArgument) << what << " holds " << listed.size() << " trained tensors; this rank trains "
                                             << state.parameters.size();
  for (std::size_t i = 0; i < listed.size(); ++i) {
    const auto& [name, tensor] = state.parameters[i];
    const std::string there = listed[i].at("name").get<std::string>(), type = listed[i].at("type").get<std::string>();
    if (there != name)
      return Error(ErrorCode::InvalidArgument) << what << " holds '" << there << "' where this rank trains '" << name << "'";
    if (type != describeTensor(tensor))
      return Error(ErrorCode::InvalidArgument) << what << ": '" << name << "' is " << type << " there, "
                                               << describeTensor(tensor) << " here";
  }
  return {};
}

} // namespace

std::string checkpointFolder(const std::string& dir, std::int64_t step, bool partial) {
  char name[40];
  std::snprintf(name, sizeof name, "step-%08lld%s", static_cast<long long>(step), partial ? ".partial" : "");
  return (fs::path(dir) / name).string();
}

Expected<std::optional<std::int64_t>> latestCheckpoint(const std::string& dir) {
  std::error_code error;
  if (!fs::exists(dir, error))
    return std::optional<std::int64_t>();
  if (!fs::is_directory(dir, error))
    return Error(ErrorCode::InvalidArgument) << dir << " is not a folder (checkpoints)";
  std::optional<std::int64_t> latest;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    auto parsed = parseFolderName(entry.path().filename().string());
    std::error_code missing; // a folder without a manifest is no checkpoint, not an error
    if (parsed && !parsed->second && fs::is_regular_file(entry.path() / kManifest, missing) &&
        (!latest || parsed->first > *latest))
      latest = parsed->first;
  }
  if (error)
    return Error(ErrorCode::IoError) << dir << ": " << error.message();
  return latest;
}

Status writeRankCheckpoint(const std::string& dir, std::int64_t step, int rank, const RankTrainingState& state) {
  const std::string folder = checkpointFolder(dir, step, true);
  std::error_code error;
  fs::create_directories(folder, error);
  if (error)
    return Error(ErrorCode::IoError) << "cannot create " << folder << ": " << error.message();
  TensorMap tensors;
  Json listed = Json::array(), kinds = Json::array(), adamwSteps = Json::array();
  for (std::size_t i = 0; i < state.parameters.size(); ++i) {
    const auto& [name, param] = state.parameters[i];
    tensors["param." + std::to_string(i)] = param.detach();
    listed.push_back(Json{{"name", name}, {"type", describeTensor(param)}});
    SavedState saved = saveState(findState(*state.optimizer, param));
    for (auto& [stateName, tensor] : saved.tensors)
      tensors["state." + std::to_string(i) + "." + stateName] = tensor;
    kinds.push_back(saved.kind);
    adamwSteps.push_back(saved.adamwStep);
  }
  const GeneratorStates draws = generatorStates();
  tensors["rng"] = draws.cpu;
  if (draws.cuda.defined())
    tensors["rng_cuda"] = draws.cuda;
  CLEAVE_CHECK(writeTensors(tensors, rankFile(folder, rank, ".npz"), {}));
  Json rankJson{{"rank", rank}, {"step", step}, {"tensors", listed}, {"state", kinds}, {"adamw_steps", adamwSteps}};
  return writeFileAtomically(rankFile(folder, rank, ".json"), dumpJson(rankJson));
}

Status completeCheckpoint(const std::string& dir, std::int64_t step, const CheckpointIdentity& identity) {
  const std::string partial = checkpointFolder(dir, step, true), final = checkpointFolder(dir, step);
  Json manifest{{"format", kFormat},       {"version", kFormatVersion},     {"step", step},
                {"ranks", identity.ranks}, {"pipeline_ranks", identity.pipelineRanks}, {"batch", identity.batch},
                {"model", identity.model},
                {"optimizer", identity.optimizer}, {"lr_schedule", identity.lrSchedule},
                {"data", identity.data}, {"data_rows_read", step * identity.batch}};
  CLEAVE_CHECK(writeFileAtomically((fs::path(partial) / kManifest).string(), dumpJson(manifest)));
  std::error_code error;
  if (fs::exists(final, error) && holdsOnlyCheckpointFiles(final)) // an earlier run's step K
    fs::remove_all(final, error);
  fs::rename(partial, final, error);
  if (error)
    return Error(ErrorCode::IoError) << "cannot move " << partial << " into place: " << error.message();
  std::vector<fs::path> older; // listed first: removing while listing would skip entries
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    auto parsed = parseFolderName(entry.path().filename().string());
    if (parsed && parsed->first <= step && entry.path() != fs::path(final) && holdsOnlyCheckpointFiles(entry.path()))
      older.push_back(entry.path());
  }
  for (const fs::path& folder : older)
    fs::remove_all(folder, error); // a failure to remove leaves an old step behind, which is harmless
  return {};
}

namespace {
// Tensor i of a rank file (its value, and its optimizer state when it has one) into parameter k of
// `state`, after checking its dtype and shape.
Status restoreParameter(RankTrainingState& state, std::size_t k, const TensorMap& tensors, const nlohmann::json& rankJson,
                        std::size_t i, const std::string& optimizerKind, const std::string& file) {
  auto& [name, param] = state.parameters[k];
  const std::string index = std::to_string(i);
  auto value = tensors.find("param." + index);
  if (value == tensors.end() || value->second.sizes() != param.sizes() || value->second.scalar_type() != param.scalar_type())
    return Error(ErrorCode::ParseError) << file << ": no value of the shape listed for '" << name << "'";
  c10::NoGradGuard noGrad;
  param.copy_(value->second);
  const std::string kind = rankJson.at("state").at(i).get<std::string>();
  if (kind.empty())
    return {};
  if (kind != optimizerKind)
    return Error(ErrorCode::InvalidArgument) << file << " holds " << kind << " state; this run uses " << optimizerKind;
  CLEAVE_TRY(auto restored,
             loadState(kind, rankJson.at("adamw_steps").at(i).get<std::int64_t>(), tensors, "state." + index + "."));
  setState(*state.optimizer, param, std::move(restored));
  return {};
}

// One rank file of a checkpoint folder: its listing and its tensors.
struct RankFiles {
  std::string jsonPath, npzPath;
  nlohmann::json listing;
  TensorMap tensors;
};

Expected<RankFiles> readRankFiles(const std::string& folder, int rank, bool withTensors) {
  RankFiles files{rankFile(folder, rank, ".json"), rankFile(folder, rank, ".npz"), {}, {}};
  CLEAVE_TRY(std::string text, readFile(files.jsonPath));
  CLEAVE_TRY(files.listing, parseJsonInput(text, files.jsonPath));
  if (withTensors) {
    CLEAVE_TRY(files.tensors, readTensors(files.npzPath, {}));
  }
  return files;
}

// The generators' states a rank file holds ("rng": the CPU's; "rng_cuda": CUDA's, where the run
// had CUDA), set where this process has that generator.
void restoreGenerators(const TensorMap& tensors) {
  GeneratorStates states;
  if (auto cpu = tensors.find("rng"); cpu != tensors.end())
    states.cpu = cpu->second;
  if (auto cuda = tensors.find("rng_cuda"); cuda != tensors.end())
    states.cuda = cuda->second;
  setGeneratorStates(states);
}

// The same layout: this rank's own file, tensor for tensor.
Status restoreOwnRank(const std::string& folder, int rank, RankTrainingState& state, const std::string& optimizerKind) {
  CLEAVE_TRY(RankFiles files, readRankFiles(folder, rank, true));
  return guardJson(files.jsonPath, [&]() -> Status {
    CLEAVE_CHECK(checkTensors(files.listing.at("tensors"), state, files.jsonPath));
    for (std::size_t i = 0; i < state.parameters.size(); ++i)
      CLEAVE_CHECK(restoreParameter(state, i, files.tensors, files.listing, i, optimizerKind, files.npzPath));
    restoreGenerators(files.tensors);
    return {};
  });
}

// Another layout (rank count or replicas): every tensor of this rank found by name ("STAGE/NAME")
// in the first rank file that holds it; the generator's state from the rank of the same number,
// else rank 0. O(listed tensors x log + the bytes of the rank files read).
Status restoreResharded(const std::string& folder, int writtenRanks, int rank, RankTrainingState& state,
                        const std::string& optimizerKind) {
  std::map<std::string, std::pair<int, std::size_t>> where; // name -> (rank file, index there)
  std::vector<RankFiles> files;
  for (int r = 0; r < writtenRanks; ++r) {
    CLEAVE_TRY(RankFiles listed, readRankFiles(folder, r, false));
    CLEAVE_CHECK(guardJson(listed.jsonPath, [&]() -> Status {
      const nlohmann::json& tensors = listed.listing.at("tensors");
      for (std::size_t i = 0; i < tensors.size(); ++i)
        where.emplace(tensors[i].at("name").get<std::string>(), std::pair{r, i});
      return {};
    }));
    files.push_back(std::move(listed));
  }
  std::vector<bool> loaded(files.size(), false);
  auto tensorsOf = [&](int r) -> Expected<const RankFiles*> {
    if (!loaded[r]) {
      CLEAVE_TRY(files[r].tensors, readTensors(files[r].npzPath, {}));
      loaded[r] = true;
    }
    return &files[r];
  };
  for (std::size_t k = 0; k < state.parameters.size(); ++k) {
    const auto& [name, param] = state.parameters[k];
    auto found = where.find(name);
    if (found == where.end()) {
      if (name == kNoParameters) // a rank without stages' parameters trains a placeholder
        continue;
      return Error(ErrorCode::InvalidArgument) << "checkpoint " << folder << " holds no '" << name
                                               << "', which this rank trains";
    }
    CLEAVE_TRY(const RankFiles* from, tensorsOf(found->second.first));
    const std::string type = from->listing.at("tensors").at(found->second.second).at("type").get<std::string>();
    if (type != describeTensor(param))
      return Error(ErrorCode::InvalidArgument) << from->jsonPath << ": '" << name << "' is " << type << " there, "
                                               << describeTensor(param) << " here";
    CLEAVE_CHECK(guardJson(from->jsonPath, [&] {
      return restoreParameter(state, k, from->tensors, from->listing, found->second.second, optimizerKind, from->npzPath);
    }));
  }
  CLEAVE_TRY(const RankFiles* generator, tensorsOf(rank < writtenRanks ? rank : 0));
  restoreGenerators(generator->tensors);
  return {};
}
} // namespace

Expected<int> readRankCheckpoint(const std::string& dir, std::int64_t step, int rank, const CheckpointIdentity& identity,
                                 RankTrainingState& state) {
  const std::string folder = checkpointFolder(dir, step);
  const std::string manifestPath = (fs::path(folder) / kManifest).string();
  CLEAVE_TRY(std::string manifestText, readFile(manifestPath));
  CLEAVE_TRY(nlohmann::json manifest, parseJsonInput(manifestText, manifestPath));
  int writtenRanks = 0, writtenPipelineRanks = 0;
  CLEAVE_CHECK(guardJson(manifestPath, [&]() -> Status {
    if (manifest.at("format").get<std::string>() != kFormat || manifest.at("version").get<std::int64_t>() != kFormatVersion)
      return Error(ErrorCode::InvalidArgument) << manifestPath << " is not a cleave checkpoint of version " << kFormatVersion;
    writtenRanks = manifest.at("ranks").get<int>();
    writtenPipelineRanks = manifest.value("pipeline_ranks", writtenRanks);
    if (writtenRanks < 1 || writtenRanks > kMaxCheckpointRanks)
      return Error(ErrorCode::ParseError) << manifestPath << ": " << writtenRanks << " ranks";
    return checkIdentity(manifest, identity, folder);
  }));
  const std::string optimizerKind = optimizerKindOf(*state.optimizer);
  if (writtenRanks == identity.ranks && writtenPipelineRanks == identity.pipelineRanks)
    CLEAVE_CHECK(restoreOwnRank(folder, rank, state, optimizerKind));
  else
    CLEAVE_CHECK(restoreResharded(folder, writtenRanks, rank, state, optimizerKind));
  return writtenRanks;
}

} // namespace cleave::runtime
