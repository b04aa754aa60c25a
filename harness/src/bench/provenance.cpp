#include "detops/harness/bench/provenance.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "detops/harness/bench/gpu_timer.h"
#include "detops/harness/device_facts.h"

#ifndef DETOPS_NVCC_VERSION
#define DETOPS_NVCC_VERSION "unknown"
#endif
#ifndef DETOPS_NVCC_FLAGS
#define DETOPS_NVCC_FLAGS ""
#endif
#ifndef DETOPS_SOURCE_DIR
#define DETOPS_SOURCE_DIR "."
#endif

namespace detops::harness::bench {
namespace {

using nlohmann::json;

std::string run_command(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 256> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr) out += buf.data();
  const int rc = ::pclose(p);
  if (rc != 0) return {};
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

json git_facts() {
  const char* sha = std::getenv("DETOPS_GIT_SHA");
  const char* dirty = std::getenv("DETOPS_GIT_DIRTY");
  json g;
  if (sha != nullptr && *sha != '\0') {
    g["sha"] = sha;
    g["source"] = "environment";
  } else {
    const std::string s = run_command("git -C '" DETOPS_SOURCE_DIR "' rev-parse HEAD 2>/dev/null");
    g["sha"] = s.empty() ? json() : json(s);
    g["source"] = "git";
  }
  if (dirty != nullptr && *dirty != '\0') {
    const std::string d = dirty;
    g["dirty"] = !(d == "0" || d == "false" || d == "no");
  } else {
    // --porcelain prints one line per change; an error leaves the answer unknown.
    FILE* p = ::popen("git -C '" DETOPS_SOURCE_DIR "' status --porcelain --untracked-files=no 2>/dev/null", "r");
    if (p == nullptr) {
      g["dirty"] = nullptr;
    } else {
      bool any = std::fgetc(p) != EOF;
      while (std::fgetc(p) != EOF) {
      }
      g["dirty"] = ::pclose(p) == 0 ? json(any) : json();
    }
  }
  return g;
}

std::string utc_now(const char* format) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), format, &tm);
  return buf;
}

json int_or_null(int v) { return v > 0 ? json(v) : json(); }

}  // namespace

std::string gpu_slug(const std::string& name) {
  std::string s = name;
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  }
  return s;
}

json run_provenance(const ProvenanceInputs& in, const NvmlDevice& nvml) {
  const json facts = device_facts();
  json d;
  const json gpu_facts = facts.value("gpu", json::object());
  const std::string gpu_name = gpu_facts.value("name", std::string("no-gpu"));
  const char* run_id = std::getenv("DETOPS_RUN_ID");
  d["run_id"] = (run_id != nullptr && *run_id != '\0') ? std::string(run_id)
                                                        : utc_now("%Y%m%dT%H%M%SZ") + "_" + gpu_slug(gpu_name);
  d["complete"] = false;
  d["git"] = git_facts();
  char host[256] = {};
  d["host"] = ::gethostname(host, sizeof(host) - 1) == 0 ? std::string(host) : std::string();
  d["date"] = utc_now("%Y-%m-%dT%H:%M:%SZ");

  json gpu = {{"name", gpu_name},
              {"uuid", gpu_facts.value("uuid", std::string())},
              {"compute_capability", gpu_facts.value("compute_capability", std::string())},
              {"sm_count", gpu_facts.value("sm_count", 0)},
              {"l2_cache_bytes", gpu_facts.value("l2_cache_bytes", 0)},
              {"memory_bytes", gpu_facts.value("total_memory_bytes", std::uint64_t{0})},
              {"ecc_enabled", gpu_facts.value("ecc_enabled", false)}};
  const double power = nvml.power_limit_w();
  gpu["power_limit_w"] = power > 0 ? json(power) : json();
  int default_clock = nvml.default_sm_clock_mhz();
  gpu["default_sm_clock_source"] = default_clock > 0 ? "nvml_default_applications_clock" : "cudaDevAttrClockRate";
  if (default_clock <= 0) {
    const int khz = gpu_facts.value("default_sm_clock_khz", -1);
    default_clock = khz > 0 ? khz / 1000 : -1;
  }
  gpu["default_sm_clock_mhz"] = int_or_null(default_clock);
  gpu["max_sm_clock_mhz"] = int_or_null(nvml.max_sm_clock_mhz());
  int mem_clock = nvml.memory_clock_mhz();
  if (mem_clock <= 0) {
    const int khz = gpu_facts.value("memory_clock_khz", -1);
    mem_clock = khz > 0 ? khz / 1000 : -1;
  }
  gpu["memory_clock_mhz"] = int_or_null(mem_clock);
  d["gpu"] = gpu;
  d["nvml"] = nvml.available() ? json{{"available", true}, {"version", nvml.nvml_version()}}
                               : json{{"available", false}, {"reason", nvml.reason()}};

  const std::string driver = nvml.driver_version();
  d["driver_version"] = driver.empty() ? json() : json(driver);
  int v = 0;
  d["cuda_driver_api_version"] = cudaDriverGetVersion(&v) == cudaSuccess ? json(v) : json();
  d["cuda_runtime_version"] = cudaRuntimeGetVersion(&v) == cudaSuccess ? json(v) : json();
  cudaGetLastError();
  d["cupti_version"] = int_or_null(cupti_version());
  d["nvcc_version"] = DETOPS_NVCC_VERSION;
  d["nvcc_flags"] = DETOPS_NVCC_FLAGS;
  const json build = facts.value("build", json::object());
  d["cuda_archs"] = build.value("cuda_architectures", std::string());
  d["sass_archs"] = build.value("sass_architectures", std::string());
  json kernels = json::array();
  int sass = 0, jit = 0;
  for (const json& k : facts.value("kernels", json::array())) {
    const std::string from = k.value("runs_from", std::string());
    sass += from == "sass";
    jit += from == "ptx-jit";
    kernels.push_back({{"name", k.value("kernel", std::string())},
                       {"op", k.value("op", std::string())},
                       {"binary_version", k.value("binary_version", 0)},
                       {"ptx_version", k.value("ptx_version", 0)},
                       {"runs_from", from}});
  }
  d["kernel_images"] = {{"sass", sass}, {"ptx_jit", jit}, {"kernels", kernels}};
  d["libtorch_version"] = build.value("libtorch_version", std::string());
  d["libtorch_cuda_version"] = build.value("libtorch_cuda_version", std::string());
  d["timer"] = in.timer;
  d["timer_note"] = in.timer_note;
  d["device_copy_bandwidth_bytes_per_second"] = in.device_copy_bandwidth > 0 ? json(in.device_copy_bandwidth) : json();
  d["settings"] = in.settings;
  return d;
}

}  // namespace detops::harness::bench
