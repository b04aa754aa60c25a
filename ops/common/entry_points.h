#pragma once
// The types of the ops' framework-free entry points, written once. A function type declares a function
// (never defines one), so an op's header declares its launchers and CPU implementations as
//   Launcher<XParams, XArgs> launch_x_forward;        void(const XParams&, const XArgs&, DType, cudaStream_t)
//   CpuEntry<XParams, XArgs> run_x_forward_cpu;       ... DType, const ParallelFor&): may split the work
//   SerialCpuEntry<XParams, XArgs> run_x_backward_cpu; ... DType): runs serially
// and its .cpp/.cu defines them with the full parameter list. Launchers validate nothing (the framework
// layer does), return immediately on empty work, check the launch and are asynchronous on the stream.
#include <cuda_runtime_api.h>

#include "common/parallel_for.h"
#include "detops/core/dtype.h"

namespace detops {

template <typename Params, typename Args>
using Launcher = void(const Params&, const Args&, DType, cudaStream_t);

template <typename Params, typename Args>
using CpuEntry = void(const Params&, const Args&, DType, const ParallelFor&);

template <typename Params, typename Args>
using SerialCpuEntry = void(const Params&, const Args&, DType);

}  // namespace detops
