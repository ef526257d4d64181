// AddressSanitizer driver (docs/TESTING.md): the bf16 and fp32 oneDNN conv engines on small images with
// strides past the input, forward and both gradients, repeated, checked
// against a direct convolution in double.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
#include "kernels/compute_pool.h"
#include "kernels/cpu/dnnl_engines.h"
#include "kernels/cpu/nn_kernels.h"
using namespace sf;
int main(int argc, char** argv) {
  const int cases = argc > 1 ? atoi(argv[1]) : 300;
  std::mt19937 rng(7);
  auto R = [&](int a, int b) { return int64_t(std::uniform_int_distribution<int>(a, b)(rng)); };
  ComputePool pool(2);
  int bad = 0;
  for (nn::Precision p : {nn::Precision::kBf16, nn::Precision::kFp32}) {
    auto eng = nn::NewDnnlConvEngine(p);
    for (int c = 0; c < cases; ++c) {
      nn::Window w; w.n = R(1, 3); w.h = R(1, 6); w.w = R(1, 6); w.c = R(1, 4); w.kh = R(1, 4); w.kw = R(1, 4);
      int64_t oc = R(1, 4); w.sh = R(1, 12); w.sw = R(0, 3) == 0 ? R(13, 70000) : R(1, 12);
      bool same = R(0, 1);
      if (!same && (w.h < w.kh || w.w < w.kw)) continue;
      const int64_t sh = w.sh, sw = w.sw;
      if (!nn::ComputeWindow(same, &w).ok()) { std::printf("window refused\n"); return 1; }
      const int64_t nx = w.n*w.h*w.w*w.c, nf = w.kh*w.kw*w.c*oc, ny = w.n*w.oh*w.ow*oc;
      std::vector<float> x(nx), f(nf), dy(ny);
      std::uniform_real_distribution<float> U(-1, 1);
      for (auto& v : x) v = std::round(U(rng) * 64) / 64;
      for (auto& v : f) v = std::round(U(rng) * 64) / 64;
      for (auto& v : dy) v = std::round(U(rng) * 64) / 64;
      // direct reference with the unclamped strides
      const int64_t pt = w.pad_top, pl = w.pad_left;
      std::vector<double> y_r(ny), dx_r(nx), df_r(nf);
      for (int64_t b = 0; b < w.n; ++b) for (int64_t oy = 0; oy < w.oh; ++oy) for (int64_t ox = 0; ox < w.ow; ++ox)
        for (int64_t ky = 0; ky < w.kh; ++ky) for (int64_t kx = 0; kx < w.kw; ++kx) {
          const int64_t iy = oy * sh + ky - pt, ix = ox * sw + kx - pl;
          if (iy < 0 || iy >= w.h || ix < 0 || ix >= w.w) continue;
          for (int64_t ci = 0; ci < w.c; ++ci) for (int64_t o = 0; o < oc; ++o) {
            const int64_t xi = ((b*w.h+iy)*w.w+ix)*w.c+ci, fi = ((ky*w.kw+kx)*w.c+ci)*oc+o, yi = ((b*w.oh+oy)*w.ow+ox)*oc+o;
            y_r[yi] += double(x[xi])*f[fi]; dx_r[xi] += double(dy[yi])*f[fi]; df_r[fi] += double(x[xi])*dy[yi];
          }
        }
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<float> y(ny, NAN), dx(nx, NAN), df(nf, NAN);
        bool ok = eng->Forward(&pool, w, oc, x.data(), f.data(), {}, y.data()).ok() &&
                  eng->BackwardInput(&pool, w, oc, f.data(), dy.data(), dx.data()).ok() &&
                  eng->BackwardFilter(&pool, w, oc, x.data(), dy.data(), df.data()).ok();
        auto err = [](const std::vector<float>& g, const std::vector<double>& r) {
          double num = 0, den = 0; for (size_t i = 0; i < g.size(); ++i) { num += (g[i]-r[i])*(g[i]-r[i]); den += r[i]*r[i]; }
          return den == 0 ? std::sqrt(num) : std::sqrt(num/den); };
        const double e = std::max({err(y, y_r), err(dx, dx_r), err(df, df_r)});
        if (!ok || !(e < 1e-2)) { ++bad; std::printf("BAD %s n%ld h%ld w%ld c%ld k%ldx%ld oc%ld s%ld,%ld %s err %g\n", p == nn::Precision::kBf16 ? "bf16" : "fp32", w.n, w.h, w.w, w.c, w.kh, w.kw, oc, sh, sw, same ? "SAME" : "VALID", e); }
      }
    }
  }
  std::printf("done, %d bad\n", bad);
  return bad != 0;
}
