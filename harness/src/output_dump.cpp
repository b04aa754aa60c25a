#include "detops/harness/output_dump.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>

namespace detops::harness {
namespace {

class OutputDumper {
 public:
  OutputDumper() {
    const char* dir = std::getenv("DETOPS_SAVE_OUTPUTS");
    if (dir == nullptr || *dir == '\0') return;
    dir_ = dir;
    if (const char* m = std::getenv("DETOPS_SAVE_OUTPUTS_MAX_ELEMENTS")) max_elements_ = std::max<long long>(1, std::atoll(m));
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) fail("cannot create " + dir_.string() + ": " + ec.message());
  }
  ~OutputDumper() { write_index(); }

  bool enabled() const { return !dir_.empty() && !failed_; }

  void dump(const std::string& name, const std::string& dtype, const at::Tensor& output) {
    if (!enabled()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const at::Tensor flat = output.detach().to(at::kCPU).to(at::kDouble).contiguous().reshape({-1});
    const std::int64_t n = flat.numel();
    const bool subsampled = n > max_elements_;
    const std::int64_t stride = subsampled ? (n + max_elements_ - 1) / max_elements_ : 1;
    const at::Tensor saved = subsampled ? flat.slice(0, 0, n, stride).contiguous() : flat;
    const std::string file = name + ".f64";
    std::ofstream os(dir_ / file, std::ios::binary);
    os.write(reinterpret_cast<const char*>(saved.data_ptr<double>()), static_cast<std::streamsize>(saved.numel() * 8));
    if (!os) {
      fail("cannot write " + (dir_ / file).string());
      return;
    }
    index_[name] = {{"file", file},
                    {"shape", output.sizes().vec()},
                    {"dtype", dtype},
                    {"output_dtype", std::string(c10::toString(output.scalar_type()))},
                    {"elements_saved", saved.numel()},
                    {"subsampled", subsampled},
                    {"stride", stride}};
    if (++since_write_ >= 64) write_index();
  }

 private:
  void write_index() {
    if (dir_.empty() || index_.empty()) return;
    since_write_ = 0;
    const std::filesystem::path tmp = dir_ / "index.json.tmp";
    {
      std::ofstream os(tmp);
      os << index_.dump(1) << '\n';
      if (!os) return fail("cannot write " + tmp.string());
    }
    std::error_code ec;
    std::filesystem::rename(tmp, dir_ / "index.json", ec);
    if (ec) fail("cannot rename " + tmp.string() + ": " + ec.message());
  }
  void fail(const std::string& why) {
    if (!failed_) std::cerr << "DetOps: output dumps disabled: " << why << '\n';
    failed_ = true;
  }

  std::filesystem::path dir_;
  long long max_elements_ = 4096;
  bool failed_ = false;
  int since_write_ = 0;
  nlohmann::json index_ = nlohmann::json::object();
  std::mutex mutex_;
};

OutputDumper& dumper() {
  static OutputDumper d;
  return d;
}

}  // namespace

bool output_dump_enabled() { return dumper().enabled(); }

void dump_output(const std::string& test_name, const std::string& dtype_under_test, const at::Tensor& output) {
  dumper().dump(test_name, dtype_under_test, output);
}

}  // namespace detops::harness
