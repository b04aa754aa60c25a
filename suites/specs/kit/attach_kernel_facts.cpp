// The suites link both the op library and the harness: hand the op library's build and kernel facts to
// the harness's device facts before any test or benchmark reads them.
#include "common/kernel_registry.h"
#include "detops/harness/device_facts.h"

namespace {

const bool kAttached = [] {
  detops::harness::attach_kernel_facts(detops::kernel_facts());
  return true;
}();

}  // namespace
