#include "detops/harness/op_spec.h"

#include <set>
#include <stdexcept>

namespace detops::harness {

Tolerance OpSpec::tolerance(DType dtype) const {
  const auto it = tolerance_scales.find(dtype);
  return it == tolerance_scales.end() ? default_tolerance(dtype) : scaled(default_tolerance(dtype), it->second);
}

bool OpSpec::declared_deterministic(Device device, bool backward) const {
  if (device == Device::kCpu) return backward ? determinism.backward_cpu : determinism.forward_cpu;
  return backward ? determinism.backward_cuda : determinism.forward_cuda;
}

OpRegistry& OpRegistry::instance() {
  static OpRegistry registry;
  return registry;
}

void OpRegistry::add(std::function<OpSpec()> factory) {
  if (built_) throw std::logic_error("OpRegistry::add: ops must register before the registry is first read");
  factories_.push_back(std::move(factory));
}

const std::vector<OpSpec>& OpRegistry::ops() {
  if (!built_) {
    built_ = true;
    std::set<std::string> names;
    for (const auto& f : factories_) {
      OpSpec spec = f();
      if (!names.insert(spec.name).second) throw std::logic_error("OpRegistry: op '" + spec.name + "' registered twice");
      std::set<std::string> case_names;
      for (const OpCase& c : spec.cases) {
        if (!case_names.insert(c.name).second) {
          throw std::logic_error("OpRegistry: op '" + spec.name + "' has two cases named '" + c.name + "'");
        }
      }
      ops_.push_back(std::move(spec));
    }
  }
  return ops_;
}

}  // namespace detops::harness
