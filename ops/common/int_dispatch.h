#pragma once
// Compile-time choices among the values of a kernel's int template parameter (a kernel compiled for gamma = 2 and
// for any gamma, for a warp or a block per row): dispatch_int picks the instantiation a call needs, for_each_int
// visits every one (to register them). Host code; no CUDA.
#include <type_traits>

namespace detops {

// fn(std::integral_constant<int, IfTrue>{}) when condition holds, else fn(std::integral_constant<int, IfFalse>{}).
template <int IfTrue, int IfFalse, typename Fn>
void dispatch_int(bool condition, Fn&& fn) {
  if (condition) {
    fn(std::integral_constant<int, IfTrue>{});
  } else {
    fn(std::integral_constant<int, IfFalse>{});
  }
}

// fn(std::integral_constant<int, V>{}) for each V of Values, in order.
template <int... Values, typename Fn>
void for_each_int(Fn&& fn) {
  (fn(std::integral_constant<int, Values>{}), ...);
}

}  // namespace detops
