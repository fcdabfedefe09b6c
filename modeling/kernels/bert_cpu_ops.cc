// CPU kernels of the training step: dropout, the attention's softmax + dropout, LayerNorm, GELU
// and the AdamWeightDecay update (and LayerNorm's forward in prediction).
// The activation kernels take float32 or bfloat16 (T); bfloat16 is read into float32, computed in
// float32 and rounded to bfloat16 once on the way out (nearest even).
//
// Loaded by modeling/kernels/cpu_ops.py (compiled there on first use); the contract of every op, and
// why it exists, is documented in that module. Built with -ffp-contract=off so that elementwise
// formulas round exactly as TensorFlow's op-by-op kernels (no fused multiply-add).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "tensorflow/core/framework/bfloat16.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
#include "Eigen/Core"

namespace tensorflow {
namespace {

using shape_inference::InferenceContext;

// float32 <-> T (float or bfloat16) for the kernels' loads and stores; arithmetic is float32.
// The bfloat16 conversions are Eigen's (exact widening; round to nearest even, NaN to the quiet
// NaN of its sign) written branch-free on the bits, so that loops around them vectorise.
inline float Widen(uint16_t h) {  // bfloat16 bits -> float32 (exact)
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline uint16_t Narrow(float x) {  // float32 -> bfloat16 bits
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = ((u >> 16) & 0x8000u) | 0x7FC0u;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}
inline float Load(float x) { return x; }
inline float Load(bfloat16 x) {
  uint16_t h;
  std::memcpy(&h, &x, sizeof(h));
  return Widen(h);
}
template <typename T>
inline T Store(float x);
template <>
inline float Store<float>(float x) { return x; }
template <>
inline bfloat16 Store<bfloat16>(float x) {
  const uint16_t h = Narrow(x);
  bfloat16 out;
  std::memcpy(&out, &h, sizeof(h));
  return out;
}
// The same on element i of an array, through the raw bits (loops over these vectorise; the
// bfloat16 struct's own copies do not).
inline float LoadAt(const float* p, int64_t i) { return p[i]; }
inline float LoadAt(const bfloat16* p, int64_t i) {
  return Widen(reinterpret_cast<const uint16_t*>(p)[i]);
}
inline void StoreAt(float* p, int64_t i, float x) { p[i] = x; }
inline void StoreAt(bfloat16* p, int64_t i, float x) {
  reinterpret_cast<uint16_t*>(p)[i] = Narrow(x);
}
// x rounded to T's precision, as float32.
template <typename T>
inline float RoundTo(float x);
template <>
inline float RoundTo<float>(float x) { return x; }
template <>
inline float RoundTo<bfloat16>(float x) { return Widen(Narrow(x)); }

void ParallelFor(OpKernelContext* ctx, int64_t total, int64_t cost_per_unit,
                 const std::function<void(int64_t, int64_t)>& work) {
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
  Shard(workers->num_threads, workers->workers, total, cost_per_unit, work);
}

// Sum of term(0) .. term(n-1) in one order, whatever the vector width of the CPU (-march=native)
// and whatever the compiler makes of the loop for float or bfloat16: element j goes into running
// sum j % kSumLanes, then the lanes are added pairwise. A `simd reduction` (or Eigen's `sum()`)
// adds in the order of the vector width the build picks (8 lanes on AVX2, 16 on AVX-512) and
// only where the loop vectorises, so the same input summed to other bits on another CPU, and
// the bfloat16 kernel's sums differed from the float32 kernel's on AVX2. The inner loop over the
// lanes still vectorises (the lanes are independent; no reassociation is needed).
constexpr int kSumLanes = 16;
template <typename Term>
inline float LaneSum(int64_t n, Term term) {
  float acc[kSumLanes] = {};
  int64_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes) {
    for (int l = 0; l < kSumLanes; ++l) acc[l] += term(j + l);
  }
  for (int l = 0; j + l < n; ++l) acc[l] += term(j + l);
  for (int width = kSumLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

// ------------------------------------------------------------------------------------ Philox
// Philox4x32-10 (Salmon et al., 2011), the counter-based generator TensorFlow's stateless random
// ops use on CPU. Block b (a 64-bit counter) with the op's seed gives 4 words; kLanes blocks are
// computed side by side so that the compiler vectorises them. Chunk c (kChunk elements) uses
// blocks c*kLanes .. c*kLanes + kLanes-1: its element j is word j / kLanes of block j % kLanes.
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
constexpr int kLanes = 16;
constexpr int64_t kChunk = 4 * kLanes;  // elements per call of PhiloxLanes

struct PhiloxKey {
  uint32_t k0, k1, c2, c3;
};

PhiloxKey KeyFromSeed(int64_t s0, int64_t s1) {
  return {static_cast<uint32_t>(s0), static_cast<uint32_t>(static_cast<uint64_t>(s0) >> 32),
          static_cast<uint32_t>(s1), static_cast<uint32_t>(static_cast<uint64_t>(s1) >> 32)};
}

// out[w * kLanes + l] = word w of block (first_block + l).
inline void PhiloxLanes(const PhiloxKey& key, uint64_t first_block, uint32_t* out) {
  uint32_t x0[kLanes], x1[kLanes], x2[kLanes], x3[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t b = first_block + l;
    x0[l] = static_cast<uint32_t>(b);
    x1[l] = static_cast<uint32_t>(b >> 32);
    x2[l] = key.c2;
    x3[l] = key.c3;
  }
  uint32_t a = key.k0, c = key.k1;
#pragma GCC unroll 1
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t p0 = static_cast<uint64_t>(kM0) * x0[l];
      const uint64_t p1 = static_cast<uint64_t>(kM1) * x2[l];
      const uint32_t y0 = static_cast<uint32_t>(p1 >> 32) ^ x1[l] ^ a;
      const uint32_t y2 = static_cast<uint32_t>(p0 >> 32) ^ x3[l] ^ c;
      x1[l] = static_cast<uint32_t>(p1);
      x3[l] = static_cast<uint32_t>(p0);
      x0[l] = y0;
      x2[l] = y2;
    }
    a += kW0;
    c += kW1;
  }
  for (int l = 0; l < kLanes; ++l) {
    out[0 * kLanes + l] = x0[l];
    out[1 * kLanes + l] = x1[l];
    out[2 * kLanes + l] = x2[l];
    out[3 * kLanes + l] = x3[l];
  }
}

// The Philox words of the dropout stream (BertDropout's chunks) by flat element index, one chunk
// computed at a time.
class DropoutWords {
 public:
  explicit DropoutWords(const PhiloxKey& key) : key_(key) {}
  // The words of elements e, e+1, ..., e+*len-1: *len = up to max_len, to the chunk's end.
  const uint32_t* From(int64_t e, int64_t max_len, int64_t* len) {
    const int64_t chunk = e / kChunk, offset = e - chunk * kChunk;
    if (chunk != chunk_) {
      PhiloxLanes(key_, static_cast<uint64_t>(chunk) * kLanes, words_);
      chunk_ = chunk;
    }
    *len = std::min(kChunk - offset, max_len);
    return words_ + offset;
  }

 private:
  PhiloxKey key_;
  int64_t chunk_ = -1;
  uint32_t words_[kChunk];
};

// Dropped iff word < threshold: P(drop) = ceil(rate * 2^32) / 2^32.
uint32_t DropThreshold(float rate) {
  return static_cast<uint32_t>(
      std::min(std::ceil(static_cast<double>(rate) * 4294967296.0), 4294967295.0));
}

// ------------------------------------------------------------------------------------ dropout
REGISTER_OP("BertDropout")
    .Input("x: T")
    .Input("seed: int64")
    .Attr("rate: float")
    .Attr("T: {float, bfloat16} = DT_FLOAT")
    .Output("y: T")
    .Output("mask: uint8")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(0));
      return absl::OkStatus();
    });

REGISTER_OP("BertDropoutGrad")
    .Input("dy: T")
    .Input("mask: uint8")
    .Attr("rate: float")
    .Attr("T: {float, bfloat16} = DT_FLOAT")
    .Output("dx: T")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

template <typename T>
class BertDropoutOp : public OpKernel {
 public:
  explicit BertDropoutOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate_));
    OP_REQUIRES(ctx, rate_ >= 0.0f && rate_ < 1.0f,
                errors::InvalidArgument("BertDropout: rate must be in [0, 1), got ", rate_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& seed = ctx->input(1);
    OP_REQUIRES(ctx, seed.NumElements() == 2,
                errors::InvalidArgument("BertDropout: seed must have 2 elements"));
    Tensor *y = nullptr, *mask = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, x.shape(), &mask));
    const auto s = seed.flat<int64_t>();
    const PhiloxKey key = KeyFromSeed(s(0), s(1));
    const uint32_t threshold = DropThreshold(rate_);
    // As TensorFlow's dropout: x * (1 / (1 - rate)), the product in float32 (for bfloat16: one
    // rounding, of the product; TensorFlow's bfloat16 op rounds the scale to bfloat16 first).
    const float scale = 1.0f / (1.0f - rate_);
    const T* in = x.flat<T>().data();
    T* out = y->flat<T>().data();
    uint8_t* keep = mask->flat<uint8_t>().data();
    const int64_t n = x.NumElements();
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    ParallelFor(ctx, chunks, kChunk * 8, [&](int64_t begin, int64_t end) {
      uint32_t words[kChunk];
      for (int64_t chunk = begin; chunk < end; ++chunk) {
        PhiloxLanes(key, static_cast<uint64_t>(chunk) * kLanes, words);
        const int64_t base = chunk * kChunk;
        const int64_t count = std::min<int64_t>(kChunk, n - base);
        const T* xc = in + base;
        T* yc = out + base;
        uint8_t* kc = keep + base;
        if (count == kChunk) {
#pragma omp simd
          for (int64_t j = 0; j < kChunk; ++j) {
            const bool k = words[j] >= threshold;
            const float scaled = Load(xc[j]) * scale;
            kc[j] = k;
            yc[j] = Store<T>(k ? scaled : 0.0f);
          }
        } else {
          for (int64_t j = 0; j < count; ++j) {
            const bool k = words[j] >= threshold;
            kc[j] = k;
            yc[j] = Store<T>(k ? Load(xc[j]) * scale : 0.0f);
          }
        }
      }
    });
  }

 private:
  float rate_;
};

template <typename T>
class BertDropoutGradOp : public OpKernel {
 public:
  explicit BertDropoutGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& mask = ctx->input(1);
    OP_REQUIRES(ctx, dy.NumElements() == mask.NumElements(),
                errors::InvalidArgument("BertDropoutGrad: dy and mask differ in size"));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, dy.shape(), &dx));
    const float scale = 1.0f / (1.0f - rate_);
    const T* in = dy.flat<T>().data();
    const uint8_t* keep = mask.flat<uint8_t>().data();
    T* out = dx->flat<T>().data();
    ParallelFor(ctx, dy.NumElements(), 2, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float scaled = Load(in[i]) * scale;
        out[i] = Store<T>(keep[i] ? scaled : 0.0f);
      }
    });
  }

 private:
  float rate_;
};

// -------------------------------------------------------------------- attention probabilities
// probs = softmax(scores * scale + bias) over the last axis, then dropout: the attention's
// elementwise chain as one pass over the [B, N, F, T] scores. bias [B, 1, 1, T] (the mask's
// additive bias, broadcast over heads and queries). float32 inside (bfloat16 scores read once),
// probs rounded to T once; y = dropout(probs) with the keep decisions, the scale and the rounding
// of BertDropout on these probs with the same seed (same Philox words by flat element index).
REGISTER_OP("BertAttentionProbs")
    .Input("scores: T")
    .Input("bias: T")
    .Input("seed: int64")
    .Attr("scale: float")
    .Attr("rate: float")
    .Attr("T: {float, bfloat16} = DT_FLOAT")
    .Output("y: T")
    .Output("probs: T")
    .Output("mask: uint8")
    .SetShapeFn([](InferenceContext* c) {
      shape_inference::ShapeHandle shape;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &shape));
      c->set_output(0, shape);
      c->set_output(1, shape);
      c->set_output(2, shape);
      return absl::OkStatus();
    });

// dscores = scale * probs * (dp - sum_T(dp * probs)), dp = dropout's gradient of dy.
REGISTER_OP("BertAttentionProbsGrad")
    .Input("dy: T")
    .Input("probs: T")
    .Input("mask: uint8")
    .Attr("scale: float")
    .Attr("rate: float")
    .Attr("T: {float, bfloat16} = DT_FLOAT")
    .Output("dscores: T")
    .SetShapeFn([](InferenceContext* c) {
      shape_inference::ShapeHandle shape;
      TF_RETURN_IF_ERROR(c->Merge(c->input(0), c->input(1), &shape));
      c->set_output(0, shape);
      return absl::OkStatus();
    });

template <typename T>
class BertAttentionProbsOp : public OpKernel {
 public:
  explicit BertAttentionProbsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate_));
    OP_REQUIRES(ctx, rate_ >= 0.0f && rate_ < 1.0f,
                errors::InvalidArgument("BertAttentionProbs: rate must be in [0, 1), got ", rate_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& scores = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    const Tensor& seed = ctx->input(2);
    OP_REQUIRES(ctx, scores.dims() == 4,
                errors::InvalidArgument("BertAttentionProbs: scores must be [B, N, F, T]"));
    const int64_t b = scores.dim_size(0), heads_x_queries = scores.dim_size(1) * scores.dim_size(2);
    const int64_t t = scores.dim_size(3);
    OP_REQUIRES(ctx, bias.dims() == 4 && bias.dim_size(0) == b && bias.dim_size(1) == 1 &&
                         bias.dim_size(2) == 1 && bias.dim_size(3) == t,
                errors::InvalidArgument("BertAttentionProbs: bias must be [B, 1, 1, T], got ",
                                        bias.shape().DebugString()));
    OP_REQUIRES(ctx, seed.NumElements() == 2,
                errors::InvalidArgument("BertAttentionProbs: seed must have 2 elements"));
    Tensor *y = nullptr, *probs = nullptr, *mask = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, scores.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, scores.shape(), &probs));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, scores.shape(), &mask));
    if (scores.NumElements() == 0) return;
    const auto sd = seed.flat<int64_t>();
    const PhiloxKey key = KeyFromSeed(sd(0), sd(1));
    const uint32_t threshold = DropThreshold(rate_);
    const float scale = scale_, keep_scale = 1.0f / (1.0f - rate_);
    const T* in = scores.flat<T>().data();
    const T* bs = bias.flat<T>().data();
    T* out = y->flat<T>().data();
    T* pout = probs->flat<T>().data();
    uint8_t* keep = mask->flat<uint8_t>().data();
    const int64_t rows = b * heads_x_queries;
    ParallelFor(ctx, rows, t * 40, [&](int64_t begin, int64_t end) {
      // Locals, not the captured references: the uint8_t mask stores may alias those, which
      // would keep the loops below from vectorising.
      const float sc = scale, ks = keep_scale;
      const uint32_t th = threshold;
      // Eigen's own allocation: aligned for its widest packet, so that its vectorised sums run in
      // the same order wherever the buffer lies (an unaligned start is summed apart first), and
      // a resumed run computes the same bits.
      Eigen::ArrayXf x(t);
      DropoutWords words(key);
      for (int64_t r = begin; r < end; ++r) {
        const T* sr = in + r * t;
        const T* br = bs + (r / heads_x_queries) * t;
        float* xr = x.data();  // not restrict: Eigen reads x below
        for (int64_t j = 0; j < t; ++j) xr[j] = LoadAt(sr, j) * sc + LoadAt(br, j);
        // Eigen's vectorised max (exact in any order) and exp; the sum in LaneSum's order.
        const float mx = x.maxCoeff();
        x = (x - mx).exp();
        const float inv = 1.0f / LaneSum(t, [xr](int64_t j) { return xr[j]; });
        const int64_t base = r * t;
        // The row in pieces that each lie in one chunk of the dropout stream.
        for (int64_t j = 0; j < t;) {
          int64_t len = 0;
          const uint32_t* __restrict__ w = words.From(base + j, t - j, &len);
          const float* __restrict__ xj = x.data() + j;
          T* __restrict__ pj = pout + base + j;
          T* __restrict__ yj = out + base + j;
          uint8_t* __restrict__ kj = keep + base + j;
#pragma omp simd
          for (int64_t i = 0; i < len; ++i) {
            const float p = RoundTo<T>(xj[i] * inv);
            const bool k = w[i] >= th;
            StoreAt(pj, i, p);
            kj[i] = k;
            StoreAt(yj, i, k ? p * ks : 0.0f);
          }
          j += len;
        }
      }
    });
  }

 private:
  float scale_, rate_;
};

template <typename T>
class BertAttentionProbsGradOp : public OpKernel {
 public:
  explicit BertAttentionProbsGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& probs = ctx->input(1);
    const Tensor& mask = ctx->input(2);
    OP_REQUIRES(ctx, dy.shape() == probs.shape() && dy.NumElements() == mask.NumElements() &&
                         dy.dims() >= 1,
                errors::InvalidArgument("BertAttentionProbsGrad: dy, probs, mask differ"));
    Tensor* dscores = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, dy.shape(), &dscores));
    const int64_t t = dy.dim_size(dy.dims() - 1);
    if (dy.NumElements() == 0 || t == 0) return;
    const int64_t rows = dy.NumElements() / t;
    const float scale = scale_, keep_scale = 1.0f / (1.0f - rate_);
    const T* g = dy.flat<T>().data();
    const T* p = probs.flat<T>().data();
    const uint8_t* keep = mask.flat<uint8_t>().data();
    T* out = dscores->flat<T>().data();
    ParallelFor(ctx, rows, t * 12, [&](int64_t begin, int64_t end) {
      const float sc = scale, ks = keep_scale;  // locals: see BertAttentionProbsOp
      Eigen::VectorXf dp(t), pf(t);  // aligned: see BertAttentionProbsOp
      for (int64_t r = begin; r < end; ++r) {
        const int64_t base = r * t;
        const uint8_t* __restrict__ kr = keep + base;
        const T* __restrict__ gr = g + base;
        const T* __restrict__ prow = p + base;
        T* __restrict__ orow = out + base;
        float* d = dp.data();  // not restrict: the sum below reads both
        float* q = pf.data();
        for (int64_t j = 0; j < t; ++j) {
          d[j] = kr[j] ? LoadAt(gr, j) * ks : 0.0f;
          q[j] = LoadAt(prow, j);
        }
        // sum_T(dp * probs), in LaneSum's order
        const float dot = LaneSum(t, [d, q](int64_t j) { return d[j] * q[j]; });
        for (int64_t j = 0; j < t; ++j) StoreAt(orow, j, sc * (q[j] * (d[j] - dot)));
      }
    });
  }

 private:
  float scale_, rate_;
};

// ---------------------------------------------------------------------------------- LayerNorm
REGISTER_OP("BertLayerNorm")
    .Input("x: T")
    .Input("gamma: float")
    .Input("beta: float")
    .Attr("epsilon: float")
    .Attr("T: {float, bfloat16} = DT_FLOAT")
    .Output("y: T")
    .Output("mean: float")
    .Output("rstd: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->UnknownShapeOfRank(1));
      c->set_output(2, c->UnknownShapeOfRank(1));
      return absl::OkStatus();
    });

REGISTER_OP("BertLayerNormGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("mean: float")
    .Input("rstd: float")
    .Input("gamma: float")
    .Attr("T: {float, bfloat16} = DT_FLOAT")
    .Output("dx: T")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(4));
      c->set_output(2, c->input(4));
      return absl::OkStatus();
    });

template <typename T>
class BertLayerNormOp : public OpKernel {
 public:
  explicit BertLayerNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& gamma = ctx->input(1);
    const Tensor& beta = ctx->input(2);
    OP_REQUIRES(ctx, x.dims() >= 1 && gamma.dims() == 1 && beta.dims() == 1,
                errors::InvalidArgument("BertLayerNorm: x [..., H], gamma [H], beta [H]"));
    const int64_t h = x.dim_size(x.dims() - 1);
    OP_REQUIRES(ctx, h > 0 && gamma.dim_size(0) == h && beta.dim_size(0) == h,
                errors::InvalidArgument("BertLayerNorm: gamma/beta size != last dim of x"));
    const int64_t rows = x.NumElements() / h;
    Tensor *y = nullptr, *mean = nullptr, *rstd = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({rows}), &mean));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({rows}), &rstd));
    const T* in = x.flat<T>().data();
    const float* g = gamma.flat<float>().data();
    const float* b = beta.flat<float>().data();
    T* out = y->flat<T>().data();
    float* mu_out = mean->flat<float>().data();
    float* rs_out = rstd->flat<float>().data();
    const float eps = epsilon_;
    ParallelFor(ctx, rows, h * 12, [&](int64_t begin, int64_t end) {
      std::vector<float> row(std::is_same<T, float>::value ? 0 : h);
      for (int64_t r = begin; r < end; ++r) {
        const float* xr;
        if constexpr (std::is_same<T, float>::value) {
          xr = in + r * h;
        } else {  // the row in float32, once
          const T* src = in + r * h;
          for (int64_t j = 0; j < h; ++j) row[j] = Load(src[j]);
          xr = row.data();
        }
        const float mu = LaneSum(h, [&](int64_t j) { return xr[j]; }) / static_cast<float>(h);
        const float sq = LaneSum(h, [&](int64_t j) {
          const float d = xr[j] - mu;
          return d * d;
        });
        const float var = sq / static_cast<float>(h);
        const float rs = 1.0f / std::sqrt(var + eps);
        mu_out[r] = mu;
        rs_out[r] = rs;
        T* yr = out + r * h;
        // y = x * inv + (beta - mean * inv), inv = rstd * gamma: the original's formula
        for (int64_t j = 0; j < h; ++j) {
          const float iv = rs * g[j];
          yr[j] = Store<T>(xr[j] * iv + (b[j] - mu * iv));
        }
      }
    });
  }

 private:
  float epsilon_;
};

template <typename T>
class BertLayerNormGradOp : public OpKernel {
 public:
  explicit BertLayerNormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& mean = ctx->input(2);
    const Tensor& rstd = ctx->input(3);
    const Tensor& gamma = ctx->input(4);
    const int64_t h = gamma.NumElements();
    OP_REQUIRES(ctx, h > 0 && x.dims() >= 1 && x.dim_size(x.dims() - 1) == h &&
                         dy.shape() == x.shape(),
                errors::InvalidArgument("BertLayerNormGrad: shapes of dy, x, gamma differ"));
    const int64_t rows = x.NumElements() / h;
    OP_REQUIRES(ctx, mean.NumElements() == rows && rstd.NumElements() == rows,
                errors::InvalidArgument("BertLayerNormGrad: mean/rstd need one value per row"));
    Tensor *dx = nullptr, *dgamma = nullptr, *dbeta = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, gamma.shape(), &dgamma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, gamma.shape(), &dbeta));
    const T* gy = dy.flat<T>().data();
    const T* in = x.flat<T>().data();
    const float* mu = mean.flat<float>().data();
    const float* rs = rstd.flat<float>().data();
    const float* g = gamma.flat<float>().data();
    T* gx = dx->flat<T>().data();
    float* dg = dgamma->flat<float>().data();
    float* db = dbeta->flat<float>().data();
    std::fill(dg, dg + h, 0.0f);
    std::fill(db, db + h, 0.0f);
    if (rows == 0) return;  // an empty batch: zero gradients for gamma and beta
    // Row blocks, each with its own dgamma/dbeta partial sums, added in block order (the
    // result does not depend on the thread count).
    const int64_t blocks = std::min<int64_t>(rows, 32);
    std::vector<float> partial(static_cast<size_t>(blocks) * 2 * h, 0.0f);
    ParallelFor(ctx, blocks, (rows / blocks + 1) * h * 16, [&](int64_t begin, int64_t end) {
      std::vector<float> xhat(h), gxhat(h);
      for (int64_t blk = begin; blk < end; ++blk) {
        float* pg = partial.data() + blk * 2 * h;
        float* pb = pg + h;
        const int64_t r0 = rows * blk / blocks, r1 = rows * (blk + 1) / blocks;
        for (int64_t r = r0; r < r1; ++r) {
          const T* xr = in + r * h;
          const T* dyr = gy + r * h;
          const float mu_r = mu[r], rs_r = rs[r];
          float* __restrict__ xh = xhat.data();
          float* __restrict__ gxh = gxhat.data();
#pragma omp simd
          for (int64_t j = 0; j < h; ++j) {
            const float dyj = LoadAt(dyr, j);
            xh[j] = (LoadAt(xr, j) - mu_r) * rs_r;
            gxh[j] = dyj * g[j];
            pg[j] += dyj * xh[j];
            pb[j] += dyj;
          }
          const float sum_g = LaneSum(h, [&](int64_t j) { return gxh[j]; });
          const float sum_gx = LaneSum(h, [&](int64_t j) { return gxh[j] * xh[j]; });
          const float mean_g = sum_g / static_cast<float>(h);
          const float mean_gx = sum_gx / static_cast<float>(h);
          T* dxr = gx + r * h;
          for (int64_t j = 0; j < h; ++j) {
            dxr[j] = Store<T>(rs[r] * (gxhat[j] - mean_g - xhat[j] * mean_gx));
          }
        }
      }
    });
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float* pg = partial.data() + blk * 2 * h;
      for (int64_t j = 0; j < h; ++j) {
        dg[j] += pg[j];
        db[j] += pg[h + j];
      }
    }
  }
};

// --------------------------------------------------------------------------- AdamWeightDecay
REGISTER_OP("BertAdamWeightDecayApply")
    .Input("var: resource")
    .Input("m: resource")
    .Input("v: resource")
    .Input("grad: float")
    .Input("lr: float")
    .Input("grad_scale: float")
    .Attr("beta_1: float")
    .Attr("one_minus_beta_1: float")
    .Attr("beta_2: float")
    .Attr("one_minus_beta_2: float")
    .Attr("epsilon: float")
    .Attr("weight_decay_rate: float")
    .Attr("decay: bool")
    .SetIsStateful()  // updates its resources in place
    .SetShapeFn([](InferenceContext* c) { return absl::OkStatus(); });

absl::Status WritableBuffer(OpKernelContext* ctx, Var* var, const TensorShape& shape,
                            float** data) {
  Tensor* t = var->tensor();
  if (t->dtype() != DT_FLOAT || t->shape() != shape) {
    return errors::InvalidArgument("BertAdamWeightDecayApply: variable is ",
                                   DataTypeString(t->dtype()), t->shape().DebugString(),
                                   ", gradient is float", shape.DebugString());
  }
  if (var->copy_on_read_mode.load() || !t->RefCountIsOne()) {
    // The buffer is shared with a read still alive: update a copy (as TensorFlow's ApplyAdam).
    Tensor copy;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(DT_FLOAT, t->shape(), &copy));
    std::memcpy(copy.flat<float>().data(), t->flat<float>().data(), t->TotalBytes());
    *t = copy;
  }
  *data = t->flat<float>().data();
  return absl::OkStatus();
}

class BertAdamWeightDecayApplyOp : public OpKernel {
 public:
  explicit BertAdamWeightDecayApplyOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("beta_1", &beta_1_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("one_minus_beta_1", &one_minus_beta_1_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("beta_2", &beta_2_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("one_minus_beta_2", &one_minus_beta_2_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("weight_decay_rate", &weight_decay_rate_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("decay", &decay_));
  }

  void Compute(OpKernelContext* ctx) override {
    core::RefCountPtr<Var> var, m, v;
    OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &var));
    OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, 1), &m));
    OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, 2), &v));
    const Tensor& grad = ctx->input(3);
    const float lr = ctx->input(4).scalar<float>()();
    const float scale = ctx->input(5).scalar<float>()();
    mutex_lock lock_var(*var->mu());
    mutex_lock lock_m(*m->mu());
    mutex_lock lock_v(*v->mu());
    float *p = nullptr, *pm = nullptr, *pv = nullptr;
    OP_REQUIRES_OK(ctx, WritableBuffer(ctx, var.get(), grad.shape(), &p));
    OP_REQUIRES_OK(ctx, WritableBuffer(ctx, m.get(), grad.shape(), &pm));
    OP_REQUIRES_OK(ctx, WritableBuffer(ctx, v.get(), grad.shape(), &pv));
    const float* g = grad.flat<float>().data();
    const float b1 = beta_1_, c1 = one_minus_beta_1_, b2 = beta_2_, c2 = one_minus_beta_2_;
    const float eps = epsilon_, wd = weight_decay_rate_;
    const bool decay = decay_;
    // The original's step, op by op (modeling/training/optimization.py AdamWeightDecay._update):
    // g' = g * scale (clip_by_global_norm); m' = b1 m + (1 - b1) g'; v' = b2 v + (1 - b2) g'^2;
    // u = m' / (sqrt(v') + eps) [+ wd * p]; p' = p - lr * u.
    // Unswitched on `decay` so that each loop vectorises; `restrict`: the four buffers differ.
    auto step = [&](auto with_decay, int64_t begin, int64_t end) {
      float* __restrict__ pp = p;
      float* __restrict__ mm = pm;
      float* __restrict__ vv = pv;
      const float* __restrict__ gg = g;
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        const float gi = gg[i] * scale;
        const float mi = b1 * mm[i] + c1 * gi;
        const float vi = b2 * vv[i] + c2 * (gi * gi);
        float u = mi / (std::sqrt(vi) + eps);
        if constexpr (decltype(with_decay)::value) u += wd * pp[i];
        pp[i] = pp[i] - lr * u;
        mm[i] = mi;
        vv[i] = vi;
      }
    };
    ParallelFor(ctx, grad.NumElements(), 24, [&](int64_t begin, int64_t end) {
      if (decay) {
        step(std::true_type(), begin, end);
      } else {
        step(std::false_type(), begin, end);
      }
    });
  }

 private:
  float beta_1_, one_minus_beta_1_, beta_2_, one_minus_beta_2_, epsilon_, weight_decay_rate_;
  bool decay_;
};

// --------------------------------------------------------------------------------------- GELU
// The tanh GELU of the intermediate dense layers (modeling/kernels/gelu_dense.py has the math):
//   y  = z * sigmoid(2c (z + a z^3))
//   dz = dy * (s + 2c z s (1 - s) (1 + 3a z^2)),   s = sigmoid(2c (z + a z^3))
// in float32, block by block: z (and dy) read into float32, the sigmoid as Eigen's vectorised
// logistic, one rounding to T on the way out. XLA computes the same formula one kernel each way,
// fast in float32 but converting element by element in bfloat16 (several times slower there), so
// gelu_dense.py uses these kernels for bfloat16 only.
// The constants as gelu_dense.py's float64 ones rounded once to float32.
constexpr float kGeluC2 = static_cast<float>(1.5957691216057308);  // 2 sqrt(2/pi)
constexpr float kGeluA = static_cast<float>(0.044715);
constexpr float kGeluA3 = static_cast<float>(3.0 * 0.044715);
constexpr int64_t kGeluBlock = 1024;               // elements per block (float32 scratch on stack)

REGISTER_OP("BertGelu")
    .Input("z: T")
    .Attr("T: {float, bfloat16} = DT_FLOAT")
    .Output("y: T")
    .SetShapeFn(shape_inference::UnchangedShape);

// dz = dy * gelu'(z) [..., units] and dbias = dz summed over the leading axes [units], in float32
// (of dz as rounded to T): the gradient of the bias added before the GELU, in the same pass.
REGISTER_OP("BertGeluGrad")
    .Input("z: T")
    .Input("dy: T")
    .Attr("T: {float, bfloat16} = DT_FLOAT")
    .Output("dz: T")
    .Output("dbias: float")
    .SetShapeFn([](InferenceContext* c) {
      shape_inference::ShapeHandle shape;
      TF_RETURN_IF_ERROR(c->Merge(c->input(0), c->input(1), &shape));
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(shape, 1, &shape));
      c->set_output(0, shape);
      c->set_output(1, c->Vector(c->Dim(shape, -1)));
      return absl::OkStatus();
    });

// s[i] = sigmoid(2c (z[i] + a z[i]^3)) for the block's m elements.
inline void GeluSigmoid(const float* z, float* s, int64_t m) {
  for (int64_t i = 0; i < m; ++i) s[i] = kGeluC2 * (z[i] + kGeluA * (z[i] * z[i] * z[i]));
  Eigen::Map<Eigen::ArrayXf> a(s, m);
  a = a.logistic();
}

template <typename T>
class BertGeluOp : public OpKernel {
 public:
  explicit BertGeluOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& z = ctx->input(0);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, z.shape(), &y));
    const T* in = z.flat<T>().data();
    T* out = y->flat<T>().data();
    const int64_t n = z.NumElements(), blocks = (n + kGeluBlock - 1) / kGeluBlock;
    ParallelFor(ctx, blocks, kGeluBlock * 8, [&](int64_t begin, int64_t end) {
      alignas(64) float zf[kGeluBlock];
      alignas(64) float s[kGeluBlock];
      for (int64_t b = begin; b < end; ++b) {
        const int64_t lo = b * kGeluBlock, m = std::min(kGeluBlock, n - lo);
        for (int64_t i = 0; i < m; ++i) zf[i] = Load(in[lo + i]);
        GeluSigmoid(zf, s, m);
        for (int64_t i = 0; i < m; ++i) out[lo + i] = Store<T>(zf[i] * s[i]);
      }
    });
  }
};

template <typename T>
class BertGeluGradOp : public OpKernel {
 public:
  explicit BertGeluGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& z = ctx->input(0);
    const Tensor& dy = ctx->input(1);
    OP_REQUIRES(ctx, z.shape() == dy.shape(),
                errors::InvalidArgument("BertGeluGrad: z ", z.shape().DebugString(),
                                        " and dy ", dy.shape().DebugString(), " differ"));
    OP_REQUIRES(ctx, z.dims() >= 1,
                errors::InvalidArgument("BertGeluGrad: z must have at least one axis"));
    const int64_t units = z.dim_size(z.dims() - 1);
    Tensor *dz = nullptr, *dbias = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, z.shape(), &dz));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({units}), &dbias));
    float* db = dbias->flat<float>().data();
    std::fill(db, db + units, 0.0f);
    if (units == 0 || z.NumElements() == 0) return;
    const int64_t rows = z.NumElements() / units;
    const T* zin = z.flat<T>().data();
    const T* g = dy.flat<T>().data();
    T* out = dz->flat<T>().data();
    // Row blocks, each with its own dbias partial sums, added in block order (the result does
    // not depend on the thread count); a row goes through in pieces of up to kGeluBlock.
    const int64_t blocks = std::min<int64_t>(rows, 32);
    std::vector<float> partial(static_cast<size_t>(blocks) * units, 0.0f);
    ParallelFor(ctx, blocks, (rows / blocks + 1) * units * 12, [&](int64_t begin, int64_t end) {
      alignas(64) float zf[kGeluBlock];
      alignas(64) float s[kGeluBlock];
      for (int64_t blk = begin; blk < end; ++blk) {
        float* pb = partial.data() + blk * units;
        const int64_t r0 = rows * blk / blocks, r1 = rows * (blk + 1) / blocks;
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t c0 = 0; c0 < units; c0 += kGeluBlock) {
            const int64_t lo = r * units + c0, m = std::min(kGeluBlock, units - c0);
            for (int64_t i = 0; i < m; ++i) zf[i] = Load(zin[lo + i]);
            GeluSigmoid(zf, s, m);
            for (int64_t i = 0; i < m; ++i) {
              const float zi = zf[i], si = s[i];
              const float d =
                  si + kGeluC2 * zi * si * (1.0f - si) * (1.0f + kGeluA3 * (zi * zi));
              StoreAt(out, lo + i, LoadAt(g, lo + i) * d);
            }
            float* pbc = pb + c0;
            for (int64_t i = 0; i < m; ++i) pbc[i] += LoadAt(out, lo + i);  // dz as rounded to T
          }
        }
      }
    });
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float* pb = partial.data() + blk * units;
      for (int64_t j = 0; j < units; ++j) db[j] += pb[j];
    }
  }
};

#define REGISTER_ACTIVATION_KERNELS(T)                                                       \
  REGISTER_KERNEL_BUILDER(Name("BertDropout").Device(DEVICE_CPU).TypeConstraint<T>("T"),      \
                          BertDropoutOp<T>);                                                 \
  REGISTER_KERNEL_BUILDER(Name("BertDropoutGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),  \
                          BertDropoutGradOp<T>);                                             \
  REGISTER_KERNEL_BUILDER(Name("BertLayerNorm").Device(DEVICE_CPU).TypeConstraint<T>("T"),    \
                          BertLayerNormOp<T>);                                               \
  REGISTER_KERNEL_BUILDER(Name("BertLayerNormGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),\
                          BertLayerNormGradOp<T>);                                           \
  REGISTER_KERNEL_BUILDER(Name("BertGelu").Device(DEVICE_CPU).TypeConstraint<T>("T"),         \
                          BertGeluOp<T>);                                                    \
  REGISTER_KERNEL_BUILDER(Name("BertGeluGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),     \
                          BertGeluGradOp<T>);                                                \
  REGISTER_KERNEL_BUILDER(                                                                   \
      Name("BertAttentionProbs").Device(DEVICE_CPU).TypeConstraint<T>("T"),                  \
      BertAttentionProbsOp<T>);                                                              \
  REGISTER_KERNEL_BUILDER(                                                                   \
      Name("BertAttentionProbsGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),              \
      BertAttentionProbsGradOp<T>);
REGISTER_ACTIVATION_KERNELS(float)
REGISTER_ACTIVATION_KERNELS(bfloat16)
#undef REGISTER_ACTIVATION_KERNELS
REGISTER_KERNEL_BUILDER(Name("BertAdamWeightDecayApply").Device(DEVICE_CPU).HostMemory("lr")
                            .HostMemory("grad_scale"),
                        BertAdamWeightDecayApplyOp);

}  // namespace
}  // namespace tensorflow
