#include "runtime/engine/kernel.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <thread>

#include <ATen/Parallel.h>

#include "runtime/engine/tensors.h"
#include "runtime/engine/torch_compat.h"

namespace cleave::runtime {

const at::Tensor& KernelContext::input(std::size_t i) const {
  if (!has(i))
    throw KernelError("operand " + std::to_string(i) + " is missing");
  return inputs_[i];
}

bool KernelContext::mayOverwrite(std::size_t i) const {
  if (!has(i))
    return false;
  const at::Tensor& t = inputs_[i];
  return t.use_count() == 1 && t.layout() == at::kStrided && t.has_storage() && t.storage().use_count() == 1 &&
         !t.requires_grad();
}

bool KernelContext::outputUsed(std::size_t i) const {
  auto outputs = graph_.outputs(node_);
  return i < outputs.size() && !graph_.users(outputs[i]).empty();
}

std::int64_t KernelContext::intAttr(std::string_view name, std::int64_t fallback) const {
  const ir::Attribute* attr = attribute(name);
  return attr && attr->kind == ir::AttrKind::Int ? attr->intValue : fallback;
}

float KernelContext::floatAttr(std::string_view name, float fallback) const {
  const ir::Attribute* attr = attribute(name);
  return attr && attr->kind == ir::AttrKind::Float ? static_cast<float>(attr->floatValue) : fallback;
}

std::string KernelContext::stringAttr(std::string_view name, std::string fallback) const {
  const ir::Attribute* attr = attribute(name);
  return attr && attr->kind == ir::AttrKind::String ? attr->text : fallback;
}

std::vector<std::int64_t> KernelContext::intsAttr(std::string_view name, std::vector<std::int64_t> fallback) const {
  const ir::Attribute* attr = attribute(name);
  return attr && attr->kind == ir::AttrKind::Ints ? attr->ints : fallback;
}

std::vector<float> KernelContext::floatsAttr(std::string_view name) const {
  const ir::Attribute* attr = attribute(name);
  std::vector<float> values;
  if (attr && attr->kind == ir::AttrKind::Floats)
    for (double v : attr->floats)
      values.push_back(static_cast<float>(v));
  return values;
}

at::Tensor KernelContext::tensorAttr(std::string_view name) const {
  const ir::Attribute* attr = attribute(name);
  if (!attr || attr->kind != ir::AttrKind::Tensor)
    return at::Tensor();
  Expected<at::Tensor> tensor = tensorFromProto(attr->text, "attribute '" + std::string(name) + "'");
  if (!tensor)
    throw KernelError(tensor.error().message());
  return *tensor;
}

void configureThreads() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("OMP_NUM_THREADS"))
      return;
    unsigned threads = std::thread::hardware_concurrency();
    if (threads > 0 && at::get_num_threads() < static_cast<int>(threads))
      at::set_num_threads(static_cast<int>(threads));
  });
}

std::vector<std::int64_t> KernelContext::ints(std::size_t i) const {
  at::Tensor values = input(i).to(at::kCPU).to(at::kLong).contiguous().flatten();
  const std::int64_t* p = values.data_ptr<std::int64_t>();
  return std::vector<std::int64_t>(p, p + values.numel());
}

void KernelTable::add(std::string opType, Kernel kernel, Layouts layouts, OperandMemory memory) {
  entries_.emplace_back(std::move(opType), KernelEntry{kernel, layouts, memory});
}

const KernelEntry* KernelTable::find(std::string_view domain, std::string_view opType) const {
  std::string key = domain.empty() || domain == "ai.onnx" ? std::string(opType)
                                                          : std::string(domain) + "::" + std::string(opType);
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const auto& entry, const std::string& k) { return entry.first < k; });
  return it != entries_.end() && it->first == key ? &it->second : nullptr;
}

std::vector<std::string> KernelTable::names() const {
  std::vector<std::string> names;
  for (const auto& entry : entries_)
    names.push_back(entry.first);
  return names;
}

const KernelTable& kernelTable() {
  static const KernelTable table = [] {
    KernelTable t;
    registerKernelFamilies(t);
    std::sort(t.entries_.begin(), t.entries_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return t;
  }();
  return table;
}

std::vector<std::string> missingKernels(const ir::Graph& graph) {
  std::vector<std::string> missing;
  const KernelTable& table = kernelTable();
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    ir::NodeId node{n};
    if (graph.kind(node) == ir::NodeKind::Op && !table.find(graph.opDomain(node), graph.opType(node)))
      missing.push_back(graph.target(node));
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  return missing;
}

io::ExpandFunctionFilter opsWithoutKernels() {
  return [](std::string_view domain, std::string_view opType) { return kernelTable().find(domain, opType) == nullptr; };
}

bool isSequence(const at::Tensor& t) { return t.defined() && t.is_nested(); }

bool holdsNumbers(const at::Tensor& t) { return t.defined() && !t.is_nested() && !isStringTensor(t); }

std::vector<at::Tensor> sequenceElements(const at::Tensor& sequence) {
  if (!isSequence(sequence))
    throw KernelError("expected a sequence, got a tensor");
  return sequence.unbind(0);
}

at::Tensor makeSequence(const std::vector<at::Tensor>& elements, at::ScalarType type) {
  for (const at::Tensor& element : elements)
    if (element.dim() != elements[0].dim())
      throw KernelError("sequence elements of different ranks (" + std::to_string(elements[0].dim()) + " and " +
                        std::to_string(element.dim()) + ") are not supported");
  // Nested tensors warn once that their API is a prototype; the runtime's use of them is internal.
  QuietWarnings quiet;
  std::vector<at::Tensor> contiguous;
  for (const at::Tensor& element : elements)
    contiguous.push_back(denseFromPrivateLayout(element).to(type).contiguous());
  return at::_nested_tensor_from_tensor_list(contiguous, type);
}

} // namespace cleave::runtime
