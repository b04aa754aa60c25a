// The CUPTI half of the hardware-metrics pass: CUPTI's Profiler Host API builds the configuration of the
// metrics in hw_metrics.h for this GPU's chip once; per benchmark the Range Profiler collects them over
// one user range around one op call, replayed by us (user replay) until CUPTI has every pass it needs.
//
// CUPTI 13's range profiler is in libcupti itself; the metric evaluation it needs (libnvperf_host.so,
// shipped next to libcupti.so) is loaded by CUPTI at run time. We load it first from libcupti's own
// folder, so it is found even where that folder is not on the loader's path.
//
// The Activity-API timer (gpu_timer.cpp) stays enabled during the pass: the pass runs between timed
// samples, never during one, and the kernels it replays are not attributed to any sample (they carry no
// external correlation id of the timer's). Should CUPTI refuse the range profiler next to the enabled
// activity kinds, the refusal is recorded per benchmark with the failing call's name (DETOPS_BENCH_TIMER=events
// takes the Activity API out, to tell that case apart).
#include "detops/harness/bench/hw_metrics.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace detops::harness::bench {
namespace {

using nlohmann::json;

constexpr const char* kRangeName = "detops_op_call";

std::string cupti_text(CUptiResult r) {
  const char* text = nullptr;
  std::string name = "CUPTI error " + std::to_string(static_cast<int>(r));
  if (cuptiGetResultString(r, &text) == CUPTI_SUCCESS && text != nullptr) name = text;
  return name;
}

// What to do about a CUPTI error, where there is something to say.
std::string cupti_advice(CUptiResult r) {
  switch (r) {
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
      return "the GPU's performance counters are restricted to administrators on this machine: run as root, or "
             "load the nvidia driver with NVreg_RestrictProfilingToAdminUsers=0 "
             "(https://developer.nvidia.com/ERR_NVGPUCTRPERM); the timings are unaffected";
    case CUPTI_ERROR_HARDWARE_BUSY:
      return "another profiler holds the GPU's counters (Nsight Compute, Nsight Systems with GPU metrics, DCGM "
             "profiling such as dcgm-exporter): stop it, or run without --detops_metrics";
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      return "another CUPTI client is attached to this process (a profiler or tracer): run without it";
    case CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED:
    case CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED:
      return "CUPTI's legacy event/metric API is in use in this process, which excludes the range profiler";
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_INVALID_DEVICE:
    case CUPTI_ERROR_INVALID_CHIP_NAME:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
    case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
      return "CUPTI's range profiler does not support this device or configuration";
    default:
      return "";
  }
}

// Errors that say the machine cannot profile at all: every later pass would fail the same way.
bool machine_wide(CUptiResult r) { return !cupti_advice(r).empty(); }

struct CuptiFailure : std::runtime_error {
  CuptiFailure(const std::string& what, CUptiResult r) : std::runtime_error(what), code(r) {}
  CUptiResult code;
};

void check(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return;
  std::string text = std::string(call) + " failed: " + cupti_text(r);
  const std::string advice = cupti_advice(r);
  if (!advice.empty()) text += "; " + advice;
  throw CuptiFailure(text, r);
}

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(e));
}

// libnvperf_host.so from libcupti's folder (CUPTI dlopens it by its bare name, which then finds this
// already-loaded copy by its soname), else wherever the loader finds it. Returns "" or why not.
std::string load_nvperf_host() {
  std::string tried;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuptiGetVersion), &info) != 0 && info.dli_fname != nullptr) {
    std::string dir = info.dli_fname;
    const auto slash = dir.rfind('/');
    if (slash != std::string::npos) {
      const std::string path = dir.substr(0, slash) + "/libnvperf_host.so";
      if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) return "";
      const char* e = dlerror();
      tried = path + " (" + (e ? e : "?") + "), ";
    }
  }
  if (dlopen("libnvperf_host.so", RTLD_NOW | RTLD_GLOBAL) != nullptr) return "";
  const char* e = dlerror();
  return "CUPTI's metric library libnvperf_host.so could not be loaded: tried " + tried + "libnvperf_host.so (" +
         (e ? e : "?") + "); put the CUDA toolkit's lib64 folder (where libcupti.so is) on LD_LIBRARY_PATH";
}

}  // namespace

struct HwMetricsProfiler::Impl {
  int device = 0;
  CUcontext context = nullptr;
  bool available = false;
  std::string reason;
  std::string chip;
  std::vector<std::string> metric_names;  // the ones in the config image
  std::vector<const char*> metric_ptrs;
  std::vector<std::uint8_t> availability_image, config_image;
  std::size_t config_passes = 0;
  CUpti_Profiler_Host_Object* host = nullptr;
  bool profiler_initialized = false;

  void set_up();
  void build_config();
  void destroy_host();
  HwMetricsOutcome measure(const std::function<void()>& call, const std::function<void()>& before_each_pass);
};

void HwMetricsProfiler::Impl::set_up() {
  check_cuda(cudaFree(nullptr), "creating the CUDA context (cudaFree(0))");
  // The driver API's cuCtxGetCurrent, through the runtime (libcuda is not linked).
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  check_cuda(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &entry, 4000, cudaEnableDefault, &found),
             "cudaGetDriverEntryPointByVersion(cuCtxGetCurrent)");
  if (entry == nullptr || found != cudaDriverEntryPointSuccess) {
    throw std::runtime_error("the driver does not provide cuCtxGetCurrent");
  }
  using CtxGetCurrent = CUresult (*)(CUcontext*);
  const CUresult cu = reinterpret_cast<CtxGetCurrent>(entry)(&context);
  if (cu != CUDA_SUCCESS || context == nullptr) {
    throw std::runtime_error("no current CUDA context for device " + std::to_string(device) + " (cuCtxGetCurrent " +
                             std::to_string(static_cast<int>(cu)) + ")");
  }
  const std::string nvperf = load_nvperf_host();
  if (!nvperf.empty()) throw std::runtime_error(nvperf);

  CUpti_Profiler_Initialize_Params init{CUpti_Profiler_Initialize_Params_STRUCT_SIZE, nullptr};
  check(cuptiProfilerInitialize(&init), "cuptiProfilerInitialize");
  profiler_initialized = true;

  CUpti_Device_GetChipName_Params chip_params{CUpti_Device_GetChipName_Params_STRUCT_SIZE, nullptr, 0, nullptr};
  chip_params.deviceIndex = static_cast<std::size_t>(device);
  check(cuptiDeviceGetChipName(&chip_params), "cuptiDeviceGetChipName");
  if (chip_params.pChipName == nullptr) throw std::runtime_error("cuptiDeviceGetChipName returned no name");
  chip = chip_params.pChipName;

  // The counter availability image: also where a missing counter permission shows first.
  CUpti_Profiler_GetCounterAvailability_Params avail{};
  avail.structSize = CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE;
  avail.ctx = context;
  check(cuptiProfilerGetCounterAvailability(&avail), "cuptiProfilerGetCounterAvailability (size)");
  availability_image.assign(avail.counterAvailabilityImageSize, 0);
  avail.pCounterAvailabilityImage = availability_image.data();
  check(cuptiProfilerGetCounterAvailability(&avail), "cuptiProfilerGetCounterAvailability");

  build_config();
  available = true;
}

void HwMetricsProfiler::Impl::destroy_host() {
  if (host == nullptr) return;
  CUpti_Profiler_Host_Deinitialize_Params p{};
  p.structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE;
  p.pHostObject = host;
  cuptiProfilerHostDeinitialize(&p);
  host = nullptr;
}

// The config image of the metrics this chip knows: all five, or the three required ones when CUPTI
// refuses the optional ones.
void HwMetricsProfiler::Impl::build_config() {
  const std::vector<std::string> required = {kMetricDramBytesRead, kMetricDramBytesWrite, kMetricDuration};
  const std::vector<std::string> optional = {kMetricDramPctOfPeak, kMetricL2Bytes};
  std::string last_error;
  for (const bool with_optional : {true, false}) {
    destroy_host();
    CUpti_Profiler_Host_Initialize_Params hp{};
    hp.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE;
    hp.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    hp.pChipName = chip.c_str();
    hp.pCounterAvailabilityImage = availability_image.data();
    check(cuptiProfilerHostInitialize(&hp), "cuptiProfilerHostInitialize");
    host = hp.pHostObject;

    metric_names = required;
    if (with_optional) metric_names.insert(metric_names.end(), optional.begin(), optional.end());
    metric_ptrs.clear();
    for (const std::string& m : metric_names) metric_ptrs.push_back(m.c_str());

    CUpti_Profiler_Host_ConfigAddMetrics_Params add{};
    add.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE;
    add.pHostObject = host;
    add.ppMetricNames = metric_ptrs.data();
    add.numMetrics = metric_ptrs.size();
    const CUptiResult r = cuptiProfilerHostConfigAddMetrics(&add);
    if (r != CUPTI_SUCCESS) {
      last_error = "cuptiProfilerHostConfigAddMetrics(" + std::to_string(metric_ptrs.size()) + " metrics) on " + chip +
                   " failed: " + cupti_text(r);
      if (machine_wide(r)) check(r, "cuptiProfilerHostConfigAddMetrics");
      continue;
    }
    CUpti_Profiler_Host_GetConfigImageSize_Params size{};
    size.structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE;
    size.pHostObject = host;
    check(cuptiProfilerHostGetConfigImageSize(&size), "cuptiProfilerHostGetConfigImageSize");
    config_image.assign(size.configImageSize, 0);
    CUpti_Profiler_Host_GetConfigImage_Params image{};
    image.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE;
    image.pHostObject = host;
    image.configImageSize = config_image.size();
    image.pConfigImage = config_image.data();
    check(cuptiProfilerHostGetConfigImage(&image), "cuptiProfilerHostGetConfigImage");
    CUpti_Profiler_Host_GetNumOfPasses_Params passes{};
    passes.structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE;
    passes.configImageSize = config_image.size();
    passes.pConfigImage = config_image.data();
    check(cuptiProfilerHostGetNumOfPasses(&passes), "cuptiProfilerHostGetNumOfPasses");
    config_passes = passes.numOfPasses;
    return;
  }
  destroy_host();
  throw std::runtime_error(last_error + " (the metrics " + kMetricDramBytesRead + ", " + kMetricDramBytesWrite +
                           " and " + kMetricDuration + " are required)");
}

HwMetricsOutcome HwMetricsProfiler::Impl::measure(const std::function<void()>& call,
                                                  const std::function<void()>& before_each_pass) {
  HwMetricsOutcome out;
  if (!available) {
    out.status = HwMetricsOutcome::Status::kSkipped;
    out.reason = reason;
    return out;
  }
  CUpti_RangeProfiler_Object* object = nullptr;
  bool started = false, pushed = false;
  // Leaves CUPTI as it found it, whatever failed; errors here are secondary to the one being reported.
  auto unwind = [&] {
    if (pushed) {
      CUpti_RangeProfiler_PopRange_Params p{CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE, nullptr, object};
      cuptiRangeProfilerPopRange(&p);
      pushed = false;
    }
    if (started) {
      CUpti_RangeProfiler_Stop_Params p{};
      p.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE;
      p.pRangeProfilerObject = object;
      cuptiRangeProfilerStop(&p);
      started = false;
    }
    if (object != nullptr) {
      CUpti_RangeProfiler_Disable_Params p{CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE, nullptr, object};
      cuptiRangeProfilerDisable(&p);
      object = nullptr;
    }
  };
  try {
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize before the metrics pass");
    CUpti_RangeProfiler_Enable_Params enable{};
    enable.structSize = CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE;
    enable.ctx = context;
    check(cuptiRangeProfilerEnable(&enable), "cuptiRangeProfilerEnable");
    object = enable.pRangeProfilerObject;

    CUpti_RangeProfiler_GetCounterDataSize_Params size{};
    size.structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE;
    size.pRangeProfilerObject = object;
    size.pMetricNames = metric_ptrs.data();
    size.numMetrics = metric_ptrs.size();
    size.maxNumOfRanges = 1;
    size.maxNumRangeTreeNodes = 1;
    check(cuptiRangeProfilerGetCounterDataSize(&size), "cuptiRangeProfilerGetCounterDataSize");
    std::vector<std::uint8_t> counter_data(size.counterDataSize, 0);
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params init{};
    init.structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE;
    init.pRangeProfilerObject = object;
    init.counterDataSize = counter_data.size();
    init.pCounterData = counter_data.data();
    check(cuptiRangeProfilerCounterDataImageInitialize(&init), "cuptiRangeProfilerCounterDataImageInitialize");

    CUpti_RangeProfiler_SetConfig_Params config{};
    config.structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE;
    config.pRangeProfilerObject = object;
    config.configSize = config_image.size();
    config.pConfig = config_image.data();
    config.counterDataImageSize = counter_data.size();
    config.pCounterDataImage = counter_data.data();
    config.range = CUPTI_UserRange;
    config.replayMode = CUPTI_UserReplay;
    config.maxRangesPerPass = 1;
    config.numNestingLevels = 1;
    config.minNestingLevel = 1;
    config.passIndex = 0;
    config.targetNestingLevel = 1;
    check(cuptiRangeProfilerSetConfig(&config), "cuptiRangeProfilerSetConfig");

    // CUPTI says when it has every pass (isAllPassSubmitted); the cap only guards against a CUPTI that
    // never does.
    const int max_passes = static_cast<int>(std::max<std::size_t>(config_passes, 1)) * 2 + 8;
    bool all_submitted = false;
    while (!all_submitted) {
      if (out.passes >= max_passes) {
        throw std::runtime_error("CUPTI wanted more than " + std::to_string(max_passes) +
                                 " replays (its configuration needs " + std::to_string(config_passes) + " passes)");
      }
      if (before_each_pass) before_each_pass();
      check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize before a replay");
      CUpti_RangeProfiler_Start_Params start{CUpti_RangeProfiler_Start_Params_STRUCT_SIZE, nullptr, object};
      check(cuptiRangeProfilerStart(&start), "cuptiRangeProfilerStart");
      started = true;
      CUpti_RangeProfiler_PushRange_Params push{CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE, nullptr, object,
                                                kRangeName};
      check(cuptiRangeProfilerPushRange(&push), "cuptiRangeProfilerPushRange");
      pushed = true;
      try {
        call();
      } catch (const std::exception& e) {
        throw std::runtime_error(std::string("the op call failed during the metrics pass: ") + e.what());
      }
      // The range ends after the call's GPU work: its counters are complete, at the price of the
      // synchronization's latency in the range's duration.
      check_cuda(cudaDeviceSynchronize(), "the op call's GPU work in the metrics pass");
      CUpti_RangeProfiler_PopRange_Params pop{CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE, nullptr, object};
      pushed = false;
      check(cuptiRangeProfilerPopRange(&pop), "cuptiRangeProfilerPopRange");
      CUpti_RangeProfiler_Stop_Params stop{};
      stop.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE;
      stop.pRangeProfilerObject = object;
      started = false;
      check(cuptiRangeProfilerStop(&stop), "cuptiRangeProfilerStop");
      ++out.passes;
      all_submitted = stop.isAllPassSubmitted != 0;
    }
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the metrics pass");

    CUpti_RangeProfiler_DecodeData_Params decode{};
    decode.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE;
    decode.pRangeProfilerObject = object;
    check(cuptiRangeProfilerDecodeData(&decode), "cuptiRangeProfilerDecodeData");
    if (decode.numOfRangeDropped != 0) {
      throw std::runtime_error("CUPTI dropped " + std::to_string(decode.numOfRangeDropped) +
                               " range(s) while decoding");
    }
    CUpti_RangeProfiler_GetCounterDataInfo_Params info{};
    info.structSize = CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE;
    info.pCounterDataImage = counter_data.data();
    info.counterDataImageSize = counter_data.size();
    check(cuptiRangeProfilerGetCounterDataInfo(&info), "cuptiRangeProfilerGetCounterDataInfo");
    if (info.numTotalRanges != 1) {
      throw std::runtime_error("the counter data holds " + std::to_string(info.numTotalRanges) + " ranges, not 1");
    }
    std::vector<double> values(metric_ptrs.size(), std::nan(""));
    CUpti_Profiler_Host_EvaluateToGpuValues_Params eval{};
    eval.structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE;
    eval.pHostObject = host;
    eval.pCounterDataImage = counter_data.data();
    eval.counterDataImageSize = counter_data.size();
    eval.rangeIndex = 0;
    eval.ppMetricNames = metric_ptrs.data();
    eval.numMetrics = metric_ptrs.size();
    eval.pMetricValues = values.data();
    check(cuptiProfilerHostEvaluateToGpuValues(&eval), "cuptiProfilerHostEvaluateToGpuValues");
    unwind();
    for (std::size_t i = 0; i < metric_names.size(); ++i) out.values[metric_names[i]] = values[i];
    out.status = HwMetricsOutcome::Status::kMeasured;
    return out;
  } catch (const CuptiFailure& e) {
    unwind();
    out.reason = e.what();
    if (machine_wide(e.code)) {
      // Every later pass would fail the same way: skip them at once, with this reason.
      available = false;
      reason = e.what();
      out.status = HwMetricsOutcome::Status::kSkipped;
    } else {
      out.status = HwMetricsOutcome::Status::kError;
    }
  } catch (const std::exception& e) {
    unwind();
    out.status = HwMetricsOutcome::Status::kError;
    out.reason = e.what();
  }
  cudaGetLastError();
  return out;
}

HwMetricsProfiler::HwMetricsProfiler(int device) : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  try {
    impl_->set_up();
  } catch (const std::exception& e) {
    impl_->available = false;
    impl_->reason = e.what();
    impl_->destroy_host();
    cudaGetLastError();
  }
}

HwMetricsProfiler::~HwMetricsProfiler() {
  impl_->destroy_host();
  if (impl_->profiler_initialized) {
    CUpti_Profiler_DeInitialize_Params p{CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE, nullptr};
    cuptiProfilerDeInitialize(&p);
  }
}

bool HwMetricsProfiler::available() const { return impl_->available; }

const std::string& HwMetricsProfiler::reason() const { return impl_->reason; }

json HwMetricsProfiler::description() const {
  if (!impl_->available) return {{"available", false}, {"reason", impl_->reason}};
  return {{"available", true},
          {"chip", impl_->chip},
          {"metrics", impl_->metric_names},
          {"config_passes", impl_->config_passes}};
}

HwMetricsOutcome HwMetricsProfiler::measure(const std::function<void()>& call,
                                            const std::function<void()>& before_each_pass) {
  return impl_->measure(call, before_each_pass);
}

}  // namespace detops::harness::bench
