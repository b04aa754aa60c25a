#pragma once
// The types of the ops' framework-free entry points, written once. A function type declares a function
// (never defines one):
//   Launcher<XParams, XArgs> launch_x_forward;        void(const XParams&, const XArgs&, DType, cudaStream_t)
//   CpuEntry<XParams, XArgs> run_x_forward_cpu;       ... DType, const ParallelFor&): may split the work
//   SerialCpuEntry<XParams, XArgs> run_x_backward_cpu; ... DType): runs serially
// Every entry point has both, named launch_<entry> and run_<entry>_cpu, so an op's header declares each
// pair once: DETOPS_DECLARE_ENTRY(XParams, XArgs, x_forward) (CpuEntry) or
// DETOPS_DECLARE_ENTRY_SERIAL_CPU(XParams, XArgs, x_backward) (SerialCpuEntry). Its .cpp/.cu defines
// them with the full parameter list. Launchers validate nothing (the framework
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

#define DETOPS_DECLARE_ENTRY(Params, Args, entry) \
  Launcher<Params, Args> launch_##entry;          \
  CpuEntry<Params, Args> run_##entry##_cpu

#define DETOPS_DECLARE_ENTRY_SERIAL_CPU(Params, Args, entry) \
  Launcher<Params, Args> launch_##entry;                     \
  SerialCpuEntry<Params, Args> run_##entry##_cpu

}  // namespace detops
