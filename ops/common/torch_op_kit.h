#pragma once
// The op kit: an op's torch binding declared once (docs/op-kit.md). Included only by *_torch.cpp files.
//
// A binding is a set of "op definitions", one struct per schema op:
//
//   struct RoiAlignForward {
//     static constexpr const char* kSchema = "roi_align(Tensor input, Tensor rois, float spatial_scale, ...) -> Tensor";
//     using Returns = at::Tensor;                 // the schema's return: at::Tensor or std::tuple<at::Tensor, ...>
//     using Params = RoiAlignParams;              // the op's one parameter struct
//     using Args = opkit::Args<opkit::Tensor, opkit::Tensor, opkit::Field<&Params::spatial_scale>, ...>;  // schema order
//     static constexpr auto kCompute = &roi_align_forward;   // CPU and CUDA: entry(tensors..., params[, shape])
//     static constexpr auto kMeta = &roi_align_meta;         // Meta: the same arguments, shapes only
//     static constexpr opkit::Autograd kAutograd = opkit::Autograd::kFunction;  // or kOnce / kNone
//     ... (kFunction: saved() and backward(); kOnce: kOpName, see below)
//   };
//   TORCH_LIBRARY_FRAGMENT(detops, m) { opkit::define<RoiAlignForward, RoiAlignBackward>(m); }
//
// From Args the kit generates the schema-facing C++ functions: each schema argument is a Tensor (passed on
// to the entry point, in order), an OptionalTensor ("Tensor?", passed on as a Tensor, undefined for None),
// a Field (stored into the Params struct, built once per call), a Str (a "str" argument that a Params
// member names, such as a reduction), an IntPair (an "int[2]" stored into two Params members) or a Dim
// (input_shape[d] of a backward op, passed on as std::array<int64_t, 4>). A definition may build its Params
// itself (kMakeParams: the scalar arguments in schema order -> Params; needed by Str). The dispatcher checks
// at load time that the generated signature matches kSchema.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>
#include <c10/util/string_view.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace detops {

// The registered op `name` ("detops::<op>") as a typed handle; Sig is the op's C++ function type.
// Throws when no such op is registered.
template <typename Sig>
c10::TypedOperatorHandle<Sig> find_typed_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").template typed<Sig>();
}

namespace opkit {

using Shape = std::array<std::int64_t, 4>;  // a backward op's input shape {N, C, H, W}
using TensorList = std::vector<at::Tensor>;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---------------------------------------------------------------------------------------------------
// Argument descriptors (the entries of Args<...>, one per schema argument, in schema order).

struct Tensor {  // "Tensor name": passed on to the entry point
  using type = const at::Tensor&;
};

struct OptionalTensor {  // "Tensor? name": passed on to the entry point as a Tensor, undefined for None
  using type = const c10::optional<at::Tensor>&;
};

template <auto Member>
struct Field;  // "float|int|bool name": Params::*Member

template <typename P, typename M, M P::*Member>
struct Field<Member> {
  using type = M;
  using params = P;
  static constexpr M P::*member = Member;
};

// "str name": Params::*Member, an enum-like value whose schema spelling is Name(value) (a function
// `const char* (M)`). Parsing the string (and its error) is the definition's kMakeParams, which receives it
// as a std::string; calling an op from Params (opkit::call) passes Name(params.*Member).
template <auto Member, auto Name>
struct Str;

template <typename P, typename M, M P::*Member, auto Name>
struct Str<Member, Name> {
  using type = c10::string_view;
  using params = P;
  static constexpr M P::*member = Member;
  static c10::string_view name(M value) { return c10::string_view(Name(value)); }
};

// "int[2] name": two int64 Params members, Params::*First and Params::*Second (a convolution's padding or
// stride as (h, w)). Python passes one int as two equal values; any length other than 2 raises ValueError
// naming the argument (Name, a `const char*` constant). opkit::call passes {params.*First, params.*Second}.
template <auto First, auto Second, const char* Name>
struct IntPair;

template <typename P, std::int64_t P::*First, std::int64_t P::*Second, const char* Name>
struct IntPair<First, Second, Name> {
  using type = c10::IntArrayRef;
  using params = P;
  static void store(P& params, c10::IntArrayRef a) {
    TORCH_CHECK_VALUE(a.size() == 2, Name, " must be one int or two ints (h, w); got ", a.size(), " values");
    params.*First = a[0];
    params.*Second = a[1];
  }
  static std::array<std::int64_t, 2> load(const P& params) { return {params.*First, params.*Second}; }
};

template <int D>
struct Dim {  // "int name" that is input_shape[D] (batch_size, channels, height, width of backward ops)
  using type = std::int64_t;
  static constexpr int dim = D;
};

template <typename... A>
struct Args {};

template <typename A>
inline constexpr bool is_optional_tensor = std::is_same_v<A, OptionalTensor>;
template <typename A>
inline constexpr bool is_tensor = std::is_same_v<A, Tensor> || is_optional_tensor<A>;  // Tensor or Tensor?
template <typename A>
struct is_dim_t : std::false_type {};
template <int D>
struct is_dim_t<Dim<D>> : std::true_type {};
template <typename A>
inline constexpr bool is_dim = is_dim_t<A>::value;
template <typename A>
struct is_str_t : std::false_type {};
template <auto Member, auto Name>
struct is_str_t<Str<Member, Name>> : std::true_type {};
template <typename A>
inline constexpr bool is_str = is_str_t<A>::value;
template <typename A>
struct is_pair_t : std::false_type {};
template <auto First, auto Second, const char* Name>
struct is_pair_t<IntPair<First, Second, Name>> : std::true_type {};
template <typename A>
inline constexpr bool is_pair = is_pair_t<A>::value;
template <typename A>
inline constexpr bool is_field = !is_tensor<A> && !is_dim<A> && !is_str<A> && !is_pair<A>;
template <typename A>
inline constexpr bool is_scalar = is_field<A> || is_str<A> || is_pair<A>;  // what kMakeParams receives

template <typename Def, typename = void>
struct has_make_params : std::false_type {};
template <typename Def>
struct has_make_params<Def, std::void_t<decltype(Def::kMakeParams)>> : std::true_type {};

template <typename Fn, typename = void>
struct is_tensors_only : std::false_type {};
template <typename Fn>
struct is_tensors_only<Fn, std::void_t<decltype(Fn::kTensorsOnly)>> : std::bool_constant<Fn::kTensorsOnly> {};

// ---------------------------------------------------------------------------------------------------
// Schema arguments <-> (tensors, params, shape).

template <typename>
inline constexpr bool dependent_false = false;

// The tensors of a call, as a tuple (Tensor descriptors: references; OptionalTensor: the tensor or an
// undefined one).
template <typename A>
auto tensor_part(typename A::type a) {
  if constexpr (is_optional_tensor<A>) {
    return std::tuple<at::Tensor>(a.has_value() ? *a : at::Tensor());
  } else if constexpr (is_tensor<A>) {
    return std::tuple<const at::Tensor&>(a);
  } else {
    return std::tuple<>();
  }
}

// The scalar arguments of a call, as kMakeParams receives them (a Str as a std::string).
template <typename A>
auto scalar_part(typename A::type a) {
  if constexpr (is_str<A>) {
    return std::tuple<std::string>(std::string(a.data(), a.size()));
  } else if constexpr (is_field<A> || is_pair<A>) {
    return std::tuple<typename A::type>(a);
  } else {
    return std::tuple<>();
  }
}

// Stores a Field into params or a Dim into shape; tensors are left alone.
template <typename A, typename P>
void store(P& params, Shape& shape, typename A::type a) {
  if constexpr (is_dim<A>) {
    shape[A::dim] = a;
  } else if constexpr (is_str<A>) {
    static_assert(dependent_false<A>, "a Str argument needs the definition's kMakeParams to parse it");
  } else if constexpr (is_pair<A>) {
    static_assert(std::is_same_v<typename A::params, P>, "an IntPair of another Params struct");
    A::store(params, a);
  } else if constexpr (is_field<A>) {
    static_assert(std::is_same_v<typename A::params, P>, "a Field of another Params struct");
    params.*A::member = a;
  }
}

template <typename A>
void store_dim(Shape& shape, typename A::type a) {
  if constexpr (is_dim<A>) shape[A::dim] = a;
}

// The Params and shape of a call: Dims are stored into shape; the Params are Def::kMakeParams(scalars...)
// where the definition has one (it validates and parses them), else built from the Fields.
template <typename Def, typename... A>
void bind_params(Args<A...>, typename Def::Params& params, Shape& shape, typename A::type... a) {
  if constexpr (has_make_params<Def>::value) {
    (store_dim<A>(shape, a), ...);  // every scalar goes to kMakeParams
    params = std::apply([](auto&&... s) { return Def::kMakeParams(std::forward<decltype(s)>(s)...); },
                        std::tuple_cat(scalar_part<A>(a)...));
  } else {
    (store<A>(params, shape, a), ...);
  }
}

// The value of schema argument A when calling an op from (tensors, params, shape); TI is A's index among
// the tensors (only used, and only valid, when A is a Tensor).
template <typename A, std::size_t TI, typename P>
decltype(auto) load(const TensorList& tensors, const P& params, const Shape& shape) {
  if constexpr (is_optional_tensor<A>) {  // an undefined tensor is None
    const at::Tensor& t = tensors.at(TI);
    return t.defined() ? c10::optional<at::Tensor>(t) : c10::optional<at::Tensor>();
  } else if constexpr (is_tensor<A>) {
    return tensors.at(TI);
  } else if constexpr (is_dim<A>) {
    return shape[A::dim];
  } else if constexpr (is_str<A>) {
    return A::name(params.*A::member);
  } else if constexpr (is_pair<A>) {
    return A::load(params);
  } else {
    return params.*A::member;
  }
}

// How many Tensor descriptors come before position I of A... (a Tensor's index among the tensors).
template <std::size_t I, typename... A>
constexpr std::size_t tensors_before() {
  constexpr bool flags[] = {is_tensor<A>..., false};
  std::size_t n = 0;
  for (std::size_t i = 0; i < I; ++i) n += flags[i] ? 1 : 0;
  return n;
}

// Calls `fn` (an entry point or Meta function) as fn(tensors..., params) or, when Args has Dims,
// fn(tensors..., params, shape); with neither scalars nor Dims as fn(tensors...). A function marked
// kTensorsOnly (EmptyLike) is called as fn(tensors...) and no Params are built (nor checked).
template <typename Def, typename Fn, typename... A>
decltype(auto) invoke_bound(const Fn& fn, Args<A...> args, typename A::type... a) {
  if constexpr (is_tensors_only<Fn>::value) {
    return std::apply([&](const auto&... t) -> decltype(auto) { return fn(t...); },
                      std::tuple_cat(tensor_part<A>(a)...));
  } else {
    typename Def::Params params{};
    Shape shape{};
    bind_params<Def>(args, params, shape, a...);
    constexpr bool has_dims = (is_dim<A> || ...);
    constexpr bool has_scalars = (is_scalar<A> || ...);
    return std::apply(
        [&](const auto&... t) -> decltype(auto) {
          if constexpr (has_dims) {
            return fn(t..., params, shape);
          } else if constexpr (has_scalars) {
            return fn(t..., params);
          } else {
            return fn(t...);
          }
        },
        std::tuple_cat(tensor_part<A>(a)...));
  }
}

// The op's C++ signature, Returns(A::type...), and a typed handle of the registered op.
template <typename Def, typename ArgList = typename Def::Args>
struct Signature;
template <typename Def, typename... A>
struct Signature<Def, Args<A...>> {
  using type = typename Def::Returns(typename A::type...);
};
template <typename Def>
using signature_t = typename Signature<Def>::type;

// "roi_align(Tensor input, ...) -> Tensor" -> "roi_align".
inline std::string schema_name(const char* schema) {
  const std::string s(schema);
  return s.substr(0, s.find('('));
}

template <typename Def>
const c10::TypedOperatorHandle<signature_t<Def>>& op_handle() {
  static const auto op = find_typed_op<signature_t<Def>>(("detops::" + schema_name(Def::kSchema)).c_str());
  return op;
}

// Calls op Def through the dispatcher with its schema arguments rebuilt from (tensors, params, shape):
// what a backward does to reach a `_<op>_backward` op.
template <typename Def, typename P, typename... A, std::size_t... I>
typename Def::Returns call_impl(Args<A...>, std::index_sequence<I...>, const TensorList& tensors, const P& params,
                                const Shape& shape) {
  return op_handle<Def>().call(load<A, tensors_before<I, A...>()>(tensors, params, shape)...);
}

template <typename Def, typename P, typename... A>
typename Def::Returns call_args(Args<A...> args, const TensorList& tensors, const P& params, const Shape& shape) {
  return call_impl<Def>(args, std::index_sequence_for<A...>{}, tensors, params, shape);
}

template <typename Def, typename P>
typename Def::Returns call(const TensorList& tensors, const P& params, const Shape& shape = {}) {
  return call_args<Def>(typename Def::Args{}, tensors, params, shape);
}

// ---------------------------------------------------------------------------------------------------
// Outputs <-> variable_list.

template <typename R>
variable_list to_list(R&& r) {
  if constexpr (std::is_same_v<std::decay_t<R>, at::Tensor>) {
    return {std::forward<R>(r)};
  } else {
    return std::apply([](auto&&... t) { return variable_list{std::forward<decltype(t)>(t)...}; }, std::forward<R>(r));
  }
}

template <typename R, std::size_t... I>
R tuple_from_list(const variable_list& v, std::index_sequence<I...>) {
  return R{v[I]...};
}
// R: at::Tensor, or a std::tuple of them (v's first elements, in order).
template <typename R>
R from_list(const variable_list& v) {
  return tuple_from_list<R>(v, std::make_index_sequence<std::tuple_size_v<R>>{});
}
template <>
inline at::Tensor from_list<at::Tensor>(const variable_list& v) {
  return v[0];
}

// ---------------------------------------------------------------------------------------------------
// Params saved for the backward, whole: a parameter struct is plain data (trivially copyable), so it is
// kept as its bytes in one saved_data entry, and read back as the same struct.

template <typename P>
void save_params(AutogradContext* ctx, const P& params) {
  static_assert(std::is_trivially_copyable_v<P>, "parameter structs are plain data");
  ctx->saved_data["params"] = std::string(reinterpret_cast<const char*>(&params), sizeof(P));
}

template <typename P>
P saved_params(AutogradContext* ctx) {
  const std::string& bytes = ctx->saved_data["params"].toStringRef();
  TORCH_INTERNAL_ASSERT(bytes.size() == sizeof(P));
  P params;
  std::memcpy(static_cast<void*>(&params), bytes.data(), sizeof(P));
  return params;
}

// What a kFunction definition's backward() receives.
template <typename P>
struct Saved {
  TensorList tensors;  // as Def::saved() listed them
  P params;            // the forward's Params
  Shape input_shape;   // the first input's shape
  AutogradContext* ctx;
  // Whether the forward's input `input` needs its gradient. `input` counts the tensors the autograd function
  // received: an undefined optional tensor (None for a Tensor? argument) is not one of them, so the indices
  // of the tensors after it shift down by one.
  bool needs_grad(std::size_t input) const { return ctx->needs_input_grad(input); }
};

// ---------------------------------------------------------------------------------------------------
// Autograd.

enum class Autograd {
  kNone,      // no Autograd kernel (the op's outputs carry no grad_fn)
  kFunction,  // Def::saved(inputs, outputs) and Def::backward(Saved<Params>, grads) give the gradient
  kOnce,      // a backward op: differentiable once; differentiating it again raises
              // "<Def::kOpName>: double backward is not supported"
};

// Autograd for a backward op (`_<op>_backward`), which is differentiable once: run() calls the op below
// the autograd key, and the op's own backward (a double backward) raises
// "<op_name>: double backward is not supported".
template <typename Sig>
class DifferentiableOnce;

template <typename R, typename... A>
class DifferentiableOnce<R(A...)> : public torch::autograd::Function<DifferentiableOnce<R(A...)>> {
 public:
  using Handle = c10::TypedOperatorHandle<R(A...)>;

  static R run(const Handle& op, const char* op_name, A... args) {
    return from_list<R>(DifferentiableOnce::apply(&op, op_name, args...));
  }

  static variable_list forward(AutogradContext* ctx, const Handle* op, const char* op_name, A... args) {
    ctx->saved_data["op_name"] = std::string(op_name);
    at::AutoDispatchBelowADInplaceOrView guard;
    return to_list(op->call(args...));
  }

  static variable_list backward(AutogradContext* ctx, const variable_list&) {
    TORCH_CHECK(false, ctx->saved_data["op_name"].toStringRef(), ": double backward is not supported");
  }
};

// The autograd Function of a kFunction definition. Its forward saves the Params and the first input's
// shape, calls the op below autograd, saves Def::saved(inputs, outputs) and marks every output after the
// first non-differentiable (the int32 argmax / channel_mapping outputs). Its backward hands
// Saved<Params> to Def::backward and pads the result with undefined gradients for the scalars.
template <typename Def, typename ArgList = typename Def::Args>
class Function;

template <typename Def, typename... A>
class Function<Def, Args<A...>> : public torch::autograd::Function<Function<Def, Args<A...>>> {
 public:
  using P = typename Def::Params;

  static variable_list forward(AutogradContext* ctx, typename A::type... a) {
    P params{};
    Shape unused{};
    bind_params<Def>(Args<A...>{}, params, unused, a...);
    save_params(ctx, params);
    const TensorList inputs = std::apply([](const auto&... t) { return TensorList{t...}; },
                                         std::tuple_cat(tensor_part<A>(a)...));
    ctx->saved_data["input_shape"] = inputs[0].sizes().vec();
    variable_list outputs;
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      outputs = to_list(op_handle<Def>().call(a...));
    }
    ctx->save_for_backward(Def::saved(inputs, outputs));
    for (std::size_t i = 1; i < outputs.size(); ++i) ctx->mark_non_differentiable({outputs[i]});
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, const variable_list& grad_outputs) {
    const auto shape = ctx->saved_data["input_shape"].toIntVector();
    Saved<P> saved{ctx->get_saved_variables(), saved_params<P>(ctx), {}, ctx};
    for (std::size_t d = 0; d < shape.size() && d < saved.input_shape.size(); ++d) saved.input_shape[d] = shape[d];
    variable_list grads = Def::backward(saved, grad_outputs);
    grads.resize(sizeof...(A));
    return grads;
  }
};

// ---------------------------------------------------------------------------------------------------
// The generated schema-facing functions, one per dispatch key.

template <typename Def, typename ArgList = typename Def::Args>
struct Kernels;

template <typename Def, typename... A>
struct Kernels<Def, Args<A...>> {
  using R = typename Def::Returns;

  static R compute(typename A::type... a) { return invoke_bound<Def>(Def::kCompute, Args<A...>{}, a...); }
  static R meta(typename A::type... a) { return invoke_bound<Def>(Def::kMeta, Args<A...>{}, a...); }
  static R autograd(typename A::type... a) { return from_list<R>(Function<Def>::apply(a...)); }
  static R once(typename A::type... a) {
    return DifferentiableOnce<R(typename A::type...)>::run(op_handle<Def>(), Def::kOpName, a...);
  }
};

// Registers an op given by its definition: the schema, the same compute kernel for CPU and CUDA, the Meta
// kernel when the definition has one (kHasMeta), and the Autograd kernel its kAutograd asks for.
template <typename Def>
void define_one(torch::Library& m) {
  using K = Kernels<Def>;
  const std::string name = schema_name(Def::kSchema);
  m.def(Def::kSchema);
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::CPU, &K::compute));
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::CUDA, &K::compute));
  if constexpr (Def::kHasMeta) m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::Meta, &K::meta));
  if constexpr (Def::kAutograd == Autograd::kFunction) {
    m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::Autograd, &K::autograd));
  } else if constexpr (Def::kAutograd == Autograd::kOnce) {
    m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::Autograd, &K::once));
  }
}

template <typename... Defs>
void define(torch::Library& m) {
  (define_one<Defs>(m), ...);
}

// Registers a hand-written op (one whose arguments are not Tensors, Fields and Dims, e.g. strings):
// the same `compute` for CPU and CUDA, and `meta` / `autograd` where given (nullptr: none).
template <typename Fn>
void define_raw(torch::Library& m, const char* schema, Fn* compute, Fn* meta, Fn* autograd) {
  const std::string name = schema_name(schema);
  m.def(schema);
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::CPU, compute));
  m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::CUDA, compute));
  if (meta != nullptr) m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::Meta, meta));
  if (autograd != nullptr) m.impl(name.c_str(), torch::dispatch(c10::DispatchKey::Autograd, autograd));
}

// Definition defaults: inherit and override what differs.
template <typename P>
struct OpDef {
  using Params = P;
  using Returns = at::Tensor;
  static constexpr bool kHasMeta = true;
  static constexpr Autograd kAutograd = Autograd::kNone;
};

// A kFunction forward whose gradient, for its first tensor argument only, is one backward op called as
// Backward(grad, the forward's tensor arguments..., params): every tensor argument is saved (an absent
// optional one as an undefined tensor). The losses' pattern.
template <typename P, typename Backward>
struct GradFirstThenInputs : OpDef<P> {
  static constexpr Autograd kAutograd = Autograd::kFunction;
  static TensorList saved(const TensorList& inputs, const TensorList&) { return inputs; }
  static variable_list backward(const Saved<P>& s, const variable_list& grads) {
    TensorList args{grads[0]};
    args.insert(args.end(), s.tensors.begin(), s.tensors.end());
    return {call<Backward>(args, s.params)};
  }
};

// Meta for ops whose result has the shape and options of their I-th tensor argument. It reads the tensors
// only: the scalar arguments are neither parsed nor checked (kTensorsOnly).
template <std::size_t I>
struct EmptyLike {
  static constexpr bool kTensorsOnly = true;
  template <typename... T>
  at::Tensor operator()(const T&... tensors) const {
    const at::Tensor& like = std::get<I>(std::forward_as_tuple(tensors...));
    return at::empty(like.sizes(), like.options());
  }
};

// Meta for backward ops whose result is input_shape-shaped in the first tensor's options.
struct EmptyOfInputShape {
  template <typename... Rest>
  at::Tensor operator()(const at::Tensor& first, const Rest&... rest) const {
    const Shape& shape = std::get<sizeof...(Rest) - 1>(std::forward_as_tuple(rest...));
    return at::empty(shape, first.options());
  }
};

}  // namespace opkit
}  // namespace detops
