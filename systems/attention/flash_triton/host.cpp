// The Triton kernels' eager host path in C++: the ops systems_flash::triton_forward, ::triton_backward and
// ::triton_attention (with the C++ autograd node of ../flash_cpp/flash_autograd.h), which launch the kernels Triton
// compiled through the CUDA driver, with no Python per call.
//
// A call looks up its plan by layout: what the Python launcher (launch.py) decides per call follows from the layout
// (shapes, strides, 16-byte alignment of each tensor, dtype, device, causality, deterministic mode), and so do the
// kernels Triton compiles for it, their grids and their scalar arguments. The first call of a layout runs the Python
// launcher (the ops ::triton_forward_first and ::triton_backward_first, whose CUDA kernels host.py registers); it
// launches through Triton's JIT as any call there does and hands back the plan, encoded as int64s (host.py:
// encode_plan): for each launch the compiled kernel's CUfunction, its grid, warps, shared memory and global scratch,
// and its parameters in order, each a tensor of the call (by index) or an i32, i64 or fp32 value. Later calls of
// the layout allocate the outputs as the Python launcher does and launch each kernel with cuLaunchKernel, as
// Triton's own launcher would (its parameters, then the global and profile scratch pointers).

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#include <dlfcn.h>
#include <torch/library.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "flash_autograd.h"
#include "flash_checks.h"

namespace {

using at::Tensor;

// A parameter of a compiled kernel: a tensor of the call or a scalar (kinds as host.py encodes them).
enum ParamKind : int64_t { TENSOR = 0, I32 = 1, I64 = 2, FP32 = 3 };

struct Param {
  int64_t kind;
  int64_t value;  // the call's tensor index, or the scalar's bits
};

struct Launch {
  CUfunction function;
  unsigned grid[3];
  unsigned threads;
  unsigned shared_bytes;
  int64_t scratch_bytes;  // global scratch per program (tensor descriptors built on the device)
  std::vector<Param> params;
};

struct Plan {
  bool one_pass;    // backward: dQ added up in fp32 in the dK/dV pass (then copied out of its padded buffer)
  int64_t block_d;  // backward: the row width of that buffer (the head dim, or its padded block)
  std::vector<Launch> launches;
};

// The plan of an encoded int64 tensor: one_pass, block_d, the number of launches, then each launch as function,
// grid x, y, z, warps, shared bytes, scratch bytes, the number of parameters and (kind, value) per parameter.
std::shared_ptr<const Plan> decode(const Tensor& encoded) {
  TORCH_CHECK(encoded.scalar_type() == at::kLong && encoded.dim() == 1, "systems_flash: a plan is a 1-d int64 tensor");
  const Tensor ints = encoded.cpu().contiguous();
  const int64_t* p = ints.data_ptr<int64_t>();
  const int64_t* end = p + ints.numel();
  auto next = [&]() {
    TORCH_CHECK(p < end, "systems_flash: a plan ended early");
    return *p++;
  };
  auto plan = std::make_shared<Plan>();
  plan->one_pass = next() != 0;
  plan->block_d = next();
  const int64_t n_launches = next();
  for (int64_t i = 0; i < n_launches; ++i) {
    Launch launch;
    launch.function = reinterpret_cast<CUfunction>(static_cast<uintptr_t>(next()));
    for (unsigned& g : launch.grid) g = static_cast<unsigned>(next());
    launch.threads = static_cast<unsigned>(32 * next());
    launch.shared_bytes = static_cast<unsigned>(next());
    launch.scratch_bytes = next();
    const int64_t n_params = next();
    for (int64_t j = 0; j < n_params; ++j) {
      const int64_t kind = next();
      TORCH_CHECK(kind >= TENSOR && kind <= FP32, "systems_flash: unknown parameter kind ", systems_flash::text(kind),
                  " in a plan");
      launch.params.push_back({kind, next()});
    }
    plan->launches.push_back(std::move(launch));
  }
  TORCH_CHECK(p == end, "systems_flash: a plan has ", systems_flash::text(end - p), " ints too many");
  return plan;
}

// What a plan depends on: the op, the device, dtype, causality and deterministic mode, and each tensor's sizes,
// strides and 16-byte alignment (from which follow every value Triton specialises a kernel on).
using Key = std::vector<int64_t>;

struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = 0;
    for (int64_t x : key) h = h * 1000003u ^ std::hash<int64_t>()(x);
    return h;
  }
};

Key layout_key(int64_t op, bool is_causal, std::initializer_list<const Tensor*> tensors) {
  const Tensor& first = **tensors.begin();
  Key key{op, first.get_device(), static_cast<int64_t>(first.scalar_type()), is_causal,
          at::globalContext().deterministicAlgorithms()};
  for (const Tensor* t : tensors) {
    key.push_back(t->dim());
    for (int64_t i = 0; i < t->dim(); ++i) {
      key.push_back(t->size(i));
      key.push_back(t->stride(i));
    }
    key.push_back(reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 == 0);
  }
  return key;
}

// Plans by layout. A run with ever-new lengths would add entries without end: past MAX_PLANS they are dropped and
// found again as calls come (as the Python launcher's own, replay.py).
constexpr size_t MAX_PLANS = 4096;
std::mutex plans_mutex;  // the backward runs on autograd's device thread
std::unordered_map<Key, std::shared_ptr<const Plan>, KeyHash> plans;

std::shared_ptr<const Plan> find_plan(const Key& key) {
  std::lock_guard<std::mutex> lock(plans_mutex);
  auto it = plans.find(key);
  return it == plans.end() ? nullptr : it->second;
}

void remember(Key key, const Tensor& encoded) {
  if (encoded.numel() == 0) return;  // the first call tuned tiles, or a launch hook is set: no plan to keep
  auto plan = decode(encoded);
  std::lock_guard<std::mutex> lock(plans_mutex);
  if (plans.size() >= MAX_PLANS) plans.clear();
  plans[std::move(key)] = std::move(plan);
}

// cuLaunchKernel from the driver library, found once (the extension links no libcuda of its own, as Triton's
// launcher does not).
using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void**, void**);
using ErrorString = CUresult (*)(CUresult, const char**);

struct Driver {
  LaunchKernel launch_kernel = nullptr;
  ErrorString error_string = nullptr;
};

const Driver& driver() {
  static const Driver found = [] {
    Driver d;
    void* library = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    TORCH_CHECK(library != nullptr, "systems_flash: cannot open the CUDA driver (libcuda.so.1): ", dlerror());
    d.launch_kernel = reinterpret_cast<LaunchKernel>(dlsym(library, "cuLaunchKernel"));
    d.error_string = reinterpret_cast<ErrorString>(dlsym(library, "cuGetErrorString"));
    TORCH_CHECK(d.launch_kernel && d.error_string, "systems_flash: the CUDA driver lacks cuLaunchKernel");
    return d;
  }();
  return found;
}

void run(const Launch& launch, const std::vector<Tensor>& tensors, CUstream stream) {
  // each parameter's bytes in a slot of its own; the kernel reads each through a pointer to its slot
  std::vector<uint64_t> slots(launch.params.size() + 2, 0);
  std::vector<void*> pointers(slots.size());
  for (size_t i = 0; i < launch.params.size(); ++i) {
    const Param& param = launch.params[i];
    if (param.kind == TENSOR) {
      slots[i] = reinterpret_cast<uintptr_t>(tensors.at(param.value).data_ptr());
    } else if (param.kind == I32 || param.kind == FP32) {
      const auto bits = static_cast<uint32_t>(param.value);
      std::memcpy(&slots[i], &bits, sizeof bits);
    } else {
      std::memcpy(&slots[i], &param.value, sizeof param.value);
    }
  }
  Tensor scratch;
  if (launch.scratch_bytes > 0) {
    const int64_t programs = int64_t(launch.grid[0]) * launch.grid[1] * launch.grid[2];
    scratch = at::empty({programs * launch.scratch_bytes}, tensors.front().options().dtype(at::kByte));
    slots[launch.params.size()] = reinterpret_cast<uintptr_t>(scratch.data_ptr());
  }
  for (size_t i = 0; i < slots.size(); ++i) pointers[i] = &slots[i];  // the last: the profile scratch, none
  const CUresult result = driver().launch_kernel(launch.function, launch.grid[0], launch.grid[1], launch.grid[2],
                                                 launch.threads, 1, 1, launch.shared_bytes, stream, pointers.data(),
                                                 nullptr);
  if (result != CUDA_SUCCESS) {
    const char* message = "unknown error";
    driver().error_string(result, &message);
    TORCH_CHECK(false, "systems_flash: launching a Triton kernel failed: ", message);
  }
}

void run_all(const Plan& plan, const std::vector<Tensor>& tensors) {
  const CUstream stream = c10::cuda::getCurrentCUDAStream().stream();
  for (const Launch& launch : plan.launches) run(launch, tensors, stream);
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v) {
  systems_flash::check_inputs(q, k, v);
  TORCH_CHECK(q.is_cuda(), "systems_flash (Triton): q, k, v must be CUDA tensors");
}

template <typename Signature>
c10::TypedOperatorHandle<Signature> first_call_op(const char* name) {
  const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  TORCH_CHECK(handle.hasKernelForDispatchKey(c10::DispatchKey::CUDA), "systems_flash: ", name, " has no CUDA kernel: ",
              "import systems.attention.flash_triton.host, which registers the Python launcher behind it");
  return handle.typed<Signature>();
}

std::tuple<Tensor, Tensor> triton_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal) {
  check_inputs(q, k, v);
  const c10::cuda::CUDAGuard guard(q.device());
  Key key = layout_key(0, is_causal, {&q, &k, &v});
  if (const auto plan = find_plan(key)) {
    auto [o, L] = systems_flash::heads_interleaved_outputs(q);  // as the Python launcher's (layouts.outputs)
    run_all(*plan, {q, k, v, o, L});
    return {o, L};
  }
  using Signature = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, bool);
  static const auto first = first_call_op<Signature>("systems_flash::triton_forward_first");
  auto [o, L, encoded] = first.call(q, k, v, is_causal);
  remember(std::move(key), encoded);
  return {o, L};
}

// The backward's tensors in the order host.py numbers them: the inputs, then delta (rowsum(dO * O)), the fp32 dQ
// accumulator of the one-pass backward (dK stands in for it with two passes), dQ, dK and dV, laid out as the Python
// launcher lays them out (layouts.gradients).
std::tuple<Tensor, Tensor, Tensor> triton_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                                   const Tensor& dout, const Tensor& L, bool is_causal) {
  check_inputs(q, k, v);
  const c10::cuda::CUDAGuard guard(q.device());
  Key key = layout_key(1, is_causal, {&q, &k, &v, &o, &dout, &L});
  if (const auto plan = find_plan(key)) {
    const int64_t B = q.size(0), H = q.size(1), nq = q.size(2), d = q.size(3);
    const auto fp32 = q.options().dtype(at::kFloat);
    Tensor delta = at::empty({B, H, nq}, fp32);
    auto [dq, dk, dv] = systems_flash::gradients_laid_out_as_values(q, v);
    Tensor dq_acc = plan->one_pass ? at::empty({B, H, nq, plan->block_d}, fp32) : dk;
    run_all(*plan, {q, k, v, o, dout, L, delta, dq_acc, dq, dk, dv});
    if (plan->one_pass) dq.copy_(dq_acc.narrow(3, 0, d));
    return {dq, dk, dv};
  }
  using Signature = std::tuple<Tensor, Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                               const Tensor&, const Tensor&, const Tensor&, bool);
  static const auto first = first_call_op<Signature>("systems_flash::triton_backward_first");
  auto [dq, dk, dv, encoded] = first.call(q, k, v, o, dout, L, is_causal);
  remember(std::move(key), encoded);
  return {dq, dk, dv};
}

// The shapes and layouts alone, for torch.compile's fake tensors (symbolic sizes read as SymInts).
std::tuple<Tensor, Tensor> triton_forward_meta(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal) {
  TORCH_CHECK(q.dim() == 4, "systems_flash: q, k, v must be (B, H, N, d)");
  return systems_flash::heads_interleaved_outputs(q);
}

std::tuple<Tensor, Tensor, Tensor> triton_backward_meta(const Tensor& q, const Tensor& k, const Tensor& v,
                                                        const Tensor& o, const Tensor& dout, const Tensor& L,
                                                        bool is_causal) {
  return systems_flash::gradients_laid_out_as_values(q, v);
}

int64_t plan_count() {
  std::lock_guard<std::mutex> lock(plans_mutex);
  return static_cast<int64_t>(plans.size());
}

void forget_plans() {
  std::lock_guard<std::mutex> lock(plans_mutex);
  plans.clear();
}

struct Ops {
  static constexpr const char* forward = "systems_flash::triton_forward";
  static constexpr const char* backward = "systems_flash::triton_backward";
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(systems_flash, m) {
  m.def("triton_forward(Tensor q, Tensor k, Tensor v, bool is_causal) -> (Tensor, Tensor)");
  m.def("triton_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor dout, Tensor L, bool is_causal) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("triton_attention(Tensor q, Tensor k, Tensor v, bool is_causal) -> Tensor");
  // the first call of a layout: the Python launcher, which returns the plan for the calls after it
  m.def("triton_forward_first(Tensor q, Tensor k, Tensor v, bool is_causal) -> (Tensor, Tensor, Tensor)");
  m.def("triton_backward_first(Tensor q, Tensor k, Tensor v, Tensor o, Tensor dout, Tensor L, bool is_causal) "
        "-> (Tensor, Tensor, Tensor, Tensor)");
  m.def("triton_plan_count() -> int", &plan_count);
  m.def("triton_forget_plans() -> ()", &forget_plans);
}

TORCH_LIBRARY_IMPL(systems_flash, CUDA, m) {
  m.impl("triton_forward", &triton_forward);
  m.impl("triton_backward", &triton_backward);
}

TORCH_LIBRARY_IMPL(systems_flash, Meta, m) {
  m.impl("triton_forward", &triton_forward_meta);
  m.impl("triton_backward", &triton_backward_meta);
}

TORCH_LIBRARY_IMPL(systems_flash, CompositeExplicitAutograd, m) {
  m.impl("triton_attention", &systems_flash::forward_only<Ops>);
}

TORCH_LIBRARY_IMPL(systems_flash, Autograd, m) {
  m.impl("triton_attention", &systems_flash::with_autograd<Ops>);
}
