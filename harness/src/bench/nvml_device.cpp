#include "detops/harness/bench/nvml_device.h"

#include <dlfcn.h>

namespace detops::harness::bench {
namespace {

// From NVML's public API (nvml.h): return codes are ints, 0 is success; clock types.
using NvmlReturn = int;
using NvmlHandle = void*;
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlClockMem = 2;

}  // namespace

struct NvmlDevice::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*handle_by_uuid)(const char*, NvmlHandle*) = nullptr;
  NvmlReturn (*clock_info)(NvmlHandle, int, unsigned*) = nullptr;
  NvmlReturn (*default_app_clock)(NvmlHandle, int, unsigned*) = nullptr;
  NvmlReturn (*max_clock_info)(NvmlHandle, int, unsigned*) = nullptr;
  NvmlReturn (*enforced_power_limit)(NvmlHandle, unsigned*) = nullptr;
  NvmlReturn (*driver_version)(char*, unsigned) = nullptr;
  NvmlReturn (*nvml_version)(char*, unsigned) = nullptr;
  bool initialized = false;
};

namespace {

template <typename F>
bool load(void* lib, const char* symbol, F& out) {
  out = reinterpret_cast<F>(::dlsym(lib, symbol));
  return out != nullptr;
}

}  // namespace

NvmlDevice::NvmlDevice(const std::string& uuid) : api_(new Api) {
  library_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* e = ::dlerror();
    reason_ = std::string("cannot load libnvidia-ml.so.1: ") + (e ? e : "unknown error");
    return;
  }
  const bool ok = load(library_, "nvmlInit_v2", api_->init) && load(library_, "nvmlShutdown", api_->shutdown) &&
                  load(library_, "nvmlErrorString", api_->error_string) &&
                  load(library_, "nvmlDeviceGetHandleByUUID", api_->handle_by_uuid) &&
                  load(library_, "nvmlDeviceGetClockInfo", api_->clock_info);
  if (!ok) {
    reason_ = "libnvidia-ml.so.1 lacks nvmlInit_v2/nvmlDeviceGetHandleByUUID/nvmlDeviceGetClockInfo";
    return;
  }
  load(library_, "nvmlDeviceGetDefaultApplicationsClock", api_->default_app_clock);
  load(library_, "nvmlDeviceGetMaxClockInfo", api_->max_clock_info);
  load(library_, "nvmlDeviceGetEnforcedPowerLimit", api_->enforced_power_limit);
  load(library_, "nvmlSystemGetDriverVersion", api_->driver_version);
  load(library_, "nvmlSystemGetNVMLVersion", api_->nvml_version);
  NvmlReturn r = api_->init();
  if (r != kNvmlSuccess) {
    reason_ = std::string("nvmlInit_v2: ") + api_->error_string(r);
    return;
  }
  api_->initialized = true;
  NvmlHandle h = nullptr;
  r = api_->handle_by_uuid(uuid.c_str(), &h);
  if (r != kNvmlSuccess) {
    reason_ = "nvmlDeviceGetHandleByUUID(" + uuid + "): " + api_->error_string(r);
    return;
  }
  device_ = h;
}

NvmlDevice::~NvmlDevice() {
  if (api_ != nullptr && api_->initialized) api_->shutdown();
  if (library_ != nullptr) ::dlclose(library_);
  delete api_;
}

int NvmlDevice::sm_clock_mhz() const {
  unsigned v = 0;
  return available() && api_->clock_info(device_, kNvmlClockSm, &v) == kNvmlSuccess ? static_cast<int>(v) : -1;
}

int NvmlDevice::default_sm_clock_mhz() const {
  unsigned v = 0;
  return available() && api_->default_app_clock && api_->default_app_clock(device_, kNvmlClockSm, &v) == kNvmlSuccess
             ? static_cast<int>(v)
             : -1;
}

int NvmlDevice::max_sm_clock_mhz() const {
  unsigned v = 0;
  return available() && api_->max_clock_info && api_->max_clock_info(device_, kNvmlClockSm, &v) == kNvmlSuccess
             ? static_cast<int>(v)
             : -1;
}

int NvmlDevice::memory_clock_mhz() const {
  unsigned v = 0;
  return available() && api_->clock_info(device_, kNvmlClockMem, &v) == kNvmlSuccess ? static_cast<int>(v) : -1;
}

double NvmlDevice::power_limit_w() const {
  unsigned mw = 0;
  return available() && api_->enforced_power_limit && api_->enforced_power_limit(device_, &mw) == kNvmlSuccess
             ? mw / 1000.0
             : -1.0;
}

std::string NvmlDevice::driver_version() const {
  char buf[96] = {};
  return api_ && api_->initialized && api_->driver_version && api_->driver_version(buf, sizeof(buf)) == kNvmlSuccess
             ? std::string(buf)
             : std::string();
}

std::string NvmlDevice::nvml_version() const {
  char buf[96] = {};
  return api_ && api_->initialized && api_->nvml_version && api_->nvml_version(buf, sizeof(buf)) == kNvmlSuccess
             ? std::string(buf)
             : std::string();
}

}  // namespace detops::harness::bench
