// runtime/cpu/panel_products.cpp - cleave's own AVX2 product (panel_products.h). The kernel
// functions carry target("avx2,fma") instead of the file being built with -mavx2, so nothing
// outside them can use an instruction a CPU without AVX2 lacks; runsHere() gates every call.
//
// Blocking (BLIS's order, measured on an AMD EPYC with AVX2, 2 threads, bench/RESULTS.md session
// 52): K in blocks of 384 (a panel's block, 24 KiB, stays in L1 while the rows pass), rows in
// blocks of 96, panels in groups of 8 (their 192 KiB stay in L2 while every row block passes);
// the 6 x 16 register tile is 12 accumulators, 2 weight loads and 6 broadcasts per K step.
#include "runtime/cpu/panel_products.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define CLEAVE_AVX2_FMA __attribute__((target("avx2,fma")))

namespace cleave::runtime::cpu::panels {
namespace {
constexpr std::int64_t kTileRows = 6;
constexpr std::int64_t kDepthBlock = 384;
constexpr std::int64_t kRowBlock = 96;
constexpr std::int64_t kPanelGroup = 8;
// How far ahead (in K steps of one 64-byte line each) a streaming tile prefetches its weight.
constexpr std::int64_t kPrefetchSteps = 48;
// Below this many multiply-adds a part does not pay for waking a thread.
constexpr std::int64_t kMinimumPartWork = 1 << 15;
// Parts per thread, taken in turn by whichever thread is free: on a shared machine one core can be
// slowed for a while, and a fixed half each would leave the other core waiting.
constexpr std::int64_t kPartsPerThread = 4;

// One tile's inputs: `rows` rows of `depth` floats from `a` (row stride lda) times a panel's
// depth x 16 block `b`, into `c` (row stride ldc), `columns` (<= 16) of them stored.
struct Tile {
  const float* a;
  std::int64_t lda;
  const float* b;
  float* c;
  std::int64_t ldc;
  std::int64_t depth;
  std::int64_t columns;
  const float* bias; // the first K block's starting values (16 floats, padded), or null
  bool accumulate;   // add to c (a later K block)
  bool streaming;    // the rows are one tile: the weight is read once, from memory, so prefetch it
  Activation activation; // applied to the final values (the last K block's tiles only)
};

// e^x for x in [-87, 88] (Cephes' expf: 2^n times a degree-6 polynomial of the remainder; about 1
// ulp), saturating outside.
CLEAVE_AVX2_FMA inline __m256 exponential(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x); // ln 2 in two parts
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}

// erf(x) by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7, float32's own rounding at 1).
CLEAVE_AVX2_FMA inline __m256 errorFunction(__m256 x) {
  const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
  const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), a, _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(1.061405429f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
  p = _mm256_mul_ps(p, t);
  const __m256 e = exponential(_mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), a), a));
  const __m256 y = _mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.0f));
  return _mm256_or_ps(y, sign);
}

// The activation of a product's final values, as ATen's relu and gelu compute it (GELU's erf and
// tanh to within float32 rounding of theirs).
CLEAVE_AVX2_FMA inline __m256 activate(__m256 v, Activation activation) {
  switch (activation) {
  case Activation::None: return v;
  case Activation::Relu: return _mm256_max_ps(v, _mm256_setzero_ps());
  case Activation::Gelu: { // x/2 (1 + erf(x / sqrt 2))
    const __m256 e = errorFunction(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f)));
    return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.5f)), _mm256_add_ps(e, _mm256_set1_ps(1.0f)));
  }
  case Activation::GeluTanh: { // x/2 (1 + tanh(u)), tanh(u) = 1 - 2 / (e^(2u) + 1)
    const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                   _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), cube, v));
    const __m256 e2u = exponential(_mm256_add_ps(u, u));
    const __m256 tanhU = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f),
                                                                          _mm256_add_ps(e2u, _mm256_set1_ps(1.0f))));
    return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.5f)), _mm256_add_ps(tanhU, _mm256_set1_ps(1.0f)));
  }
  }
  return v;
}

// The register tile of Rows x 16 accumulators, with Sets independent copies summed at the end:
// a tile of one to three rows has too few accumulators to hide the FMA's latency alone.
template <int Rows, int Sets>
CLEAVE_AVX2_FMA void multiplyTile(const Tile& t) {
  __m256 low[Sets][Rows], high[Sets][Rows];
#pragma GCC unroll 4
  for (int s = 0; s < Sets; ++s)
#pragma GCC unroll 6
    for (int r = 0; r < Rows; ++r)
      low[s][r] = high[s][r] = _mm256_setzero_ps();
  std::int64_t k = 0;
  for (; k + Sets <= t.depth; k += Sets) {
#pragma GCC unroll 4
    for (int s = 0; s < Sets; ++s) {
      if (t.streaming)
        _mm_prefetch(reinterpret_cast<const char*>(t.b + (k + s + kPrefetchSteps) * kPanelColumns), _MM_HINT_T0);
      const __m256 b0 = _mm256_loadu_ps(t.b + (k + s) * kPanelColumns);
      const __m256 b1 = _mm256_loadu_ps(t.b + (k + s) * kPanelColumns + 8);
#pragma GCC unroll 6
      for (int r = 0; r < Rows; ++r) {
        const __m256 a = _mm256_broadcast_ss(t.a + r * t.lda + k + s);
        low[s][r] = _mm256_fmadd_ps(a, b0, low[s][r]);
        high[s][r] = _mm256_fmadd_ps(a, b1, high[s][r]);
      }
    }
  }
  for (; k < t.depth; ++k) {
    const __m256 b0 = _mm256_loadu_ps(t.b + k * kPanelColumns), b1 = _mm256_loadu_ps(t.b + k * kPanelColumns + 8);
#pragma GCC unroll 6
    for (int r = 0; r < Rows; ++r) {
      const __m256 a = _mm256_broadcast_ss(t.a + r * t.lda + k);
      low[0][r] = _mm256_fmadd_ps(a, b0, low[0][r]);
      high[0][r] = _mm256_fmadd_ps(a, b1, high[0][r]);
    }
  }
#pragma GCC unroll 4
  for (int s = 1; s < Sets; ++s)
#pragma GCC unroll 6
    for (int r = 0; r < Rows; ++r) {
      low[0][r] = _mm256_add_ps(low[0][r], low[s][r]);
      high[0][r] = _mm256_add_ps(high[0][r], high[s][r]);
    }
  if (t.bias) {
    const __m256 b0 = _mm256_loadu_ps(t.bias), b1 = _mm256_loadu_ps(t.bias + 8);
#pragma GCC unroll 6
    for (int r = 0; r < Rows; ++r) {
      low[0][r] = _mm256_add_ps(low[0][r], b0);
      high[0][r] = _mm256_add_ps(high[0][r], b1);
    }
  }
  alignas(32) float spill[Rows][kPanelColumns]; // the last panel's columns past N go through here
  const bool whole = t.columns == kPanelColumns;
  if (t.accumulate)
#pragma GCC unroll 6
    for (int r = 0; r < Rows; ++r) {
      const float* c = t.c + r * t.ldc;
      if (!whole) {
        std::memcpy(spill[r], c, static_cast<std::size_t>(t.columns) * sizeof(float));
        c = spill[r];
      }
      low[0][r] = _mm256_add_ps(low[0][r], _mm256_loadu_ps(c));
      high[0][r] = _mm256_add_ps(high[0][r], _mm256_loadu_ps(c + 8));
    }
  if (t.activation != Activation::None)
#pragma GCC unroll 6
    for (int r = 0; r < Rows; ++r) {
      low[0][r] = activate(low[0][r], t.activation);
      high[0][r] = activate(high[0][r], t.activation);
    }
#pragma GCC unroll 6
  for (int r = 0; r < Rows; ++r) {
    float* c = whole ? t.c + r * t.ldc : spill[r];
    _mm256_storeu_ps(c, low[0][r]);
    _mm256_storeu_ps(c + 8, high[0][r]);
    if (!whole)
      std::memcpy(t.c + r * t.ldc, spill[r], static_cast<std::size_t>(t.columns) * sizeof(float));
  }
}

CLEAVE_AVX2_FMA void multiplyTileOfRows(std::int64_t rows, const Tile& t) {
  switch (rows) {
  case 6: multiplyTile<6, 1>(t); break;
  case 5: multiplyTile<5, 1>(t); break;
  case 4: multiplyTile<4, 1>(t); break;
  case 3: multiplyTile<3, 2>(t); break;
  case 2: multiplyTile<2, 2>(t); break;
  default: multiplyTile<1, 4>(t); break;
  }
}

struct Range {
  std::int64_t begin, end;
};

// The part's panels and rows: the parts form a grid of panel chunks by row chunks (row chunks in
// whole tiles), shaped so that the rows and the weight read again across chunks are fewest: each
// panel chunk reads every row of its row chunk and each row chunk every panel of its panel chunk,
// so the grid minimizes M x (panel chunks) + N x (row chunks). ViT's 197 x 768 x 3072 splits by
// panels alone; a decoder's 512 x 256 x 256 into 2 panel chunks by 4 row chunks, where splitting
// by panels alone read its 512 KiB of rows eight times.
void partOf(const Product& p, int part, int parts, Range& panels, Range& rows) {
  const std::int64_t panelCount = (p.n + kPanelColumns - 1) / kPanelColumns;
  const std::int64_t tiles = (p.m + kTileRows - 1) / kTileRows;
  std::int64_t panelChunks = 1, best = -1;
  for (std::int64_t chunks = 1; chunks <= parts; ++chunks) {
    const std::int64_t rowChunks = parts / chunks;
    if (parts % chunks != 0 || chunks > panelCount || rowChunks > tiles)
      continue;
    const std::int64_t reread = p.m * chunks + p.n * rowChunks;
    if (best < 0 || reread < best) {
      best = reread;
      panelChunks = chunks;
    }
  }
  if (best < 0) // more parts than tiles and panels allow: the panels split, the parts past them idle
    panelChunks = parts;
  const std::int64_t rowChunks = parts / panelChunks;
  const std::int64_t panelChunk = part % panelChunks, rowChunk = part / panelChunks;
  panels = {panelCount * panelChunk / panelChunks, panelCount * (panelChunk + 1) / panelChunks};
  rows = {std::min(p.m, tiles * rowChunk / rowChunks * kTileRows),
          std::min(p.m, tiles * (rowChunk + 1) / rowChunks * kTileRows)};
}

// One K block of the part: every row block against every panel of one group.
void multiplyGroup(const Product& p, Range rows, Range group, std::int64_t depth0, std::int64_t depth,
                   bool streaming) {
  const Activation activation = depth0 + depth == p.k ? p.activation : Activation::None;
  for (std::int64_t row0 = rows.begin; row0 < rows.end; row0 += kRowBlock) {
    const std::int64_t rowEnd = std::min(rows.end, row0 + kRowBlock);
    for (std::int64_t panel = group.begin; panel < group.end; ++panel) {
      const std::int64_t column0 = panel * kPanelColumns, columns = std::min(kPanelColumns, p.n - column0);
      alignas(32) float paddedBias[kPanelColumns] = {};
      const float* bias = nullptr;
      if (p.bias && depth0 == 0) {
        std::memcpy(paddedBias, p.bias + column0, static_cast<std::size_t>(columns) * sizeof(float));
        bias = paddedBias;
      }
      for (std::int64_t row = row0; row < rowEnd; row += kTileRows) {
        const Tile tile{p.rows + row * p.rowStride + depth0, p.rowStride, p.panels + (panel * p.k + depth0) * kPanelColumns,
                        p.out + row * p.n + column0, p.n, depth, columns, bias, depth0 > 0, streaming, activation};
        multiplyTileOfRows(std::min(kTileRows, rowEnd - row), tile);
      }
    }
  }
}
} // namespace

bool runsHere() {
  static const bool here = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           !__builtin_cpu_supports("avx512f");
  return here;
}

std::int64_t packedFloats(std::int64_t k, std::int64_t n) {
  return (n + kPanelColumns - 1) / kPanelColumns * kPanelColumns * k;
}

void pack(const float* kn, std::int64_t rowStride, std::int64_t columnStride, std::int64_t k, std::int64_t n,
          float* panels) {
  const std::int64_t panelCount = (n + kPanelColumns - 1) / kPanelColumns;
  for (std::int64_t panel = 0; panel < panelCount; ++panel)
    for (std::int64_t row = 0; row < k; ++row) {
      float* to = panels + (panel * k + row) * kPanelColumns;
      for (std::int64_t j = 0; j < kPanelColumns; ++j) {
        const std::int64_t column = panel * kPanelColumns + j;
        to[j] = column < n ? kn[row * rowStride + column * columnStride] : 0.0f;
      }
    }
}

void unpack(const float* panels, std::int64_t k, std::int64_t n, float* kn) {
  for (std::int64_t row = 0; row < k; ++row)
    for (std::int64_t column = 0; column < n; ++column)
      kn[row * n + column] =
          panels[((column / kPanelColumns) * k + row) * kPanelColumns + column % kPanelColumns];
}

int partsFor(const Product& product, int threads) {
  const std::int64_t work = product.m * product.k * product.n;
  const std::int64_t most = threads > 1 ? kPartsPerThread * threads : 1;
  return static_cast<int>(std::clamp<std::int64_t>(work / kMinimumPartWork, 1, most));
}

void multiply(const Product& product, int part, int parts) {
  Range panels{}, rows{};
  partOf(product, part, parts, panels, rows);
  if (rows.begin >= rows.end || panels.begin >= panels.end)
    return;
  // One tile of rows reuses no weight block, so K is not blocked: each panel is read front to back,
  // prefetched ahead (about 10% faster on a chain of BERT-sized products at 5 rows).
  const bool streaming = rows.end - rows.begin <= kTileRows;
  const std::int64_t depthBlock = streaming ? product.k : kDepthBlock;
  for (std::int64_t depth0 = 0; depth0 < product.k; depth0 += depthBlock) {
    const std::int64_t depth = std::min(depthBlock, product.k - depth0);
    for (std::int64_t group0 = panels.begin; group0 < panels.end; group0 += kPanelGroup) {
      const Range group{group0, std::min(panels.end, group0 + kPanelGroup)};
      multiplyGroup(product, rows, group, depth0, depth, streaming);
    }
  }
}

} // namespace cleave::runtime::cpu::panels
