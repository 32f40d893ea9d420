#include "partition/devices.h"

#include <nlohmann/json.hpp>
#include <set>

#include "base/file_io.h"

namespace cleave::partition {

Expected<DeviceSet> parseDevices(std::string_view text, const std::string& sourceName) {
  using nlohmann::json;
  json doc = json::parse(text, nullptr, false);
  auto fail = [&](const std::string& what) { return Error(ErrorCode::ParseError) << sourceName << ": " << what; };
  if (doc.is_discarded())
    return fail("invalid JSON");
  const json* list = doc.is_array() ? &doc : (doc.is_object() && doc.contains("devices") ? &doc["devices"] : nullptr);
  if (!list || !list->is_array())
    return fail("expected {\"devices\": [...]}");
  if (list->empty())
    return Error(ErrorCode::InvalidArgument) << sourceName << ": no devices";
  DeviceSet set;
  std::set<std::int64_t> ids;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const json& entry = (*list)[i];
    std::string at = "devices[" + std::to_string(i) + "]";
    if (!entry.is_object() || !entry.contains("logical_id") || !entry["logical_id"].is_number_integer() ||
        !entry.contains("available_mem_bytes") || !entry["available_mem_bytes"].is_number())
      return fail(at + ": needs integer logical_id and available_mem_bytes");
    Device device;
    device.name = entry.value("name", "dev_" + std::to_string(i));
    device.logicalId = entry["logical_id"].get<std::int64_t>();
    device.availableMemBytes = entry["available_mem_bytes"].get<std::int64_t>();
    device.kind = entry.value("kind", "");
    if (device.availableMemBytes <= 0)
      return Error(ErrorCode::InvalidArgument) << sourceName << ": " << at << " ('" << device.name
                                               << "') has " << device.availableMemBytes
                                               << " bytes of memory; it must be positive";
    if (!ids.insert(device.logicalId).second)
      return Error(ErrorCode::InvalidArgument) << sourceName << ": " << at << " ('" << device.name
                                               << "') repeats logical id " << device.logicalId;
    set.devices.push_back(std::move(device));
  }
  if (doc.is_object() && doc.contains("transfer_rate_bytes_per_sec")) {
    if (!doc["transfer_rate_bytes_per_sec"].is_number() || doc["transfer_rate_bytes_per_sec"].get<double>() <= 0)
      return fail("transfer_rate_bytes_per_sec must be a positive number");
    set.transferRateBytesPerSec = doc["transfer_rate_bytes_per_sec"].get<double>();
  }
  return set;
}

Expected<DeviceSet> loadDevices(const std::string& path) {
  CLEAVE_TRY(std::string text, readFile(path));
  return parseDevices(text, path);
}

} // namespace cleave::partition
