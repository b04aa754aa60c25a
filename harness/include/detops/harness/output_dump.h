#pragma once
// Output dumps for comparing builds: when the environment variable DETOPS_SAVE_OUTPUTS names a
// directory, every forward check saves the op's first output there, so scripts/compare.py
// --cross-build can say how far each op's outputs moved between two builds on the same GPU.
//
// Layout (docs/record-format.md): <dir>/index.json maps each test name to {"file", "shape", "dtype" (the dtype under
// test, e.g. "fp16"), "output_dtype" (the tensor's, e.g. "Float"), "elements_saved", "subsampled", "stride"}; each file holds raw little-endian float64 values of the output,
// flattened (integer outputs converted too). Outputs with more elements than
// DETOPS_SAVE_OUTPUTS_MAX_ELEMENTS (default 4096) are subsampled with a fixed stride (element
// k * stride for k < max), which depends only on the shape, so two builds save the same elements.
// The index is rewritten (to a temporary file, then renamed) every 64 outputs and at exit, so a run
// that dies keeps the index of nearly everything it saved.
#include <ATen/core/Tensor.h>

#include <string>

namespace detops::harness {

// True when DETOPS_SAVE_OUTPUTS is set.
bool output_dump_enabled();

// Saves `output` under `test_name` (e.g. "roi_align.forward.tiny.fp32.cuda"); no-op when disabled.
// Failures to write are reported on stderr once and never fail the check.
void dump_output(const std::string& test_name, const std::string& dtype_under_test, const at::Tensor& output);

}  // namespace detops::harness
