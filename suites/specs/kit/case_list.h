#pragma once
// A spec's seeded case list: add(name, config) (or the list called as add(name, config)) appends a case whose seed is the one after the last, so a
// list's seeds follow the order its cases are added in (a case added in between moves every later seed).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "detops/harness/op_spec.h"

namespace detops::kit {

template <typename Config>
struct CaseList {
  // Builds a case's data from its config (and name, for the builder's error messages) and seed.
  using Make = std::function<harness::CaseData(const Config& cfg, const std::string& name, std::uint64_t seed)>;

  // `seed` is the one before the first case's.
  CaseList(std::uint64_t seed, Make make) : seed(seed), make(std::move(make)) {}
  // A builder that takes no name: make(cfg, seed).
  template <typename F, std::enable_if_t<std::is_invocable_r_v<harness::CaseData, F, const Config&, std::uint64_t>, int> = 0>
  CaseList(std::uint64_t seed, F make)
      : CaseList(seed, Make([make](const Config& cfg, const std::string&, std::uint64_t s) { return make(cfg, s); })) {}

  void add(const std::string& name, const Config& cfg, std::map<harness::Device, std::string> skip = {}) {
    cases.push_back(harness::OpCase{name, ++seed, [make = make, cfg, name](std::uint64_t s) { return make(cfg, name, s); },
                                    std::move(skip)});
  }

  void operator()(const std::string& name, const Config& cfg, std::map<harness::Device, std::string> skip = {}) {
    add(name, cfg, std::move(skip));
  }

  std::uint64_t seed;
  Make make;
  std::vector<harness::OpCase> cases;
};

}  // namespace detops::kit
