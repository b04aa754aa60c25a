#include "detops/harness/bench/gpu_timer.h"

#include <cupti.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "detops/core/cuda_check.h"

namespace detops::harness::bench {
namespace {

std::string cupti_error(CUptiResult r) {
  const char* text = nullptr;
  if (cuptiGetResultString(r, &text) != CUPTI_SUCCESS || text == nullptr) return "CUPTI error " + std::to_string(r);
  return text;
}

void check_cupti(CUptiResult r, const char* what) {
  if (r != CUPTI_SUCCESS) throw std::runtime_error(std::string(what) + " failed: " + cupti_error(r));
}

class EventTimer final : public GpuTimer {
 public:
  EventTimer() {
    DETOPS_CUDA_CHECK(cudaEventCreate(&start_));
    DETOPS_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() override {
    DETOPS_CUDA_CHECK_NOTHROW(cudaEventDestroy(start_));
    DETOPS_CUDA_CHECK_NOTHROW(cudaEventDestroy(stop_));
  }
  const char* name() const override { return "cuda_events"; }
  KernelSample time_call(const std::function<void()>& call, cudaStream_t stream, bool) override {
    DETOPS_CUDA_CHECK(cudaEventRecord(start_, stream));
    call();
    DETOPS_CUDA_CHECK(cudaEventRecord(stop_, stream));
    DETOPS_CUDA_CHECK(cudaEventSynchronize(stop_));
    DETOPS_CUDA_CHECK(cudaDeviceSynchronize());
    float ms = 0;
    DETOPS_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    KernelSample s;
    s.valid = true;
    s.sum_ms = s.span_ms = ms;
    return s;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

// Activity records collected by CUPTI's buffer callbacks (which may run on CUPTI's own thread).
struct KernelRecord {
  std::uint32_t correlation;
  std::uint64_t start, end;
  std::string name;
};

struct ActivityStore {
  std::mutex mutex;
  std::vector<KernelRecord> kernels;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> external;  // (external id, correlation id)
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::uint64_t> bad_buffers{0};
};

ActivityStore& store() {
  static ActivityStore* s = new ActivityStore;  // outlives CUPTI's callbacks at exit
  return *s;
}

constexpr std::size_t kBufferBytes = 8u << 20;
constexpr std::size_t kBufferAlign = 8;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(::operator new(kBufferBytes, std::align_val_t(kBufferAlign), std::nothrow));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid_size) {
  ActivityStore& s = store();
  if (buffer == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    CUpti_Activity* record = nullptr;
    for (;;) {
      const CUptiResult r = cuptiActivityGetNextRecord(buffer, valid_size, &record);
      if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
      if (r != CUPTI_SUCCESS) {
        s.bad_buffers.fetch_add(1);
        break;
      }
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        s.kernels.push_back({k->correlationId, k->start, k->end, k->name ? k->name : "?"});
      } else if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) s.external.emplace_back(e->externalId, e->correlationId);
      }
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS && dropped > 0) {
    s.dropped.fetch_add(dropped);
  }
  ::operator delete(buffer, std::align_val_t(kBufferAlign));
}

class CuptiTimer final : public GpuTimer {
 public:
  // Throws std::runtime_error with CUPTI's error when the Activity API cannot be used.
  CuptiTimer() {
    check_cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    check_cupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
    enabled_kernel_ = true;
    check_cupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION), "cuptiActivityEnable(EXTERNAL_CORRELATION)");
    enabled_external_ = true;
    // External correlation records are emitted for the CUDA API calls made while an id is pushed; the
    // runtime and driver API records are what they correlate to.
    check_cupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "cuptiActivityEnable(RUNTIME)");
    enabled_runtime_ = true;
    check_cupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER), "cuptiActivityEnable(DRIVER)");
    enabled_driver_ = true;
    // Probe: a flush must work before we rely on it.
    DETOPS_CUDA_CHECK(cudaDeviceSynchronize());
    check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    clear();
  }
  ~CuptiTimer() override {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (enabled_driver_) cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
    if (enabled_runtime_) cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);
    if (enabled_external_) cuptiActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    if (enabled_kernel_) cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  }
  const char* name() const override { return "cupti"; }
  bool batches() const override { return batching_; }

  std::vector<KernelSample> time_calls(const std::function<void()>& call, const std::function<void()>& prepare,
                                       cudaStream_t stream, int count, bool want_names_first,
                                       bool synchronize_each) override {
    if (count <= 1 || !batching_) return GpuTimer::time_calls(call, prepare, stream, count, want_names_first);
    if (flush_before_) check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    clear();
    const std::uint64_t dropped_before = store().dropped.load();
    const std::uint64_t bad_before = store().bad_buffers.load();
    const std::uint64_t first_id = next_id_ + 1;
    // Queued without a synchronization in between: prepare i (its flush or touch has no external id, so none
    // of its kernels is attributed), then call i under id first_id + i. The GPU runs them in this order on the
    // stream, as it did with one sample per synchronization.
    // synchronize_each: the device synchronized after each call, as time_call does, so the next sample's prepare
    // and call start on an idle device.
    for (int i = 0; i < count; ++i) {
      if (prepare) prepare();
      call_under_id(call, ++next_id_);
      if (synchronize_each) DETOPS_CUDA_CHECK(cudaDeviceSynchronize());
    }
    DETOPS_CUDA_CHECK(cudaDeviceSynchronize());
    check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");

    std::vector<KernelSample> out(static_cast<std::size_t>(count));
    ActivityStore& st = store();
    std::lock_guard<std::mutex> lock(st.mutex);
    if (st.dropped.load() != dropped_before || st.bad_buffers.load() != bad_before) {
      for (KernelSample& s : out) {
        s.dropped_records = true;
        s.invalid_reason = "CUPTI dropped activity records during the sample's batch";
      }
      flush_before_ = true;
      return out;
    }
    std::unordered_map<std::uint32_t, std::size_t> sample_of;  // correlation id -> sample
    for (const auto& [external, correlation] : st.external) {
      if (external >= first_id && external < first_id + static_cast<std::uint64_t>(count)) {
        sample_of[correlation] = static_cast<std::size_t>(external - first_id);
      }
    }
    if (sample_of.empty()) {
      // Without external-correlation records a batch cannot be split into its samples (window attribution
      // needs a synchronization on either side of each call): these samples are discarded and every later
      // one is taken alone.
      batching_ = false;
      flush_before_ = true;
      for (KernelSample& s : out) s.invalid_reason = "no external-correlation record for a batch of samples";
      return out;
    }
    flush_before_ = false;
    struct Span {
      std::uint64_t first = std::numeric_limits<std::uint64_t>::max(), last = 0, sum = 0;
      int count = 0;
      bool bad = false;
    };
    std::vector<Span> spans(out.size());
    for (const KernelRecord& k : st.kernels) {
      const auto it = sample_of.find(k.correlation);
      if (it == sample_of.end()) continue;  // a flush, a touch or other work: in no sample
      Span& sp = spans[it->second];
      if (k.end < k.start) {
        sp.bad = true;
        continue;
      }
      sp.sum += k.end - k.start;
      sp.first = std::min(sp.first, k.start);
      sp.last = std::max(sp.last, k.end);
      ++sp.count;
      if (it->second == 0 && want_names_first) out[0].names.push_back(k.name);
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
      KernelSample& s = out[i];
      const Span& sp = spans[i];
      if (sp.bad) {
        s.invalid_reason = "a kernel record has end < start";
      } else if (sp.count == 0) {
        s.invalid_reason = "no kernel was attributed to the call";
      } else {
        s.valid = true;
        s.kernels = sp.count;
        s.sum_ms = static_cast<double>(sp.sum) * 1e-6;
        s.span_ms = static_cast<double>(sp.last - sp.first) * 1e-6;
      }
    }
    return out;
  }

  KernelSample time_call(const std::function<void()>& call, cudaStream_t, bool want_names) override {
    // Records of earlier work are dropped from the store first. Kernels are attributed by external
    // correlation id, so records of other work that CUPTI delivers later are filtered out anyway; only
    // when the previous sample fell back to window attribution (no external-correlation records) must
    // the store be flushed clean before the call (a forced flush costs a few hundred microseconds).
    if (flush_before_) check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    clear();
    flush_before_ = true;  // until this sample is attributed by external id
    const std::uint64_t dropped_before = store().dropped.load();
    const std::uint64_t bad_before = store().bad_buffers.load();
    const std::uint64_t id = ++next_id_;
    call_under_id(call, id);
    DETOPS_CUDA_CHECK(cudaDeviceSynchronize());
    check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");

    KernelSample s;
    ActivityStore& st = store();
    std::lock_guard<std::mutex> lock(st.mutex);
    if (st.dropped.load() != dropped_before || st.bad_buffers.load() != bad_before) {
      s.dropped_records = true;
      s.invalid_reason = "CUPTI dropped activity records during the sample";
      return s;
    }
    std::unordered_set<std::uint32_t> mine;
    for (const auto& [external, correlation] : st.external) {
      if (external == id) mine.insert(correlation);
    }
    s.window_attribution = mine.empty();
    flush_before_ = s.window_attribution;
    std::uint64_t first = std::numeric_limits<std::uint64_t>::max(), last = 0, sum = 0;
    int count = 0;
    for (const KernelRecord& k : st.kernels) {
      if (!s.window_attribution && mine.count(k.correlation) == 0) continue;
      if (k.end < k.start) {
        s.invalid_reason = "a kernel record has end < start";
        return s;
      }
      sum += k.end - k.start;
      first = std::min(first, k.start);
      last = std::max(last, k.end);
      ++count;
      if (want_names) s.names.push_back(k.name);
    }
    if (count == 0) {
      s.invalid_reason = "no kernel was attributed to the call";
      return s;
    }
    s.valid = true;
    s.kernels = count;
    s.sum_ms = static_cast<double>(sum) * 1e-6;
    s.span_ms = static_cast<double>(last - first) * 1e-6;
    return s;
  }

 private:
  // Runs `call` with `id` pushed as the CUSTOM0 external correlation id (its CUDA API calls, and so its
  // kernels, carry it); the id is popped whatever `call` throws, and what it threw is rethrown.
  static void call_under_id(const std::function<void()>& call, std::uint64_t id) {
    check_cupti(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id),
                "cuptiActivityPushExternalCorrelationId");
    std::exception_ptr failure;
    try {
      call();
    } catch (...) {
      failure = std::current_exception();
    }
    std::uint64_t popped = 0;
    const CUptiResult pop = cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped);
    if (failure) std::rethrow_exception(failure);
    check_cupti(pop, "cuptiActivityPopExternalCorrelationId");
  }
  static void clear() {
    std::lock_guard<std::mutex> lock(store().mutex);
    store().kernels.clear();
    store().external.clear();
  }
  std::uint64_t next_id_ = 0;
  bool flush_before_ = true;
  bool batching_ = true;  // until a batch comes without external-correlation records
  bool enabled_kernel_ = false, enabled_external_ = false, enabled_runtime_ = false, enabled_driver_ = false;
};

}  // namespace

std::vector<KernelSample> GpuTimer::time_calls(const std::function<void()>& call, const std::function<void()>& prepare,
                                               cudaStream_t stream, int count, bool want_names_first, bool) {
  std::vector<KernelSample> out;
  out.reserve(static_cast<std::size_t>(std::max(count, 1)));
  for (int i = 0; i < std::max(count, 1); ++i) {
    if (prepare) prepare();
    out.push_back(time_call(call, stream, want_names_first && i == 0));
  }
  return out;
}

std::unique_ptr<GpuTimer> make_gpu_timer(std::string* why_not_cupti) {
  const char* forced = std::getenv("DETOPS_BENCH_TIMER");
  if (forced != nullptr && std::string(forced) == "events") {
    if (why_not_cupti) *why_not_cupti = "DETOPS_BENCH_TIMER=events";
    return std::make_unique<EventTimer>();
  }
  try {
    return std::make_unique<CuptiTimer>();
  } catch (const std::exception& e) {
    // A constructor that throws runs no destructor: disable whatever it had enabled.
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (why_not_cupti) *why_not_cupti = e.what();
    return std::make_unique<EventTimer>();
  }
}

int cupti_version() {
  uint32_t v = 0;
  return cuptiGetVersion(&v) == CUPTI_SUCCESS ? static_cast<int>(v) : -1;
}

}  // namespace detops::harness::bench
