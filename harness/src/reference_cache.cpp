#include "detops/harness/reference_cache.h"

#include <ATen/ATen.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <utime.h>
#include <vector>

// POSIX calls rather than std::filesystem: libtorch exports its own copies of std::filesystem's functions, and
// in a process that loads it a call can land in that copy (std::filesystem::remove_all crashed so).

namespace detops::harness {
namespace {

// A 64-bit hash of a byte stream, word by word (8 bytes, then the tail bytes): xor, multiply by an odd constant,
// xor-shift; two seeds (with their own constants) give the key's 128 bits. Not cryptographic: it tells apart
// builds and inputs, it does not defend against someone forging a cache file.
struct Hash {
  std::uint64_t h, mul;
  explicit Hash(std::uint64_t seed)
      : h(1469598103934665603ull ^ (seed * 0x9E3779B97F4A7C15ull)),
        mul(seed & 1 ? 0x100000001B3ull : 0xFF51AFD7ED558CCDull) {}
  void mix(std::uint64_t w) {
    h = (h ^ w) * mul;
    h ^= h >> 29;
  }
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      std::uint64_t w;
      std::memcpy(&w, b + i, 8);
      mix(w);
    }
    for (; i < n; ++i) mix(b[i] | 0x100ull);
    mix(n);
  }
  void u64(std::uint64_t v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  // A tensor's dtype, shape, strides and values (the values in its memory order, contiguous).
  void tensor(const at::Tensor& t) {
    u64(t.defined() ? 1 : 0);
    if (!t.defined()) return;
    u64(static_cast<std::uint64_t>(t.scalar_type()));
    u64(static_cast<std::uint64_t>(t.dim()));
    for (std::int64_t d = 0; d < t.dim(); ++d) {
      u64(static_cast<std::uint64_t>(t.size(d)));
      u64(static_cast<std::uint64_t>(t.stride(d)));
    }
    const at::Tensor c = t.is_contiguous() ? t : t.contiguous();
    bytes(c.data_ptr(), c.numel() * c.element_size());
  }
};

std::string hex(std::uint64_t v) {
  std::ostringstream os;
  os << std::hex << std::setw(16) << std::setfill('0') << v;
  return os.str();
}

// The stored values' hash (dtype, sizes and contiguous bytes of every tensor, in order), written after them and
// checked on reading: a file changed on disk (a flipped bit, an edit) is treated as absent, never used.
std::uint64_t payload_hash(const Tensors& outputs, const Tensors& magnitudes) {
  Hash h(7);
  for (const Tensors* ts : {&outputs, &magnitudes}) {
    h.u64(ts->size());
    for (const at::Tensor& t : *ts) {
      h.u64(t.defined() ? 1 : 0);
      if (!t.defined()) continue;
      const at::Tensor c = t.to(at::kCPU).contiguous();
      h.u64(static_cast<std::uint64_t>(c.scalar_type()));
      h.u64(static_cast<std::uint64_t>(c.dim()));
      for (std::int64_t d = 0; d < c.dim(); ++d) h.u64(static_cast<std::uint64_t>(c.size(d)));
      h.bytes(c.data_ptr(), c.numel() * c.element_size());
    }
  }
  return h.h;
}

constexpr char kMagic[8] = {'D', 'T', 'R', 'E', 'F', 'C', '1', '\n'};

bool write_tensors(std::ofstream& f, const Tensors& ts) {
  const std::uint64_t n = ts.size();
  f.write(reinterpret_cast<const char*>(&n), sizeof n);
  for (const at::Tensor& t : ts) {
    const std::uint64_t defined = t.defined() ? 1 : 0;
    f.write(reinterpret_cast<const char*>(&defined), sizeof defined);
    if (!defined) continue;
    const at::Tensor c = t.to(at::kCPU).contiguous();
    const std::int64_t type = static_cast<std::int64_t>(c.scalar_type()), dim = c.dim();
    f.write(reinterpret_cast<const char*>(&type), sizeof type);
    f.write(reinterpret_cast<const char*>(&dim), sizeof dim);
    for (std::int64_t d = 0; d < dim; ++d) {
      const std::int64_t s = c.size(d);
      f.write(reinterpret_cast<const char*>(&s), sizeof s);
    }
    f.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * c.element_size()));
  }
  return static_cast<bool>(f);
}

bool read_tensors(std::ifstream& f, std::uintmax_t file_size, Tensors& out) {
  std::uint64_t n = 0;
  if (!f.read(reinterpret_cast<char*>(&n), sizeof n) || n > 1024) return false;
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t defined = 0;
    if (!f.read(reinterpret_cast<char*>(&defined), sizeof defined) || defined > 1) return false;
    if (!defined) {
      out.emplace_back();
      continue;
    }
    std::int64_t type = 0, dim = 0;
    if (!f.read(reinterpret_cast<char*>(&type), sizeof type) || !f.read(reinterpret_cast<char*>(&dim), sizeof dim))
      return false;
    const auto st = static_cast<at::ScalarType>(type);
    if (type < 0 || type >= static_cast<std::int64_t>(at::ScalarType::NumOptions) || dim < 0 || dim > 16) return false;
    if (st != at::kDouble && st != at::kFloat && st != at::kHalf && st != at::kBFloat16 && st != at::kLong &&
        st != at::kInt && st != at::kBool && st != at::kByte)
      return false;
    std::vector<std::int64_t> sizes(static_cast<std::size_t>(dim));
    std::uintmax_t numel = 1;
    for (auto& s : sizes) {
      if (!f.read(reinterpret_cast<char*>(&s), sizeof s) || s < 0) return false;
      numel *= static_cast<std::uintmax_t>(s);
      if (numel > file_size) return false;  // more elements than the file has bytes: not one of ours
    }
    at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(st));
    const auto nbytes = static_cast<std::streamsize>(t.numel() * t.element_size());
    if (nbytes > 0 && !f.read(static_cast<char*>(t.data_ptr()), nbytes)) return false;
    out.push_back(std::move(t));
  }
  return true;
}

}  // namespace

std::string reference_cache_key(const std::string& build_id, const ReferenceKeyParts& p) {
  std::string key;
  for (std::uint64_t seed : {1ull, 2ull}) {
    Hash h(seed);
    h.str("detops reference cache 1");
    h.str(build_id);
    h.str(p.op);
    h.str(p.case_name);
    h.u64(p.seed);
    h.u64(p.backward ? 1 : 0);
    h.str(p.dtype);
    h.u64(p.inputs ? p.inputs->size() : 0);
    if (p.inputs)
      for (const at::Tensor& t : *p.inputs) h.tensor(t);
    h.u64(p.grads ? p.grads->size() : 0);
    if (p.grads)
      for (const at::Tensor& t : *p.grads) h.tensor(t);
    key += hex(h.h);
  }
  return key;
}

namespace {

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

bool is_regular_file(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string parent(const std::string& p) {
  const auto slash = p.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : (slash == 0 ? std::string("/") : p.substr(0, slash));
}

// mkdir -p
void make_dirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') ::mkdir(dir.substr(0, i).c_str(), 0777);
  }
}

}  // namespace

std::string build_identity(const std::string& root) {
  const std::string base = real_path(root);
  std::set<std::string> files;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.rfind(base + "/", 0) == 0 && is_regular_file(path)) files.insert(path);
  }
  const std::string exe = self_exe();
  if (!exe.empty()) files.insert(exe);
  Hash h(3);
  h.u64(files.size());
  std::vector<char> buf(1 << 20);
  for (const std::string& path : files) {
    h.str(path);
    std::ifstream f(path, std::ios::binary);
    while (f) {
      f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      h.bytes(buf.data(), static_cast<std::size_t>(f.gcount()));
    }
  }
  return hex(h.h);
}

const std::string& process_build_identity() {
  // build/<preset>/suites/detops_correctness: the build tree is two folders above the executable.
  static const std::string id = [] {
    const std::string exe = self_exe();
    return build_identity(exe.empty() ? std::string("/nonexistent") : parent(parent(exe)));
  }();
  return id;
}

bool save_reference(const std::string& path, const Tensors& outputs, const Tensors& magnitudes) {
  make_dirs(parent(path));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  bool ok;
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return false;
    f.write(kMagic, sizeof kMagic);
    ok = write_tensors(f, outputs) && write_tensors(f, magnitudes);
    if (ok) {
      const std::uint64_t check = payload_hash(outputs, magnitudes);
      f.write(reinterpret_cast<const char*>(&check), sizeof check);
      f.write(kMagic, sizeof kMagic);  // the end marker: a truncated file lacks it
      f.flush();
      ok = static_cast<bool>(f);
    }
  }
  ok = ok && std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) std::remove(tmp.c_str());
  return ok;
}

std::optional<std::pair<Tensors, Tensors>> load_reference(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  const auto size = static_cast<std::uintmax_t>(st.st_size);
  std::ifstream f(path, std::ios::binary);
  char magic[sizeof kMagic];
  if (!f.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0) return std::nullopt;
  std::pair<Tensors, Tensors> out;
  try {
    if (!read_tensors(f, size, out.first) || !read_tensors(f, size, out.second)) return std::nullopt;
  } catch (const std::exception&) {  // an allocation the file's sizes asked for failed
    return std::nullopt;
  }
  std::uint64_t check = 0;
  if (!f.read(reinterpret_cast<char*>(&check), sizeof check)) return std::nullopt;
  if (!f.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0) return std::nullopt;
  if (check != payload_hash(out.first, out.second)) return std::nullopt;
  if (f.peek() != std::ifstream::traits_type::eof()) return std::nullopt;
  return out;
}

void touch_reference(const std::string& path) { ::utime(path.c_str(), nullptr); }

}  // namespace detops::harness
