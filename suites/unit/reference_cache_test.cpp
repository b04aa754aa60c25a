// The reference cache (harness/reference_cache.h): its key tells apart everything a reference's values depend on,
// and a stored file comes back bitwise or not at all (truncated, edited, foreign or trailing bytes: absent).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "detops/harness/reference_cache.h"

namespace detops::harness {
namespace {

Tensors sample_inputs() {
  at::Tensor x = at::arange(24, at::kDouble).reshape({2, 3, 4}) / 7.0;
  at::Tensor idx = at::tensor({0, 1, 1}, at::kLong);
  return {x, idx};
}

std::string key_of(const std::string& build, const ReferenceKeyParts& p) { return reference_cache_key(build, p); }

TEST(ReferenceCache, KeyTellsApartEveryPart) {
  const Tensors in = sample_inputs(), grads = {at::ones({2, 3}, at::kDouble)}, none;
  const ReferenceKeyParts base{"roi_align", "tiny", 11, false, "fp32", &in, &none};
  const std::string k = key_of("build-a", base);
  EXPECT_EQ(k.size(), 32u);
  EXPECT_EQ(k, key_of("build-a", base)) << "the same parts give the same key";
  const Tensors copy = {in[0].clone(), in[1].clone()};
  ReferenceKeyParts same = base;
  same.inputs = &copy;
  EXPECT_EQ(k, key_of("build-a", same)) << "equal values in other memory give the same key";

  std::vector<std::pair<const char*, std::string>> others;
  others.emplace_back("build", key_of("build-b", base));
  auto with = [&](const char* what, auto edit) {
    ReferenceKeyParts p = base;
    edit(p);
    others.emplace_back(what, key_of("build-a", p));
  };
  with("op", [](ReferenceKeyParts& p) { p.op = "roi_pool"; });
  with("case", [](ReferenceKeyParts& p) { p.case_name = "tiny2"; });
  with("seed", [](ReferenceKeyParts& p) { p.seed = 12; });
  with("direction", [](ReferenceKeyParts& p) { p.backward = true; });
  with("dtype", [](ReferenceKeyParts& p) { p.dtype = "fp16"; });
  with("grads", [&](ReferenceKeyParts& p) { p.grads = &grads; });
  // One value one ulp away, the same values in another layout (strides), another dtype of the same values, a
  // dropped input: all different inputs to a reference.
  Tensors ulp = {in[0].clone(), in[1]};
  ulp[0].view(-1)[5] = std::nextafter(ulp[0].view(-1)[5].item<double>(), 1.0);
  with("one ulp", [&](ReferenceKeyParts& p) { p.inputs = &ulp; });
  const Tensors strided = {in[0].transpose(1, 2).contiguous().transpose(1, 2), in[1]};
  ASSERT_TRUE(at::equal(strided[0], in[0]));
  with("strides", [&](ReferenceKeyParts& p) { p.inputs = &strided; });
  const Tensors as_int = {in[0], in[1].to(at::kInt)};
  with("index dtype", [&](ReferenceKeyParts& p) { p.inputs = &as_int; });
  const Tensors fewer = {in[0]};
  with("input count", [&](ReferenceKeyParts& p) { p.inputs = &fewer; });
  for (const auto& [what, other] : others) EXPECT_NE(other, k) << what << " does not change the key";
}

// POSIX only (no std::filesystem: libtorch, loaded here, exports its own copy, and remove_all crashed in it).
class ReferenceFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/detops_refcache_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/ab/entry.ref";
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir((dir_ + "/ab").c_str());
    ::rmdir(dir_.c_str());
  }
  std::string dir_, path_;
};

TEST_F(ReferenceFile, RoundTripIsBitwise) {
  at::Tensor nonfinite = at::tensor({1.0, -0.0, std::nan(""), INFINITY, 5e-324}, at::kDouble);
  const Tensors outputs = {at::randn({3, 4, 5}, at::kDouble).transpose(0, 2), nonfinite, at::Tensor(),
                           at::tensor({7, -1}, at::kLong), at::zeros({0, 3}, at::kDouble), at::scalar_tensor(2.5, at::kDouble)};
  const Tensors magnitudes = {at::rand({5, 4, 3}, at::kFloat)};
  ASSERT_TRUE(save_reference(path_, outputs, magnitudes));
  const auto back = load_reference(path_);
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->first.size(), outputs.size());
  ASSERT_EQ(back->second.size(), 1u);
  for (size_t i = 0; i < outputs.size(); ++i) {
    ASSERT_EQ(back->first[i].defined(), outputs[i].defined()) << i;
    if (!outputs[i].defined()) continue;
    EXPECT_EQ(back->first[i].sizes(), outputs[i].sizes()) << i;
    EXPECT_EQ(back->first[i].scalar_type(), outputs[i].scalar_type()) << i;
    const at::Tensor a = back->first[i].contiguous(), b = outputs[i].contiguous();
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()), 0) << i << " not bitwise";
  }
  EXPECT_TRUE(at::equal(back->second[0], magnitudes[0]));
}

TEST_F(ReferenceFile, DamagedOrForeignFilesAreAbsent) {
  EXPECT_FALSE(load_reference(path_).has_value()) << "missing";
  ASSERT_TRUE(save_reference(path_, {at::arange(1000, at::kDouble)}, {}));
  ASSERT_TRUE(load_reference(path_).has_value());
  std::string bytes;
  {
    std::ifstream f(path_, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto rewrite = [&](const std::string& content) {
    std::ofstream f(path_, std::ios::binary | std::ios::trunc);
    f << content;
  };
  rewrite(bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(load_reference(path_).has_value()) << "truncated";
  rewrite(bytes.substr(0, bytes.size() - 1));
  EXPECT_FALSE(load_reference(path_).has_value()) << "last byte cut";
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x01;  // one bit of one stored value
  rewrite(flipped);
  EXPECT_FALSE(load_reference(path_).has_value()) << "a flipped bit in the values";
  rewrite(bytes + "x");
  EXPECT_FALSE(load_reference(path_).has_value()) << "trailing bytes";
  rewrite("{\"testsuites\": []}");
  EXPECT_FALSE(load_reference(path_).has_value()) << "a foreign file";
  rewrite("");
  EXPECT_FALSE(load_reference(path_).has_value()) << "empty";
  rewrite(bytes);
  EXPECT_TRUE(load_reference(path_).has_value()) << "the intact bytes again";
}

TEST(ReferenceCache, BuildIdentityIsStableAndCoversTheMappedFiles) {
  const std::string alone = build_identity("/nonexistent-root");  // the executable alone
  EXPECT_EQ(alone.size(), 16u);
  EXPECT_EQ(alone, build_identity("/nonexistent-root"));
  EXPECT_EQ(process_build_identity(), process_build_identity());
  // A root holding a library this process has mapped (the C library's folder) adds that library's bytes.
  std::string libc_dir;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash != std::string::npos && line.find("libc.so") != std::string::npos) {
      const std::string lib = line.substr(slash);
      libc_dir = lib.substr(0, lib.find_last_of('/'));
      break;
    }
  }
  if (libc_dir.empty()) GTEST_SKIP() << "no libc.so in /proc/self/maps (a static build)";
  EXPECT_NE(build_identity(libc_dir), alone);
}

}  // namespace
}  // namespace detops::harness
