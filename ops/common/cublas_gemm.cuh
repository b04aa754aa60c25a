#pragma once
// cuBLAS GEMMs for the ops' CUDA launchers (deform_conv2d, masked_conv2d; CUDA only, no libtorch). The binding
// passes a cublasHandle_t (ATen's current handle) as void*; a launcher binds it to its stream for its GEMMs:
//   BlasScope blas("op", handle, stream)    the handle on `stream`, fp32-accumulating math, restored on exit
//   blas_gemm<T, CT>(blas, allow_tf32, m, n, k, a, b, c, ldc, stride_c, batch, accumulate)
//       column-major C = op(A) op(B) (+ C when accumulate), A and B of type T, C of type CT; fp16 / bf16 on
//       tensor cores with fp32 accumulation, fp32 in full fp32 unless allow_tf32, fp64 in fp64. 64-bit sizes
//       (split into pieces under 2^31, where cuBLAS's kernels are fast).
// cuBLAS GEMMs are bitwise reproducible run to run on one GPU model (no atomics by default).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
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

// cuBLAS's 64-bit API takes any size, but deform_conv2d's channels_exactly_2pow31 case (a 1 x 1 x 2^31 GEMM, with
// leading dimensions and strides of 2^31) took 90-144 s on an H100 against 0.9 s for the whole test at 2^31 - 1.
// So dimensions past kBlasPiece run as pieces of at most kBlasPiece, and a leading dimension or batch stride
// that addresses nothing (a single column; a batch of one) is passed as the piece's extent, keeping every
// argument under 2^31 wherever the layout allows.
inline constexpr std::int64_t kBlasPiece = std::int64_t{1} << 30;

// The leading dimension to pass for a matrix of `rows` x `cols` (column-major) stored with leading dimension ld:
// ld, or rows when there is one column (ld then addresses nothing; cuBLAS needs ld >= max(1, rows)).
inline std::int64_t blas_ld(std::int64_t ld, std::int64_t rows, std::int64_t cols) {
  return cols == 1 ? std::max<std::int64_t>(rows, 1) : ld;
}

// A column-major strided-batched GEMM, C = op(A) op(B) + beta C (beta 1 when accumulate, else 0), A and B of
// type T, C of type CT. Nothing when m, n or batch is 0 (k must be > 0: a sum of no terms is the caller's). m, n
// and k over kBlasPiece run as pieces (k's accumulating into C after the first).
template <typename T, typename CT>
void blas_gemm(const BlasScope& blas, bool allow_tf32, std::int64_t m, std::int64_t n, std::int64_t k, BlasOperand a,
               BlasOperand b, void* c, std::int64_t ldc, long long stride_c, std::int64_t batch, bool accumulate) {
  if (m == 0 || n == 0 || batch == 0) return;
  const bool is_double = std::is_same_v<T, double>;
  const cublasComputeType_t compute = is_double ? CUBLAS_COMPUTE_64F
                                      : (std::is_same_v<T, float> && allow_tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                 : CUBLAS_COMPUTE_32F;
  const double alpha_d = 1.0, one_d = 1.0, zero_d = 0.0;
  const float alpha_f = 1.0f, one_f = 1.0f, zero_f = 0.0f;
  const void* alpha = is_double ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* one = is_double ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = is_double ? static_cast<const void*>(&zero_d) : &zero_f;
  const T* a_data = static_cast<const T*>(a.data);
  const T* b_data = static_cast<const T*>(b.data);
  CT* c_data = static_cast<CT*>(c);
  for (std::int64_t i0 = 0; i0 < m; i0 += kBlasPiece) {
    const std::int64_t mi = std::min(kBlasPiece, m - i0);
    for (std::int64_t j0 = 0; j0 < n; j0 += kBlasPiece) {
      const std::int64_t nj = std::min(kBlasPiece, n - j0);
      for (std::int64_t k0 = 0; k0 < k; k0 += kBlasPiece) {
        const std::int64_t kk = std::min(kBlasPiece, k - k0);
        // op(A) is m x k: A is m x k (N: element (i, l) at i + l lda) or k x m (T: at l + i lda); likewise op(B)
        // k x n: B is k x n (N: (l, j) at l + j ldb) or n x k (T: at j + l ldb).
        const T* ap = a_data + (a.op == CUBLAS_OP_N ? i0 + k0 * a.ld : k0 + i0 * a.ld);
        const T* bp = b_data + (b.op == CUBLAS_OP_N ? k0 + j0 * b.ld : j0 + k0 * b.ld);
        const void* beta = (accumulate || k0 > 0) ? one : zero;
        const bool n_a = a.op == CUBLAS_OP_N, n_b = b.op == CUBLAS_OP_N;
        const std::int64_t lda = n_a ? blas_ld(a.ld, mi, kk) : blas_ld(a.ld, kk, mi);
        const std::int64_t ldb = n_b ? blas_ld(b.ld, kk, nj) : blas_ld(b.ld, nj, kk);
        const std::int64_t ldcp = blas_ld(ldc, mi, nj);
        const long long single = 0;  // a batch of one: the strides address nothing
        check_blas(cublasGemmStridedBatchedEx_64(blas.get(), a.op, b.op, mi, nj, kk, alpha, ap, blas_type<T>(), lda,
                                                 batch == 1 ? single : a.stride, bp, blas_type<T>(), ldb,
                                                 batch == 1 ? single : b.stride, beta, c_data + i0 + j0 * ldc,
                                                 blas_type<CT>(), ldcp, batch == 1 ? single : stride_c, batch,
                                                 compute, CUBLAS_GEMM_DEFAULT),
                   blas.op(), "GEMM");
      }
    }
  }
}

}  // namespace detops
