#pragma once
// The few NVML queries the benchmarks need (SM clock per sample, default/max clocks, power limit,
// driver version), through libnvidia-ml.so.1 loaded at run time: the driver ships NVML, the toolkit on
// the build machine need not ship nvml.h, and a machine without the driver still runs the unit tests.
// Read-only: nothing here changes a clock or a setting.
#include <string>

namespace detops::harness::bench {

class NvmlDevice {
 public:
  // Opens NVML and the device with this UUID ("GPU-..."); available() is false otherwise, with reason().
  explicit NvmlDevice(const std::string& uuid);
  ~NvmlDevice();
  NvmlDevice(const NvmlDevice&) = delete;
  NvmlDevice& operator=(const NvmlDevice&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& reason() const { return reason_; }

  // Each returns -1 (or "") when the query fails or NVML is unavailable.
  int sm_clock_mhz() const;            // current SM clock
  int default_sm_clock_mhz() const;    // default applications clock
  int max_sm_clock_mhz() const;
  int memory_clock_mhz() const;        // current memory clock
  double power_limit_w() const;        // enforced power limit
  std::string driver_version() const;
  std::string nvml_version() const;

 private:
  void* library_ = nullptr;
  void* device_ = nullptr;
  std::string reason_;
  struct Api;
  Api* api_ = nullptr;
};

}  // namespace detops::harness::bench
