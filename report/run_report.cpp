#include "report/run_report.h"

#include <algorithm>
#include <sstream>

namespace cleave::report {
namespace {
constexpr std::size_t kSlowestNodes = 10; // how many nodes --profile lists

// The last run's time outside its kernels: the executor's own work between them, moving inputs
// and outputs, and the timing itself (with --profile).
double outsideKernelsSeconds(const runtime::TimedRuns& times) {
  double kernels = 0.0;
  for (const auto& [op, seconds] : times.stats.secondsByOp)
    kernels += seconds;
  return times.lastRunSeconds - kernels;
}

// Entries by time, largest first (ties by name), at most `limit`.
std::vector<std::pair<std::string, double>> slowestFirst(const std::map<std::string, double>& seconds,
                                                         std::size_t limit) {
  std::vector<std::pair<std::string, double>> sorted(seconds.begin(), seconds.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  sorted.resize(std::min(sorted.size(), limit));
  return sorted;
}

// --baseline's figures: its run times and the quantiles of the per-pair ratios.
struct PairedSummary {
  double baselineMedian, baselineMin;
  double median, p25, p75, min, max; // of this run / the baseline's, per pair
};

PairedSummary summarizePairs(const runtime::TimedRuns& times) {
  const std::vector<double>& base = times.baselineSeconds;
  const std::vector<double>& ratios = times.ratios; // sorted
  return {base[base.size() / 2],         base.front(),  ratios[ratios.size() / 2], ratios[ratios.size() / 4],
          ratios[ratios.size() * 3 / 4], ratios.front(), ratios.back()};
}

Json outputsJson(const std::vector<runtime::OutputSummary>& outputs) {
  Json json = Json::object();
  for (const runtime::OutputSummary& output : outputs) {
    json[output.name] = {{"summary", output.summary}};
    if (output.shape)
      json[output.name]["shape"] = *output.shape;
  }
  return json;
}

void addProfileJson(const runtime::TimedRuns& times, Json& summary) {
  const runtime::RunStats& stats = times.stats;
  for (const auto& [op, s] : slowestFirst(stats.secondsByOp, SIZE_MAX))
    summary["profile"].push_back({{"op", op}, {"seconds", s}});
  // Every timed node too, so a tool can line them up with another runtime's profile.
  for (const auto& [node, s] : slowestFirst(stats.secondsByNode, SIZE_MAX)) {
    if (summary["node_seconds"].size() < kSlowestNodes)
      summary["slowest_nodes"].push_back({{"node", node}, {"seconds", s}});
    summary["node_seconds"].push_back({{"node", node}, {"seconds", s}});
  }
  summary["last_run_s"] = times.lastRunSeconds;
  summary["outside_kernels_s"] = outsideKernelsSeconds(times);
  summary["peak_activation_bytes"] = stats.peakActivationBytes;
  summary["peak_tensor_bytes"] = times.peakTensorBytes;
  summary["onednn_weight_bytes"] = times.heldWeightBytes;
  summary["peak_resident_bytes"] = times.peakResidentBytes;
  if (times.peakDeviceBytes >= 0)
    summary["peak_device_bytes"] = times.peakDeviceBytes;
  summary["host_device_copies"] = stats.hostDeviceCopies;
  summary["host_device_copy_bytes"] = stats.hostDeviceCopyBytes;
  summary["host_device_copies_in_bodies"] = stats.hostDeviceCopiesInBodies; // of host_device_copies
  summary["host_device_copies_by_value"] = Json::object();
  for (const auto& [crossing, count] : stats.copiesByValue)
    summary["host_device_copies_by_value"][crossing] = count;
  summary["seam_copies"] = stats.seamCopies;
  summary["seam_copy_bytes"] = stats.seamCopyBytes;
  summary["seam_copy_s"] = stats.seamCopySeconds;
}

void writeProfileText(const runtime::TimedRuns& times, std::ostream& text) {
  const runtime::RunStats& stats = times.stats;
  text << "kernel time by op (last run):\n";
  for (const auto& [op, s] : slowestFirst(stats.secondsByOp, SIZE_MAX))
    text << "  " << op << ": " << s * 1e3 << " ms\n";
  text << "outside kernels (last run: the executor between them, inputs and outputs, the timing): "
       << outsideKernelsSeconds(times) * 1e3 << " ms of " << times.lastRunSeconds * 1e3 << " ms\n";
  text << "peak live activations (last run" << (times.timings.size() > 1 ? ", largest submodel" : "")
       << "): " << stats.peakActivationBytes << " bytes\n";
  text << "peak tensor memory (last run: parameters not held only for oneDNN, inputs, activations and ATen's "
          "workspaces): "
       << times.peakTensorBytes << " bytes\n";
  text << "weights held for oneDNN (packed or reordered copies, beside the tensors above): " << times.heldWeightBytes
       << " bytes\n";
  text << "peak resident set of the process (loading and every run, libraries included): "
       << times.peakResidentBytes / (1024 * 1024) << " MiB\n";
  if (times.peakDeviceBytes >= 0)
    text << "peak device memory (last run: the device allocator's bytes, parameters included): "
         << times.peakDeviceBytes << " bytes\n";
  text << "copies between host and device memory (last run; none where they share it, as on the CPU): "
       << stats.hostDeviceCopies << ", " << stats.hostDeviceCopyBytes << " bytes\n";
  for (const auto& [crossing, count] : stats.copiesByValue)
    text << "  " << crossing << (count > 1 ? ": " + std::to_string(count) + " times" : std::string()) << "\n";
  if (stats.seamCopies > 0)
    text << "copies between submodules on different devices (last run; what split --preview predicts): "
         << stats.seamCopies << ", " << stats.seamCopyBytes << " bytes, " << stats.seamCopySeconds * 1e3 << " ms\n";
  text << "slowest nodes (last run):\n";
  for (const auto& [node, s] : slowestFirst(stats.secondsByNode, kSlowestNodes))
    text << "  " << node << ": " << s * 1e3 << " ms\n";
}

} // namespace

Json runJson(const RunSubject& subject, const runtime::TimedRuns& times) {
  Json summary;
  summary["model"] = subject.model;
  summary["submodules"] = times.submodules;
  summary["modules"] = times.modules; // fewer when a cut's seams are joined
  if (subject.microbatches)
    summary["microbatches"] = *subject.microbatches;
  if (!times.outputs.empty())
    summary["outputs"] = outputsJson(times.outputs);
  const std::vector<double>& seconds = times.seconds;
  summary["timing"] = {{"runs", subject.repeat}, {"min_s", seconds.front()}, {"median_s", seconds[seconds.size() / 2]}};
  Json steps = Json::array();
  for (const runtime::SubmoduleTiming& timing : times.timings)
    steps.push_back({{"name", timing.name}, {"backend", timing.backend}, {"min_s", timing.seconds}});
  summary["timing"]["steps"] = std::move(steps);
  if (times.replay) {
    summary["graph_replay"] = {{"recorded", times.replay->recorded}, {"refused", times.replay->refused}};
    if (!times.replay->refusal.empty())
      summary["graph_replay"]["refusal"] = times.replay->refusal;
  }
  if (!subject.baseline.empty()) {
    const PairedSummary pairs = summarizePairs(times);
    summary["baseline"] = {
        {"model", subject.baseline},
        {"min_s", pairs.baselineMin},
        {"median_s", pairs.baselineMedian},
        {"ratio", {{"median", pairs.median}, {"p25", pairs.p25}, {"p75", pairs.p75}, {"min", pairs.min}, {"max", pairs.max}}}};
  }
  if (subject.profile)
    addProfileJson(times, summary);
  return summary;
}

std::string runText(const RunSubject& subject, const runtime::TimedRuns& times) {
  std::ostringstream text;
  if (times.replay) {
    text << "graph replay: " << times.replay->recorded << " input shape(s) recorded and replayed, "
         << times.replay->refused << " run as usual";
    if (!times.replay->refusal.empty())
      text << " (" << times.replay->refusal << ")";
    text << "\n";
  }
  for (const runtime::OutputSummary& output : times.outputs)
    text << output.name << ": " << output.summary << "\n";
  const std::vector<double>& seconds = times.seconds;
  text << "time: median " << seconds[seconds.size() / 2] * 1e3 << " ms, min " << seconds.front() * 1e3 << " ms over "
       << subject.repeat << " run(s)\n";
  if (!subject.baseline.empty()) {
    const PairedSummary pairs = summarizePairs(times);
    text << "baseline " << subject.baseline << ": median " << pairs.baselineMedian * 1e3 << " ms, min "
         << pairs.baselineMin * 1e3 << " ms\n";
    text << "this / baseline over " << times.ratios.size() << " pair(s): median " << pairs.median
         << ", middle half [" << pairs.p25 << ", " << pairs.p75 << "], range [" << pairs.min << ", " << pairs.max
         << "]\n";
  }
  if (subject.profile)
    writeProfileText(times, text);
  if (times.timings.size() > 1)
    for (const runtime::SubmoduleTiming& timing : times.timings)
      text << "  " << timing.name << " (" << timing.backend << "): " << timing.seconds * 1e3 << " ms\n";
  return text.str();
}

std::string rankRunLine(const runtime::RankRun& run) {
  std::ostringstream line;
  line << "rank " << run.rank << " of " << run.ranks << ": ran";
  for (const std::string& step : run.ownSteps)
    line << " " << step;
  line << " over " << run.microbatches << " microbatch(es) in " << run.seconds * 1e3 << " ms (" << run.shapeHeaders
       << " shape header(s) sent)\n";
  return line.str();
}

Json rankRunJson(const std::string& model, const runtime::RankRun& run) {
  Json summary = {{"model", model}, {"ranks", run.ranks}, {"microbatches", run.microbatches}, {"seconds", run.seconds}};
  if (!run.outputs.empty())
    summary["outputs"] = outputsJson(run.outputs);
  return summary;
}

std::string rankRunText(const runtime::RankRun& run) {
  std::string text;
  for (const runtime::OutputSummary& output : run.outputs)
    text += output.name + ": " + output.summary + "\n";
  return text;
}

} // namespace cleave::report
