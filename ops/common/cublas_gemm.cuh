#pragma once
// cuBLAS GEMMs for the ops' CUDA launchers (deform_conv2d, masked_conv2d; CUDA only, no libtorch). The binding
// passes a cublasHandle_t (ATen's current handle) as void*; a launcher binds it to its stream for its GEMMs:
//   BlasScope blas("op", handle, stream)    the handle on `stream`, fp32-accumulating math, restored on exit
//   blas_gemm<T, CT>(blas, allow_tf32, m, n, k, a, b, c, ldc, stride_c, batch, accumulate)
//       column-major C = op(A) op(B) (+ C when accumulate), A and B of type T, C of type CT; fp16 / bf16 on
//       tensor cores with fp32 accumulation, fp32 in full fp32 unless allow_tf32, fp64 in fp64. 64-bit sizes.
// cuBLAS GEMMs are bitwise reproducible run to run on one GPU model (no atomics by default).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace detops {

// Throws "<op>: cuBLAS <what> failed: <status name> (<status text>)" unless `status` is success.
inline void check_blas(cublasStatus_t status, const char* op, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(op) + ": cuBLAS " + what + " failed: " + cublasGetStatusName(status) + " (" +
                             cublasGetStatusString(status) + ")");
  }
}

template <typename T>
constexpr cudaDataType blas_type() {
  if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
  if constexpr (std::is_same_v<T, __half>) return CUDA_R_16F;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return CUDA_R_16BF;
  return CUDA_R_32F;
}

// One operand of a column-major (strided-batched) GEMM: its data, leading dimension, batch stride and op.
struct BlasOperand {
  const void* data;
  std::int64_t ld;
  long long stride;
  cublasOperation_t op;
};

// The handle bound to `stream`, in fp32-accumulating math (no reduced-precision split-K reductions), restored
// to its previous math mode on exit. `op` names the op in errors.
class BlasScope {
 public:
  BlasScope(const char* op, void* handle, cudaStream_t stream) : op_(op), handle_(static_cast<cublasHandle_t>(handle)) {
    if (handle_ == nullptr) throw std::invalid_argument(std::string(op) + ": the CUDA launchers need a cuBLAS handle");
    check_blas(cublasGetMathMode(handle_, &saved_), op, "cublasGetMathMode");
    check_blas(cublasSetStream(handle_, stream), op, "cublasSetStream");
    check_blas(cublasSetMathMode(handle_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
               op, "cublasSetMathMode");
  }
  ~BlasScope() { cublasSetMathMode(handle_, saved_); }
  BlasScope(const BlasScope&) = delete;
  BlasScope& operator=(const BlasScope&) = delete;
  cublasHandle_t get() const { return handle_; }
  const char* op() const { return op_; }

 private:
  const char* op_;
  cublasHandle_t handle_;
  cublasMath_t saved_ = CUBLAS_DEFAULT_MATH;
};

// A column-major strided-batched GEMM, C = op(A) op(B) + beta C (beta 1 when accumulate, else 0), A and B of
// type T, C of type CT. Nothing when m, n or batch is 0 (k must be > 0: a sum of no terms is the caller's).
template <typename T, typename CT>
void blas_gemm(const BlasScope& blas, bool allow_tf32, std::int64_t m, std::int64_t n, std::int64_t k, BlasOperand a,
               BlasOperand b, void* c, std::int64_t ldc, long long stride_c, std::int64_t batch, bool accumulate) {
  if (m == 0 || n == 0 || batch == 0) return;
  const bool is_double = std::is_same_v<T, double>;
  const cublasComputeType_t compute = is_double ? CUBLAS_COMPUTE_64F
                                      : (std::is_same_v<T, float> && allow_tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                 : CUBLAS_COMPUTE_32F;
  const double alpha_d = 1.0, beta_d = accumulate ? 1.0 : 0.0;
  const float alpha_f = 1.0f, beta_f = accumulate ? 1.0f : 0.0f;
  const void* alpha = is_double ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = is_double ? static_cast<const void*>(&beta_d) : &beta_f;
  check_blas(cublasGemmStridedBatchedEx_64(blas.get(), a.op, b.op, m, n, k, alpha, a.data, blas_type<T>(), a.ld,
                                           a.stride, b.data, blas_type<T>(), b.ld, b.stride, beta, c, blas_type<CT>(),
                                           ldc, stride_c, batch, compute, CUBLAS_GEMM_DEFAULT),
             blas.op(), "GEMM");
}

}  // namespace detops
