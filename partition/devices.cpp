#include "partition/devices.h"

#include <nlohmann/json.hpp>
#include <filesystem>
#include <set>

#include "base/file_io.h"
#include "base/json.h"

namespace cleave::partition {

bool DeviceSet::heterogeneous() const {
  for (const Device& device : devices)
    if (device.profile)
      return true;
  return false;
}

std::size_t DeviceSet::indexOf(std::int64_t logicalId) const {
  for (std::size_t d = 0; d < devices.size(); ++d)
    if (devices[d].logicalId == logicalId)
      return d;
  return devices.size();
}

double TransferRates::between(std::int64_t fromLogicalId, std::int64_t toLogicalId) const {
  if (devices && !devices->transferMatrix.empty()) {
    std::size_t from = devices->indexOf(fromLogicalId), to = devices->indexOf(toLogicalId);
    if (from < devices->devices.size() && to < devices->devices.size() && from != to)
      return devices->transferMatrix[from][to];
  }
  return uniformBytesPerSec;
}

namespace {
Expected<DeviceSet> parseDocument(const nlohmann::json& doc, const std::string& sourceName, const std::string& baseDir) {
  using nlohmann::json;
  auto fail = [&](const std::string& what) { return Error(ErrorCode::ParseError) << sourceName << ": " << what; };
  const json* list = doc.is_array() ? &doc : (doc.is_object() && doc.contains("devices") ? &doc["devices"] : nullptr);
  if (!list || !list->is_array())
    return fail("expected {\"devices\": [...]}");
  if (list->empty())
    return Error(ErrorCode::InvalidArgument) << sourceName << ": no devices";
  if (list->size() > kMaxDevices)
    return Error(ErrorCode::InvalidArgument) << sourceName << ": " << list->size() << " devices; cleave takes at most "
                                             << kMaxDevices;
  DeviceSet set;
  std::set<std::int64_t> ids;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const json& entry = (*list)[i];
    std::string at = "devices[" + std::to_string(i) + "]";
    if (!entry.is_object() || !entry.contains("logical_id") || !entry.contains("available_mem_bytes"))
      return fail(at + ": needs integer logical_id and available_mem_bytes");
    Device device;
    device.name = entry.value("name", "dev_" + std::to_string(i));
    CLEAVE_TRY(device.logicalId, jsonInteger(entry["logical_id"], sourceName, at + ".logical_id", 0, INT32_MAX));
    CLEAVE_TRY(device.availableMemBytes, jsonInteger(entry["available_mem_bytes"], sourceName,
                                                     at + ".available_mem_bytes", 1, kMaxDeviceMemBytes));
    device.kind = entry.value("kind", "");
    if (entry.contains("backend")) {
      if (!entry["backend"].is_string() || entry["backend"].get<std::string>().empty())
        return fail(at + ".backend: expected a backend name (aten-cpu, aten-cpu-bf16, aten-cuda, ...)");
      device.backend = entry["backend"].get<std::string>();
    }
    if (!ids.insert(device.logicalId).second)
      return Error(ErrorCode::InvalidArgument) << sourceName << ": " << at << " ('" << device.name
                                               << "') repeats logical id " << device.logicalId;
    if (entry.contains("profile")) {
      const json& spec = entry["profile"];
      Expected<support::Profile> profile = Error(ErrorCode::ParseError);
      if (spec.is_string()) {
        CLEAVE_TRY(std::string file, resolveInsideFolder(baseDir, spec.get<std::string>(),
                                                         sourceName + ": " + at + ".profile"));
        profile = support::Profile::load(file);
      } else if (spec.is_object()) {
        profile = support::Profile::fromJson(spec.dump(), sourceName + ": " + at + ".profile");
      } else {
        return fail(at + ".profile: expected a file name or an object");
      }
      if (!profile)
        return Error(profile.error().code()) << sourceName << ": " << at << ".profile: " << profile.error().message();
      device.profile = std::make_shared<const support::Profile>(std::move(*profile));
    }
    set.devices.push_back(std::move(device));
  }
  if (set.heterogeneous() && set.devices.size() > 64)
    return fail("support profiles work with at most 64 devices");
  if (doc.is_object() && doc.contains("transfer_rate_bytes_per_sec")) {
    const json& rate = doc["transfer_rate_bytes_per_sec"];
    if (rate.is_array()) {
      std::size_t count = set.devices.size();
      if (rate.size() != count)
        return fail("transfer_rate_bytes_per_sec: a matrix needs " + std::to_string(count) + " rows, one per device");
      for (std::size_t r = 0; r < count; ++r) {
        if (!rate[r].is_array() || rate[r].size() != count)
          return fail("transfer_rate_bytes_per_sec[" + std::to_string(r) + "]: needs " + std::to_string(count) +
                      " numbers");
        std::vector<double> row;
        for (std::size_t c = 0; c < count; ++c) {
          if (!rate[r][c].is_number() || (r != c && rate[r][c].get<double>() <= 0))
            return fail("transfer_rate_bytes_per_sec[" + std::to_string(r) + "][" + std::to_string(c) +
                        "]: must be a positive number");
          row.push_back(rate[r][c].get<double>());
        }
        set.transferMatrix.push_back(std::move(row));
      }
    } else if (!rate.is_number() || rate.get<double>() <= 0) {
      return fail("transfer_rate_bytes_per_sec must be a positive number or a matrix");
    } else {
      set.transferRateBytesPerSec = rate.get<double>();
    }
  }
  return set;
}

Expected<DeviceSet> parse(std::string_view text, const std::string& sourceName, const std::string& baseDir) {
  CLEAVE_TRY(nlohmann::json doc, parseJsonInput(text, sourceName));
  return guardJson(sourceName, [&]() { return parseDocument(doc, sourceName, baseDir); });
}
} // namespace

Expected<DeviceSet> parseDevices(std::string_view text, const std::string& sourceName) {
  return parse(text, sourceName, "");
}

Expected<DeviceSet> loadDevices(const std::string& path) {
  CLEAVE_TRY(std::string text, readFile(path));
  return parse(text, path, std::filesystem::path(path).parent_path().string());
}

Expected<DeviceSupport> computeDeviceSupport(const ir::Graph& graph, const DeviceSet& devices) {
  DeviceSupport support;
  std::size_t count = std::min<std::size_t>(devices.devices.size(), 64);
  support.all = count == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << count) - 1);
  support.mask = IdVector<ir::NodeId, std::uint64_t>(graph.numNodes(), support.all);
  for (std::size_t d = 0; d < count; ++d) {
    const support::Profile* profile = devices.devices[d].profile.get();
    if (!profile)
      continue;
    for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
      ir::NodeId node{n};
      if (graph.isCallable(node) && !profile->decide(graph, node).supported)
        support.mask[node] &= ~(std::uint64_t{1} << d);
    }
  }
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    ir::NodeId node{n};
    if (graph.isCallable(node) && support.mask[node] == 0)
      return Error(ErrorCode::DoesNotFit) << "node '" << graph.name(node) << "' (" << graph.target(node)
                                          << ") is supported by no device's profile";
  }
  return support;
}

} // namespace cleave::partition
