// The correctness suite: one GoogleTest test per (op, check, case, dtype, device), registered from the
// op-spec registry. Each test attaches its figures (errors, worst element, seed, reproducibility) as
// properties, so --gtest_output=json:FILE is the correctness record. The device and build facts are
// attached at the top level. Exit code 77 when every selected test was skipped (CTest: "skipped").
#include <gtest/gtest.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <utility>

#include "detops/harness/checks.h"
#include "detops/harness/device_facts.h"
#include "detops/harness/op_spec.h"

namespace detops::harness {
namespace {

class CheckTest : public testing::Test {
 public:
  explicit CheckTest(std::function<CheckResult()> run) : run_(std::move(run)) {}

  void TestBody() override {
    const CheckResult r = run_();
    for (const auto& [key, value] : r.properties) RecordProperty(key, value);
    if (r.outcome == Outcome::kSkipped || r.outcome == Outcome::kNotSupported) {
      GTEST_SKIP() << outcome_name(r.outcome) << ": " << r.message;
    }
    EXPECT_TRUE(r.outcome == Outcome::kPassed) << outcome_name(r.outcome) << ": " << r.message;
  }

 private:
  std::function<CheckResult()> run_;
};

void add_test(const std::string& suite, const std::string& name, std::function<CheckResult()> run) {
  testing::RegisterTest(suite.c_str(), name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                        [run]() -> testing::Test* { return new CheckTest(run); });
}

void register_tests() {
  const Device devices[] = {Device::kCpu, Device::kCuda};
  for (const OpSpec& op : OpRegistry::instance().ops()) {
    const OpSpec* o = &op;
    for (const OpCase& c : op.cases) {
      const OpCase* cp = &c;
      for (Device dev : devices) {
        for (DType dt : op.dtypes) {
          const std::string tail = c.name + "." + dtype_name(dt) + "." + device_name(dev);
          add_test(op.name + ".forward", tail, [=] { return check_forward(*o, *cp, dt, dev); });
          if (op.has_backward) add_test(op.name + ".backward", tail, [=] { return check_backward(*o, *cp, dt, dev); });
        }
        if (op.has_backward) {
          add_test(op.name + ".gradcheck_fd", c.name + ".fp64." + device_name(dev),
                   [=] { return check_gradient_finite_differences(*o, *cp, dev); });
        }
      }
      if (op.has_backward) {
        add_test(op.name + ".reference_gradcheck", c.name + ".fp64.cpu", [=] { return check_reference_gradient(*o, *cp); });
      }
    }
    for (const ExtraCheck& e : op.extra_checks) {
      const ExtraCheck* ep = &e;
      add_test(op.name + "." + e.check, e.variant + "." + device_name(e.device), [=] { return run_extra_check(*ep); });
    }
    for (const BadInputCase& b : op.bad_inputs) {
      const BadInputCase* bp = &b;
      for (Device dev : devices) {
        add_test(op.name + ".bad_input", b.name + "." + device_name(dev), [=] { return check_bad_input(*o, *bp, dev); });
      }
    }
  }
}

// With DETOPS_PROGRESS set, one line on stderr per op and every ~10% of the tests (long runs show
// progress; --gtest_brief=1 prints only failures). With DETOPS_PROGRESS_FILE set (scripts/test.sh), lines
// '[correctness <done>/<total> <elapsed>s]' appended to that file: at the start, then at the end of a test that
// reaches a whole percent or ends 15 s or more after the last line, for the test command's watcher (scripts/lib.sh
// detops_watch_progress).
class ProgressListener : public testing::EmptyTestEventListener {
 public:
  ProgressListener(bool to_stderr, std::string file) : to_stderr_(to_stderr), file_(std::move(file)) {}

  void OnTestProgramStart(const testing::UnitTest& ut) override {
    total_ = ut.test_to_run_count();
    start_ = std::chrono::steady_clock::now();
    if (total_ > 0) write_file();
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    ++done_;
    if (info.result()->Failed()) ++failed_;
    const std::string suite = info.test_suite_name();
    const std::string op = suite.substr(0, suite.find('.'));
    const bool new_op = op != op_;
    if (to_stderr_ &&
        (new_op || done_ * 10 / std::max(total_, 1) != (done_ - 1) * 10 / std::max(total_, 1) || done_ == total_)) {
      std::cerr << "[correctness " << done_ << "/" << total_ << "] " << op << (failed_ ? " (" + std::to_string(failed_) + " failed so far)" : "")
                << std::endl;
    }
    op_ = op;
    const int pct = static_cast<int>(static_cast<long long>(done_) * 100 / std::max(total_, 1));
    if (pct != last_pct_ || done_ >= total_ || seconds_since(last_write_) >= 15.0) {
      last_pct_ = pct;
      write_file();
    }
  }

 private:
  double seconds_since(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
  void write_file() {
    if (file_.empty()) return;
    last_write_ = std::chrono::steady_clock::now();
    std::ofstream f(file_, std::ios::app);  // a failure to write is ignored: progress is never a test failure
    f << "[correctness " << done_ << "/" << total_ << " " << static_cast<long long>(seconds_since(start_)) << "s]\n";
  }

  bool to_stderr_;
  std::string file_;
  int total_ = 0, done_ = 0, failed_ = 0, last_pct_ = -1;
  std::string op_;
  std::chrono::steady_clock::time_point start_, last_write_;
};

}  // namespace
}  // namespace detops::harness

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // Every large host buffer from the heap, and the heap kept: glibc serves blocks over 32 MB with a fresh mmap
  // and unmaps them on free, so each fp64 copy of a large case (the references' inputs, the finite-difference
  // evaluations) page-faulted its whole size in again. One 27x27 PS-RoIPool gradient check spent 25 of its 33 s
  // in the kernel (8.5 million faults); served from a kept heap it takes 9.6 s with 0.8 s of system time. The
  // cost: the process keeps its peak heap until it exits.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
  testing::InitGoogleTest(&argc, argv);
  detops::harness::register_tests();
  const char* p = std::getenv("DETOPS_PROGRESS");
  const bool progress_stderr = p != nullptr && *p != '\0' && *p != '0';
  const char* progress_file = std::getenv("DETOPS_PROGRESS_FILE");
  if (progress_stderr || (progress_file != nullptr && *progress_file != '\0')) {
    testing::UnitTest::GetInstance()->listeners().Append(
        new detops::harness::ProgressListener(progress_stderr, progress_file != nullptr ? progress_file : ""));
  }
  const nlohmann::json facts = detops::harness::device_facts();
  testing::Test::RecordProperty("detops_device_facts", facts.dump());
  if (!detops::harness::cuda_available()) {
    std::cout << "DetOps: CUDA tests will be skipped: " << detops::harness::cuda_unavailable_reason() << "\n";
  } else {
    std::cout << "DetOps: running on " << facts["gpu"]["name"].get<std::string>() << " (sm_"
              << facts["gpu"]["compute_capability"].get<std::string>() << ")\n";
  }
  const int rc = RUN_ALL_TESTS();
  const testing::UnitTest& ut = *testing::UnitTest::GetInstance();
  if (rc == 0 && ut.test_to_run_count() > 0 && ut.skipped_test_count() == ut.test_to_run_count()) return 77;
  return rc;
}
