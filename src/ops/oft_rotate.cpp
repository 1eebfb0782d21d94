// oft_rotate: the rotation blocks from the skew parameters (host, f64), the block-diagonal product
// through the "oft_block_matmul" / "oft_block_grad" kernels, and OftRotateNode (see oft_rotate.h).
#include "ops/oft_rotate.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "oft_rotate";

using Mat = std::vector<double>;  // b×b row-major

Mat identity(int64_t b) {
  Mat m(static_cast<size_t>(b * b), 0.0);
  for (int64_t i = 0; i < b; ++i) m[i * b + i] = 1.0;
  return m;
}

// c = op(a)·op(b) with op = transpose when the flag is set.
Mat matmul(const Mat& a, const Mat& bm, int64_t b, bool ta = false, bool tb = false) {
  Mat c(static_cast<size_t>(b * b), 0.0);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t k = 0; k < b; ++k) {
      const double av = ta ? a[k * b + i] : a[i * b + k];
      if (av == 0.0) continue;
      for (int64_t j = 0; j < b; ++j) c[i * b + j] += av * (tb ? bm[j * b + k] : bm[k * b + j]);
    }
  return c;
}

void axpy(double alpha, const Mat& x, Mat& y) {
  for (size_t i = 0; i < y.size(); ++i) y[i] += alpha * x[i];
}

// Q = M − Mᵀ with M's strict upper triangle (row-major) = v.
Mat skew_matrix(const double* v, int64_t b) {
  Mat q(static_cast<size_t>(b * b), 0.0);
  int64_t e = 0;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = i + 1; j < b; ++j, ++e) {
      q[i * b + j] = v[e];
      q[j * b + i] = -v[e];
    }
  return q;
}

// (I + Q)⁻¹ by Gauss–Jordan with partial pivoting (I + Q is invertible for skew Q: its eigenvalues
// are 1 + iλ).
Mat inverse_i_plus(const Mat& q, int64_t b) {
  Mat a = q, inv = identity(b);
  for (int64_t i = 0; i < b; ++i) a[i * b + i] += 1.0;
  for (int64_t c = 0; c < b; ++c) {
    int64_t piv = c;
    for (int64_t r = c + 1; r < b; ++r)
      if (std::fabs(a[r * b + c]) > std::fabs(a[piv * b + c])) piv = r;
    if (piv != c)
      for (int64_t j = 0; j < b; ++j) {
        std::swap(a[c * b + j], a[piv * b + j]);
        std::swap(inv[c * b + j], inv[piv * b + j]);
      }
    const double d = a[c * b + c];
    UNILLM_CHECK(d != 0.0, "[oft_rotate] singular I + Q");
    for (int64_t j = 0; j < b; ++j) {
      a[c * b + j] /= d;
      inv[c * b + j] /= d;
    }
    for (int64_t r = 0; r < b; ++r) {
      const double f = a[r * b + c];
      if (r == c || f == 0.0) continue;
      for (int64_t j = 0; j < b; ++j) {
        a[r * b + j] -= f * a[c * b + j];
        inv[r * b + j] -= f * inv[c * b + j];
      }
    }
  }
  return inv;
}

// U_j = I + Q + … + Q^{m−j} for j = 1..m (U_m = I), so that Q + … + Q^m = Q·U_1.
std::vector<Mat> horner_terms(const Mat& q, int64_t b, int64_t m) {
  std::vector<Mat> u(static_cast<size_t>(m + 1));
  u[m] = identity(b);
  for (int64_t j = m - 1; j >= 1; --j) {
    u[j] = matmul(q, u[j + 1], b);
    axpy(1.0, identity(b), u[j]);
  }
  return u;
}

}  // namespace

std::vector<double> oft_rotation_blocks(const double* skew, int64_t blocks, int64_t b, bool neumann,
                                        int64_t terms) {
  const int64_t n = b * (b - 1) / 2, bb = b * b;
  std::vector<double> out(static_cast<size_t>(blocks * bb));
  for (int64_t j = 0; j < blocks; ++j) {
    const Mat q = skew_matrix(skew + j * n, b);
    Mat r = identity(b);
    if (!neumann) {
      Mat i_minus = identity(b);
      axpy(-1.0, q, i_minus);
      r = matmul(i_minus, inverse_i_plus(q, b), b);
    } else if (terms > 1) {
      // PEFT's order: I + 2Q, then 2Q², 2Q³, … (powers by repeated right multiplication).
      axpy(2.0, q, r);
      Mat power = q;
      for (int64_t i = 2; i < terms; ++i) {
        power = matmul(power, q, b);
        axpy(2.0, power, r);
      }
    }
    std::copy(r.begin(), r.end(), out.begin() + j * bb);
  }
  return out;
}

void oft_rotation_backward(const double* skew, const double* g, int64_t blocks, int64_t b,
                           bool neumann, int64_t terms, double* d_skew) {
  const int64_t n = b * (b - 1) / 2, bb = b * b;
  for (int64_t j = 0; j < blocks; ++j) {
    const Mat q = skew_matrix(skew + j * n, b);
    const Mat gj(g + j * bb, g + (j + 1) * bb);
    Mat dq(static_cast<size_t>(bb), 0.0);
    if (!neumann) {
      // R = (I − Q)·S, S = (I + Q)⁻¹: dR = −(I + R)·dQ·S, so dQ = −(I + R)ᵀ·G·Sᵀ.
      const Mat s = inverse_i_plus(q, b);
      Mat i_minus = identity(b);
      axpy(-1.0, q, i_minus);
      Mat i_plus_r = matmul(i_minus, s, b);
      axpy(1.0, identity(b), i_plus_r);
      dq = matmul(matmul(i_plus_r, gj, b, true, false), s, b, false, true);
      for (double& v : dq) v = -v;
    } else if (terms > 1) {
      // R = I + 2·Q·U_1, U_j = I + Q·U_{j+1}: reverse through the Horner chain.
      const int64_t m = terms - 1;
      const std::vector<Mat> u = horner_terms(q, b, m);
      Mat cur = gj;
      for (double& v : cur) v *= 2.0;
      for (int64_t k = 1; k <= m; ++k) {
        axpy(1.0, matmul(cur, u[k], b, false, true), dq);
        if (k < m) cur = matmul(q, cur, b, true, false);
      }
    }
    int64_t e = 0;
    for (int64_t r = 0; r < b; ++r)
      for (int64_t c = r + 1; c < b; ++c, ++e) d_skew[j * n + e] = dq[r * b + c] - dq[c * b + r];
  }
}

void oft_block_matmul_reference(const OftBlockMatmulArgs& a) {
  for (int64_t m = 0; m < a.m; ++m)
    for (int64_t j = 0; j < a.k / a.b; ++j)
      for (int64_t c = 0; c < a.b; ++c) {
        double s = 0;
        for (int64_t k = 0; k < a.b; ++k) {
          const int64_t ri = a.transpose ? (j * a.b + c) * a.b + k : (j * a.b + k) * a.b + c;
          s += load_scalar(a.x, a.dtype, m * a.k + j * a.b + k) * load_scalar(a.r, a.dtype, ri);
        }
        store_scalar(a.y, a.dtype, m * a.k + j * a.b + c, s);
      }
}

void oft_block_grad_reference(const OftBlockGradArgs& a) {
  for (int64_t j = 0; j < a.k / a.b; ++j)
    for (int64_t k = 0; k < a.b; ++k)
      for (int64_t c = 0; c < a.b; ++c) {
        double s = 0;
        for (int64_t m = 0; m < a.m; ++m)
          s += load_scalar(a.x, a.dtype, m * a.k + j * a.b + k) *
               load_scalar(a.dy, a.dtype, m * a.k + j * a.b + c);
        store_scalar(a.g, a.dtype, (j * a.b + k) * a.b + c, s);
      }
}

namespace {

// y = x · blockdiag(R) (or Rᵀ), x [M, K] contiguous, R [K/b, b, b] in x's dtype.
Tensor block_matmul(const Tensor& x, const Tensor& r, int64_t b, bool transpose) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (y.numel() == 0) return y;
  OftBlockMatmulArgs a{x.raw_data(), r.raw_data(), y.raw_data(), x.size(0), x.size(1), b, transpose,
                       x.dtype()};
  KernelCall<OftBlockMatmulArgs>("oft_block_matmul", x.device(), x.dtype(), a)
      .in(x, &a.x).in(r, &a.r).out(y, &a.y).run(oft_block_matmul_reference);
  return y;
}

class OftRotateNode : public autograd::Node {
 public:
  OftRotateNode(const Tensor& x, Tensor r, std::vector<double> skew, const OftRotation& spec,
                const Shape& x_shape)
      : x_(autograd::SavedTensor::activation(x)), r_(std::move(r)), skew_(std::move(skew)),
        weight_shape_(spec.weight.shape()), weight_dtype_(spec.weight.dtype()),
        weight_device_(spec.weight.device()), first_row_(spec.first_row), b_(spec.block_size),
        neumann_(spec.neumann), terms_(spec.terms), x_shape_(x_shape) {}
  std::string name() const override { return "OftRotateNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override;
  void release_saved() override {
    x_.release();
    r_ = Tensor();
  }

 private:
  autograd::SavedTensor x_;  // [M, K] contiguous
  Tensor r_;                 // [K/b, b, b] in x's dtype
  std::vector<double> skew_;  // the used rows of the weight, f64
  Shape weight_shape_;
  DType weight_dtype_;
  Device weight_device_;
  int64_t first_row_, b_;
  bool neumann_;
  int64_t terms_;
  Shape x_shape_;
};

std::vector<Tensor> OftRotateNode::backward(const std::vector<Tensor>& g) {
  const Tensor& x = x_.get();
  const Tensor dy = g[0].to(x.dtype()).contiguous().view(x.shape());  // [M, K]
  std::vector<Tensor> out(2);
  if (needs_input_grad(0)) out[0] = block_matmul(dy, r_, b_, true).view(x_shape_);
  if (!needs_input_grad(1)) return out;
  const int64_t k = x.size(1), blocks = k / b_, n = b_ * (b_ - 1) / 2;
  Tensor gr = Tensor::empty({blocks, b_, b_}, x.dtype(), x.device());
  OftBlockGradArgs a{x.raw_data(), dy.raw_data(), gr.raw_data(), x.size(0), k, b_, x.dtype()};
  KernelCall<OftBlockGradArgs>("oft_block_grad", x.device(), x.dtype(), a)
      .in(x, &a.x).in(dy, &a.dy).out(gr, &a.g).run(oft_block_grad_reference);
  const Tensor g64 = gr.to(Device{}).to(DType::f64).contiguous();
  Tensor dw = Tensor::zeros(weight_shape_, DType::f64);
  oft_rotation_backward(skew_.data(), g64.data<double>(), blocks, b_, neumann_, terms_,
                        dw.data<double>() + first_row_ * n);
  out[1] = dw.to(weight_dtype_).to(weight_device_);
  return out;
}

void check_inputs(const Tensor& x, const OftRotation& r) {
  check_defined(kOp, "x", x);
  check_defined(kOp, "weight", r.weight);
  check_f32_or_f64(kOp, "x", x);
  check_dtype(kOp, "weight", r.weight, x.dtype());
  const int64_t b = r.block_size;
  if (b < 1 || x.ndim() < 1 || x.size(-1) % b != 0)
    UNILLM_THROW(ShapeError, "[oft_rotate] x has shape ", shape_str(x.shape()),
                 ", not a whole number of blocks of ", b);
  const int64_t blocks = x.size(-1) / b;
  if (r.weight.ndim() != 2 || r.weight.size(1) != b * (b - 1) / 2 || r.first_row < 0 ||
      r.first_row + blocks > r.weight.size(0))
    UNILLM_THROW(ShapeError, "[oft_rotate] weight has shape ", shape_str(r.weight.shape()),
                 ", expected rows [", r.first_row, ", ", r.first_row + blocks, ") of b(b-1)/2 = ",
                 b * (b - 1) / 2, " columns");
  if (r.neumann && r.terms < 0)
    UNILLM_THROW(ConfigError, "[oft_rotate] num_cayley_neumann_terms ", r.terms, " is negative");
}

}  // namespace

Tensor oft_rotate(const Tensor& x, const OftRotation& r) {
  check_inputs(x, r);
  const int64_t k = x.size(-1), b = r.block_size, blocks = k / b, n = b * (b - 1) / 2;
  const Tensor xc = x.contiguous().view({x.numel() / k, k});  // [M, K]
  const Tensor w64 = r.weight.detach().slice(0, r.first_row, r.first_row + blocks)
                         .to(Device{}).to(DType::f64).contiguous();
  std::vector<double> skew(w64.data<double>(), w64.data<double>() + blocks * n);
  const std::vector<double> rot = oft_rotation_blocks(skew.data(), blocks, b, r.neumann, r.terms);
  Tensor rt64 = Tensor::empty({blocks, b, b}, DType::f64);
  std::copy(rot.begin(), rot.end(), rt64.data<double>());
  const Tensor rt = rt64.to(x.dtype()).to(x.device());
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    y = block_matmul(xc, rt, b, false).view(x.shape());
  }
  if (autograd::needs_grad({x, r.weight})) {
    auto node = std::make_shared<OftRotateNode>(xc, rt, std::move(skew), r, x.shape());
    autograd::record(node, {x, r.weight}, {&y});
  }
  return y;
}

}  // namespace unillm::ops
