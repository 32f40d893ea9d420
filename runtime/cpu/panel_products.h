// runtime/cpu/panel_products.h - cleave's own float32 matrix product for CPUs with AVX2 and FMA
// but not AVX-512: a [K, N] weight packed once into panels of 16 columns, multiplied by rows as
// they are stored (no copy of the rows), the bias and the activation (ReLU, GELU) applied in
// registers before the tile is stored.
//
// Why it exists: on AVX2, Debian's oneDNN 2.6 runs products on its gemm:jit kernels at 82% of the
// machine's FMA peak where ONNX Runtime's MLAS reaches 87% (bench/RESULTS.md, session 52); oneDNN
// 3.10 inside libtorch was no faster there. On AVX-512, oneDNN's brgemm kernels are the faster
// ones and this file is not used (runsHere()).
//
// Guarantees: every function is plain C++ over float pointers (no ATen, no threads of its own:
// the caller splits the work into parts and runs each on a thread); multiply() writes every
// element of its part of `out` exactly once per K block, so parts may run concurrently; results
// differ from a reference product only by float32 rounding (accumulated in K order per block).
// Complexity: pack and unpack O(K * N); multiply O(M * K * N / parts) per part.
#pragma once

#include <cstdint>

namespace cleave::runtime::cpu::panels {

// Columns per panel: two AVX2 registers of floats.
inline constexpr std::int64_t kPanelColumns = 16;

// Whether this CPU runs the kernel and it is the faster choice: AVX2 and FMA, and no AVX-512F.
bool runsHere();

// Floats a packed [K, N] weight takes: N rounded up to whole panels, times K.
std::int64_t packedFloats(std::int64_t k, std::int64_t n);

// Packs the [K, N] weight whose element (r, c) is at kn[r * rowStride + c * columnStride] into
// `panels` (packedFloats(k, n) floats): panel p holds columns [16p, 16p + 16) for every K row,
// 16 floats a row, the columns past N zero.
void pack(const float* kn, std::int64_t rowStride, std::int64_t columnStride, std::int64_t k, std::int64_t n,
          float* panels);
// The dense [K, N] row-major weight back from its panels.
void unpack(const float* panels, std::int64_t k, std::int64_t n, float* kn);

// What the kernel applies to the final values, in registers (ATen's relu and gelu; GELU's erf
// and tanh by polynomials within float32 rounding of ATen's).
enum class Activation : std::uint8_t { None, Relu, Gelu, GeluTanh };

// What multiply() computes: out[M, N] (row stride N) = activation(rows[M, K] (row stride
// rowStride) times the packed weight, plus bias[N] when bias is not null).
struct Product {
  const float* rows = nullptr;
  std::int64_t m = 0, k = 0, n = 0, rowStride = 0;
  const float* panels = nullptr;
  const float* bias = nullptr;
  float* out = nullptr;
  Activation activation = Activation::None;
};

// How many parts to split a product into for `threads` threads: several per thread, for the
// threads to take in turn (fewer where a part would be too small to pay for itself; one for one
// thread).
int partsFor(const Product& product, int threads);
// Computes part `part` of `parts` (a block of panels by a block of rows: the grid that reads the
// rows and the weight again least).
void multiply(const Product& product, int part, int parts);

} // namespace cleave::runtime::cpu::panels
