#pragma once
// The fp64 reference results of the correctness suite kept on disk between runs of one build
// (DETOPS_REFERENCE_CACHE=DIR; scripts/run.sh points it into the build folder).
//
// An entry is found by a key over everything its values depend on: the build (the bytes of every file of the
// build tree mapped into this process: the suite binary, with the references, the specs and the harness linked
// in, and the op library), the op, case, seed, dtype and direction, and the bytes, shapes and strides of the
// reference's inputs and grad_outputs. A rebuild after any source change, a different case, seed or input, is
// a different key: a stale result cannot be found, only a missing one. Only references whose computation took
// at least DETOPS_REFERENCE_CACHE_MIN_MS (default 50 ms) are stored. A file that is unreadable, truncated or of
// another layout is treated as absent (and rewritten). DETOPS_REFERENCE_CACHE_VERIFY=1 recomputes every hit
// and fails the check unless the stored values are bitwise the computed ones.
#include <cstdint>
#include <optional>
#include <string>

#include "detops/harness/op_spec.h"

namespace detops::harness {

struct ReferenceKeyParts {
  std::string op, case_name;
  std::uint64_t seed = 0;
  bool backward = false;
  std::string dtype;
  const Tensors* inputs = nullptr;  // CPU tensors
  const Tensors* grads = nullptr;   // CPU tensors (backward), may be empty
};

// 32 hex digits: two 64-bit hashes of the build identity and the parts.
std::string reference_cache_key(const std::string& build_id, const ReferenceKeyParts& parts);

// A hash of the bytes of every regular file mapped into this process whose path lies under `root` (the build
// tree), with their paths; computed once per process for the default root (two folders above the executable).
std::string build_identity(const std::string& root);
const std::string& process_build_identity();

// Writes outputs and magnitudes to `path` (a temporary file, then a rename). False on any I/O error.
bool save_reference(const std::string& path, const Tensors& outputs, const Tensors& magnitudes);
// The tensors in `path`, or nullopt when it is missing or not a complete file of this layout.
std::optional<std::pair<Tensors, Tensors>> load_reference(const std::string& path);
// Sets the file's modification time to now (an entry in use; pruning removes the oldest first).
void touch_reference(const std::string& path);

}  // namespace detops::harness
