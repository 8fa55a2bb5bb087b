// compare_kernels — sprig's training kernels against the user's alternatives, timed in one
// process: dense OpenBLAS cblas_sgemm on the full dense matrix and Eigen 3.4
// SparseMatrix<float, RowMajor> * dense.
//
//   fwd  Y  = W X       sprig::spmm          | sgemm(W, X)      | eigen W * X
//   dx   dX = W^T dY    spmm_transposed:     | sgemm(W^T, dY)   | eigen W^T * dY
//                       spmm on the cached W^T
//                       with W's current values
//                       (refresh included)
//   dw   G  = dY X^T    sprig::sddmm (live   | sgemm(dY, X^T)   | (none: Eigen has no SDDMM)
//                       slots only)
//
// With --precision bf16 each configuration also times the bf16 kernels (bf16_spmm,
// bf16_spmm_transposed, bf16_sddmm on the fastest path here) as implementation "bf16": the
// same W (its values rounded into a bf16 shadow, refreshed outside the timing, as an optimizer
// step would), X and dY rounded to bf16, Y and dX written in bf16, dW in float. The summary
// gives sprig fp32's time over bf16's per configuration: the median of the per-rep ratios
// (each rep times both back to back) and their range.
//
// With --block RxC[,RxC...] each configuration also times the block-sparse kernels
// (block_spmm, block_spmm_transposed, block_sddmm) on a BlockPaddedCSR at block density =
// the density, as implementation "RxC", beside the others in the same alternation. With
// --precision bf16 as well, each block shape also times the bf16 block kernels
// (bf16_block_spmm, bf16_block_spmm_transposed, bf16_block_sddmm: bf16 shadow of W, X and dY
// rounded to bf16, float outputs) as implementation "RxC/bf16", and the summary gives the fp32
// block kernel's time over the bf16 one's: the median of the per-rep ratios and their range.
// --bf16-block-path portable (widen in registers), avx512_bf16 or amx times that path, where it
// runs the kernel, instead of the fastest one here (amx, else avx512_bf16, where they run).
//
// Every configuration times the implementations alternately, rep by rep, and reports the
// median, so slow drift of the machine hits all of them alike. GFLOP/s counts useful work:
// 2 * nnz * B for sparse implementations, 2 * M * K * B for dense sgemm.
#include <sprig/kernels/bf16_block_kernels.hpp>
#include <sprig/kernels/bf16_sddmm.hpp>
#include <sprig/kernels/bf16_spmm.hpp>
#include <sprig/kernels/block_sddmm.hpp>
#include <sprig/kernels/block_spmm.hpp>
#include <sprig/kernels/sddmm.hpp>
#include <sprig/kernels/spmm.hpp>
#include <sprig/kernels/spmm_transposed.hpp>
#include <sprig/kernels/transpose.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "block_shapes.hpp"
#include <Eigen/Core>
#include <Eigen/SparseCore>
#include <cblas.h>

#if SPRIG_HAS_OPENMP
#  include <omp.h>
#endif

extern "C" {
// OpenBLAS extensions (declared in OpenBLAS's cblas.h; repeated so a reference cblas.h works).
void openblas_set_num_threads(int);
int openblas_get_parallel(void);
}

namespace {

using Clock = std::chrono::steady_clock;
using SpMat = Eigen::SparseMatrix<float, Eigen::RowMajor, std::int32_t>;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;

struct Shape {
  std::int64_t M, K;
};

struct Row {
  std::string kernel;
  std::int64_t M, K;
  double density;
  std::int64_t B;
  int threads;
  std::string impl;
  double median_ms;
  double gflops;
};

// Wall clock by default. --clock cpu uses the process CPU time instead: on a shared, loaded
// machine it leaves out the time the process waited for a core, and with one thread (BLAS,
// Eigen and sprig all run on the calling thread then) it is the compute time.
bool g_cpu_clock = false;

double now_ms() {
  if (g_cpu_clock) {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) * 1e3 + double(t.tv_nsec) * 1e-6;
  }
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

template <class F>
double time_ms(F&& f) {
  const double t0 = now_ms();
  f();
  return now_ms() - t0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void set_threads(int t) {
#if SPRIG_HAS_OPENMP
  omp_set_num_threads(t);
#endif
  openblas_set_num_threads(t);
  Eigen::setNbThreads(t);
}

void fill_random(sprig::Matrix<float>& m, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::int64_t i = 0; i < m.rows(); ++i)
    for (std::int64_t j = 0; j < m.cols(); ++j) m(i, j) = u(g);
}

// Largest |a - b| relative to the largest |b| (b the dense result).
double rel_diff(const sprig::Matrix<float>& a, const sprig::Matrix<float>& b) {
  double d = 0, s = 0;
  for (std::int64_t i = 0; i < a.rows(); ++i)
    for (std::int64_t j = 0; j < a.cols(); ++j) {
      d = std::max(d, std::abs(double(a(i, j)) - double(b(i, j))));
      s = std::max(s, std::abs(double(b(i, j))));
    }
  return s > 0 ? d / s : d;
}

using sprig_bench::with_block_shape;

// The bf16 block kernels' path: the one --bf16-block-path names where it runs kernel k, else
// the fastest here.
std::optional<sprig::Bf16BlockPath> g_bf16_block_path;
template <int R, int C>
sprig::Bf16BlockPath bf16_block_path_for(sprig::Bf16BlockKernel k) {
  if (g_bf16_block_path && sprig::bf16_block_unavailable_reason<R, C>(k, *g_bf16_block_path).empty())
    return *g_bf16_block_path;
  return sprig::bf16_block_path<R, C>(k);
}

double geomean(const std::vector<double>& v) {
  if (v.empty()) return std::nan("");
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

// One block shape's matrix, workspaces and outputs for a configuration; check_* compare its
// results with dense sgemm on the same (block) matrix and warn past 1e-4.
struct BlockCase {
  std::string name;
  std::int64_t entries = 0;  // live blocks x R x C: the useful multiply-adds per batch column
  virtual ~BlockCase() = default;
  virtual void prepare(std::int64_t B) = 0;
  virtual void fwd(const sprig::Matrix<float>& X) = 0;
  virtual void dx(const sprig::Matrix<float>& dY) = 0;
  virtual void dw(const sprig::Matrix<float>& dY, const sprig::Matrix<float>& X) = 0;
  virtual void check_fwd(const sprig::Matrix<float>& X) = 0;
  virtual void check_dx(const sprig::Matrix<float>& dY) = 0;
  virtual void check_dw(const sprig::Matrix<float>& dY, const sprig::Matrix<float>& X) = 0;
  // The bf16 block kernels on bf16 operands (the shadow refreshed at construction).
  virtual void bf16_fwd(sprig::ConstMatrixView<sprig::bfloat16> X) = 0;
  virtual void bf16_dx(sprig::ConstMatrixView<sprig::bfloat16> dY) = 0;
  virtual void bf16_dw(sprig::ConstMatrixView<sprig::bfloat16> dY, sprig::ConstMatrixView<sprig::bfloat16> X) = 0;
};

template <int R, int C>
struct BlockCaseOf final : BlockCase {
  sprig::BlockPaddedCSR<float, std::int32_t, R, C> W;
  sprig::Matrix<float> Wd;
  sprig::TransposeCache<float, std::int32_t> cache, cache_b;
  sprig::KernelWorkspace<float> ws, ws_t, ws_b, ws_bt;
  sprig::Matrix<float> Y, dX, Yb, dXb;
  std::vector<float> grad, grad_b;
  std::vector<sprig::bfloat16> shadow;

  BlockCaseOf(std::int64_t M, std::int64_t K, double density, std::uint64_t seed)
      : W(sprig::BlockPaddedCSR<float, std::int32_t, R, C>::random_density(M, K, density, seed)), Wd(W.to_dense()) {
    name = std::to_string(R) + "x" + std::to_string(C);
    entries = W.nnz_blocks() * R * C;
    grad.assign(static_cast<std::size_t>(W.storage_size() * R * C), 0.0f);
    grad_b = grad;
    shadow.resize(W.values().size());
    sprig::refresh_bf16_values(W, std::span<sprig::bfloat16>(shadow));
  }
  void prepare(std::int64_t B) override {
    Y = sprig::Matrix<float>(W.rows(), B);
    dX = sprig::Matrix<float>(W.cols(), B);
    Yb = sprig::Matrix<float>(W.rows(), B);
    dXb = sprig::Matrix<float>(W.cols(), B);
  }
  void bf16_fwd(sprig::ConstMatrixView<sprig::bfloat16> X) override {
    sprig::bf16_block_spmm(W, std::span<const sprig::bfloat16>(shadow), X, Yb.view(), ws_b, sprig::Update::overwrite,
                           bf16_block_path_for<R, C>(sprig::Bf16BlockKernel::spmm));
  }
  void bf16_dx(sprig::ConstMatrixView<sprig::bfloat16> dY) override {
    sprig::bf16_block_spmm_transposed(W, std::span<const sprig::bfloat16>(shadow), cache_b, dY, dXb.view(), ws_bt,
                                      sprig::Update::overwrite,
                                      bf16_block_path_for<R, C>(sprig::Bf16BlockKernel::spmm_transposed));
  }
  void bf16_dw(sprig::ConstMatrixView<sprig::bfloat16> dY, sprig::ConstMatrixView<sprig::bfloat16> X) override {
    sprig::bf16_block_sddmm(W, dY, X, std::span<float>(grad_b), ws_b, sprig::Update::overwrite,
                            bf16_block_path_for<R, C>(sprig::Bf16BlockKernel::sddmm));
  }
  void fwd(const sprig::Matrix<float>& X) override { sprig::block_spmm(W, X, Y.view(), ws); }
  void dx(const sprig::Matrix<float>& dY) override { sprig::block_spmm_transposed(W, cache, dY, dX.view(), ws_t); }
  void dw(const sprig::Matrix<float>& dY, const sprig::Matrix<float>& X) override {
    sprig::block_sddmm(W, dY, X, std::span<float>(grad), ws);
  }
  void check_fwd(const sprig::Matrix<float>& X) override {
    sprig::Matrix<float> ref(W.rows(), X.cols());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(W.rows()), int(X.cols()), int(W.cols()), 1.0f, Wd.data(),
                int(W.cols()), X.data(), int(X.cols()), 0.0f, ref.data(), int(X.cols()));
    fwd(X);
    if (const double e = rel_diff(Y, ref); e > 1e-4)
      std::fprintf(stderr, "warning: %s fwd differs by %g\n", name.c_str(), e);
  }
  void check_dx(const sprig::Matrix<float>& dY) override {
    sprig::Matrix<float> ref(W.cols(), dY.cols());
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(W.cols()), int(dY.cols()), int(W.rows()), 1.0f, Wd.data(),
                int(W.cols()), dY.data(), int(dY.cols()), 0.0f, ref.data(), int(dY.cols()));
    dx(dY);
    if (const double e = rel_diff(dX, ref); e > 1e-4)
      std::fprintf(stderr, "warning: %s dx differs by %g\n", name.c_str(), e);
  }
  void check_dw(const sprig::Matrix<float>& dY, const sprig::Matrix<float>& X) override {
    sprig::Matrix<float> G(W.rows(), W.cols());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(W.rows()), int(W.cols()), int(X.cols()), 1.0f, dY.data(),
                int(dY.cols()), X.data(), int(X.cols()), 0.0f, G.data(), int(W.cols()));
    dw(dY, X);
    double e = 0, s = 0;
    W.for_each_block([&](std::int64_t i, std::int64_t j, std::int64_t slot, const float*) {
      for (int r = 0; r < R && i * R + r < W.rows(); ++r)
        for (int c = 0; c < C && j * C + c < W.cols(); ++c) {
          e = std::max(e, std::abs(double(grad[slot * R * C + r * C + c]) - double(G(i * R + r, j * C + c))));
          s = std::max(s, std::abs(double(G(i * R + r, j * C + c))));
        }
    });
    if (s > 0 && e > 1e-4 * s) std::fprintf(stderr, "warning: %s dw differs by %g\n", name.c_str(), e / s);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sprig kernels vs dense OpenBLAS sgemm and Eigen sparse * dense, same process"};
  bool csv = false, quick = false, no_eigen = false;
  int reps = 7;
  std::vector<std::string> kernels{"fwd", "dx", "dw"};
  std::vector<int> threads{1, 2};
  std::vector<std::int64_t> batches{32, 128, 512};
  std::vector<double> densities{0.10, 0.05, 0.02};
  std::vector<std::string> shape_args{"1024x1024", "4096x4096", "2560x640", "640x2560"};
  app.add_flag("--csv", csv, "print CSV: kernel,M,K,density,B,threads,impl,median_ms,gflops");
  app.add_flag("--quick", quick, "small grid (1024x1024 and 2560x640, B 32 and 128, 3 reps)");
  app.add_flag("--no-eigen", no_eigen, "skip Eigen (it is the slowest part of a full run)");
  std::string clock = "wall";
  app.add_option("--clock", clock, "wall (default) or cpu: process CPU time, for 1-thread runs on a loaded machine")
      ->check(CLI::IsMember({"wall", "cpu"}));
  app.add_option("--reps", reps, "timed repetitions per implementation (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--kernels", kernels, "subset of fwd,dx,dw")->delimiter(',')->check(CLI::IsMember({"fwd", "dx", "dw"}));
  app.add_option("--threads", threads, "thread counts, e.g. 1,2")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--batch", batches, "batch widths B")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--density", densities, "densities")->delimiter(',')->check(CLI::Range(1e-6, 1.0));
  app.add_option("--shapes", shape_args, "MxK shapes, e.g. 1024x1024,2560x640")->delimiter(',');
  std::vector<std::string> block_shapes;
  app.add_option("--block", block_shapes,
                 "also time block-sparse kernels with these RxC blocks (1x4,4x1,4x4,8x1,8x8,16x1)")
      ->delimiter(',')
      ->check(CLI::IsMember({"1x4", "4x1", "4x4", "8x1", "8x8", "16x1"}));
  std::string precision = "fp32";
  app.add_option("--precision", precision, "fp32 (default), or bf16: also time the bf16 kernels beside fp32")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  std::string bf16_block_path = "fastest";
  app.add_option("--bf16-block-path", bf16_block_path,
                 "fastest (default), portable, avx512_bf16 or amx: the path of the bf16 block kernels where it runs "
                 "them (--block with --precision bf16)")
      ->check(CLI::IsMember({"fastest", "portable", "avx512_bf16", "amx"}));
  CLI11_PARSE(app, argc, argv);
  if (bf16_block_path == "portable") g_bf16_block_path = sprig::Bf16BlockPath::portable;
  if (bf16_block_path == "avx512_bf16") g_bf16_block_path = sprig::Bf16BlockPath::avx512_bf16;
  if (bf16_block_path == "amx") g_bf16_block_path = sprig::Bf16BlockPath::amx;
  const bool bf16 = precision == "bf16";
  if (bf16) std::fprintf(stderr, "bf16 kernels: bf16_sddmm path %s\n", sprig::path_name(sprig::bf16_sddmm_path()));
  if (bf16 && !block_shapes.empty())
    std::fprintf(stderr, "bf16 block kernels: %s path (8x8 fastest here: %s)\n", bf16_block_path.c_str(),
                 sprig::path_name(sprig::bf16_block_path<8, 8>(sprig::Bf16BlockKernel::spmm)));
  std::fprintf(stderr, "sprig kernels: %s\n", sprig::kernel_arch());
  g_cpu_clock = clock == "cpu";
  if (g_cpu_clock && std::any_of(threads.begin(), threads.end(), [](int t) { return t > 1; }))
    std::fprintf(stderr,
                 "warning: --clock cpu sums the CPU time of all threads: multi-thread times are not wall times\n");
  if (quick) {
    shape_args = {"1024x1024", "2560x640"};
    batches = {32, 128};
    reps = std::min(reps, 3);
  }
  std::vector<Shape> shapes;
  for (const auto& s : shape_args) {
    Shape sh{};
    char x = 0;
    std::istringstream in(s);
    if (!(in >> sh.M >> x >> sh.K) || x != 'x' || sh.M <= 0 || sh.K <= 0) {
      std::fprintf(stderr, "bad shape '%s' (want MxK)\n", s.c_str());
      return 2;
    }
    shapes.push_back(sh);
  }
  // 2 = OpenMP build: BLAS and sprig share one OpenMP runtime. The pthreads build's idle
  // workers spin after every call and steal the cores sprig's threads need.
  if (openblas_get_parallel() != 2)
    std::fprintf(stderr, "warning: OpenBLAS is not the OpenMP build (openblas_get_parallel() = %d)\n",
                 openblas_get_parallel());
  // A machine-wide OPENBLAS_CORETYPE (Haswell, for older OpenBLAS builds) overrides OpenBLAS's
  // kernel choice: on a Zen 5 it halves the dense rows' rate, and with it every ratio.
  if (const char* coretype = std::getenv("OPENBLAS_CORETYPE"))
    std::fprintf(stderr, "note: OPENBLAS_CORETYPE=%s: OpenBLAS runs that kernel family, not its choice for this CPU\n",
                 coretype);
#if !SPRIG_HAS_OPENMP
  std::fprintf(stderr, "warning: built without OpenMP: sprig runs on one thread\n");
#endif

  std::vector<Row> rows;
  // Per-rep ratios sprig fp32 time / bf16 time, by (kernel, M, K, density, B, threads).
  std::map<std::tuple<std::string, std::int64_t, std::int64_t, double, std::int64_t, int>, std::vector<double>>
      bf16_ratios;
  // Per-rep ratios fp32 block time / bf16 block time, by (kernel, RxC, M, K, density, B, threads).
  std::map<std::tuple<std::string, std::string, std::int64_t, std::int64_t, double, std::int64_t, int>,
           std::vector<double>>
      block_bf16_ratios;
  auto add = [&](const char* kernel, const Shape& sh, double density, std::int64_t B, int t, const char* impl,
                 double ms, double flops) {
    rows.push_back({kernel, sh.M, sh.K, density, B, t, impl, ms, flops / (ms * 1e6)});
    if (csv) {
      const Row& r = rows.back();
      std::printf("%s,%lld,%lld,%.2f,%lld,%d,%s,%.4f,%.2f\n", r.kernel.c_str(), (long long)r.M, (long long)r.K,
                  r.density, (long long)r.B, r.threads, r.impl.c_str(), r.median_ms, r.gflops);
      std::fflush(stdout);
    }
  };
  auto want = [&](const char* k) { return std::find(kernels.begin(), kernels.end(), k) != kernels.end(); };
  if (csv) std::printf("kernel,M,K,density,B,threads,impl,median_ms,gflops\n");

  std::uint64_t seed = 1;
  for (const Shape& sh : shapes)
    for (double density : densities) {
      const std::int64_t M = sh.M, K = sh.K;
      auto W = sprig::PaddedCSR<float, std::int32_t>::random_density(M, K, density, seed++);
      const std::int64_t nnz = W.nnz();
      const sprig::Matrix<float> Wd = W.to_dense();
      SpMat Ws(M, K);
      {
        std::vector<Eigen::Triplet<float, std::int32_t>> trip;
        trip.reserve(static_cast<std::size_t>(nnz));
        W.for_each_live([&](std::int64_t i, std::int64_t c, float v, std::int64_t) {
          trip.emplace_back(static_cast<std::int32_t>(i), static_cast<std::int32_t>(c), v);
        });
        Ws.setFromTriplets(trip.begin(), trip.end());
        Ws.makeCompressed();
      }
      sprig::TransposeCache<float, std::int32_t> cache, cache_b;
      cache.get(W);  // the topology is fixed: dx times the value refresh, never a rebuild
      cache_b.sync_topology(W);
      std::vector<sprig::bfloat16> shadow(static_cast<std::size_t>(W.storage_size()));
      sprig::refresh_bf16_values(W, std::span<sprig::bfloat16>(shadow));
      const std::span<const sprig::bfloat16> wb(shadow);
      std::vector<std::unique_ptr<BlockCase>> blocks;
      for (const std::string& name : block_shapes)
        with_block_shape(name, [&]<int R, int C>() {
          blocks.push_back(std::make_unique<BlockCaseOf<R, C>>(M, K, density, seed++));
        });
      for (std::int64_t B : batches) {
        sprig::Matrix<float> X(K, B), dY(M, B), Y(M, B), Yd(M, B), dX(K, B), dXd(K, B), Gd(M, K);
        fill_random(X, seed++);
        fill_random(dY, seed++);
        std::vector<float> grad(static_cast<std::size_t>(W.storage_size())),
            grad_b(static_cast<std::size_t>(W.storage_size()));
        // bf16 operands: X and dY rounded, Y and dX bf16 (tight K x B / M x B arrays).
        std::vector<sprig::bfloat16> Xb(static_cast<std::size_t>(K * B)), dYb(static_cast<std::size_t>(M * B)),
            Yb(static_cast<std::size_t>(M * B)), dXb(static_cast<std::size_t>(K * B));
        if (bf16) {
          sprig::to_bfloat16(std::span<const float>(X.data(), Xb.size()), std::span<sprig::bfloat16>(Xb));
          sprig::to_bfloat16(std::span<const float>(dY.data(), dYb.size()), std::span<sprig::bfloat16>(dYb));
        }
        const sprig::ConstMatrixView<sprig::bfloat16> Xbv(Xb.data(), K, B), dYbv(dYb.data(), M, B);
        const double sparse_flops = 2.0 * double(nnz) * double(B),
                     dense_flops = 2.0 * double(M) * double(K) * double(B);
        for (int t : threads) {
          set_threads(t);
          sprig::KernelWorkspace<float> ws, ws_t, ws_b, ws_bt;
          // Block-sparse implementations of this kernel: (name, function, useful flops).
          struct Extra {
            std::string name;
            std::function<void()> fn;
            double flops;
          };
          auto run = [&](const char* kernel, auto&& sprig_fn, auto&& dense_fn, auto&& eigen_fn, bool has_eigen,
                         const std::vector<Extra>& extras = {}) {
            std::vector<double> ts, td, te;
            std::vector<std::vector<double>> tx(extras.size());
            sprig_fn();  // warm-up: caches, workspaces, OpenMP and BLAS thread pools
            dense_fn();
            if (has_eigen) eigen_fn();
            for (const Extra& x : extras) x.fn();
            for (int r = 0; r < reps; ++r) {
              ts.push_back(time_ms(sprig_fn));
              td.push_back(time_ms(dense_fn));
              if (has_eigen) te.push_back(time_ms(eigen_fn));
              for (std::size_t q = 0; q < extras.size(); ++q) tx[q].push_back(time_ms(extras[q].fn));
            }
            for (std::size_t q = 0; q < extras.size(); ++q) {  // "RxC/bf16" against "RxC", rep by rep
              const std::string& nm = extras[q].name;
              if (nm.size() <= 5 || nm.substr(nm.size() - 5) != "/bf16") continue;
              for (std::size_t f = 0; f < extras.size(); ++f)
                if (extras[f].name == nm.substr(0, nm.size() - 5))
                  for (int r = 0; r < reps; ++r)
                    block_bf16_ratios[{kernel, extras[f].name, sh.M, sh.K, density, B, t}].push_back(
                        tx[f][std::size_t(r)] / tx[q][std::size_t(r)]);
            }
            for (std::size_t q = 0; q < extras.size(); ++q)
              if (extras[q].name == "bf16")
                for (int r = 0; r < reps; ++r)
                  bf16_ratios[{kernel, sh.M, sh.K, density, B, t}].push_back(ts[std::size_t(r)] /
                                                                             tx[q][std::size_t(r)]);
            add(kernel, sh, density, B, t, "sprig", median(ts), sparse_flops);
            add(kernel, sh, density, B, t, "openblas", median(td), dense_flops);
            if (has_eigen) add(kernel, sh, density, B, t, "eigen", median(te), sparse_flops);
            for (std::size_t q = 0; q < extras.size(); ++q)
              add(kernel, sh, density, B, t, extras[q].name.c_str(), median(tx[q]), extras[q].flops);
          };
          std::vector<Extra> block_fwd, block_dx, block_dw;
          for (auto& b : blocks) {
            block_fwd.push_back({b->name, [&b, &X] { b->fwd(X); }, 2.0 * double(b->entries) * double(B)});
            block_dx.push_back({b->name, [&b, &dY] { b->dx(dY); }, 2.0 * double(b->entries) * double(B)});
            block_dw.push_back({b->name, [&b, &dY, &X] { b->dw(dY, X); }, 2.0 * double(b->entries) * double(B)});
            b->prepare(B);
            if (bf16) {
              const double useful = 2.0 * double(b->entries) * double(B);
              block_fwd.push_back({b->name + "/bf16", [&b, &Xbv] { b->bf16_fwd(Xbv); }, useful});
              block_dx.push_back({b->name + "/bf16", [&b, &dYbv] { b->bf16_dx(dYbv); }, useful});
              block_dw.push_back({b->name + "/bf16", [&b, &dYbv, &Xbv] { b->bf16_dw(dYbv, Xbv); }, useful});
            }
          }
          if (bf16) {
            const double useful = 2.0 * double(nnz) * double(B);
            block_fwd.push_back(
                {"bf16",
                 [&] { sprig::bf16_spmm(W, wb, Xbv, sprig::MatrixView<sprig::bfloat16>(Yb.data(), M, B), ws_b); },
                 useful});
            block_dx.push_back({"bf16",
                                [&] {
                                  sprig::bf16_spmm_transposed(W, wb, cache_b, dYbv,
                                                              sprig::MatrixView<sprig::bfloat16>(dXb.data(), K, B),
                                                              ws_bt);
                                },
                                useful});
            block_dw.push_back(
                {"bf16", [&] { sprig::bf16_sddmm(W, dYbv, Xbv, std::span<float>(grad_b), ws_b); }, useful});
          }
          if (want("fwd")) {
            run(
                "fwd", [&] { sprig::spmm(W, X, Y.view(), ws); },
                [&] {
                  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(B), int(K), 1.0f, Wd.data(),
                              int(K), X.data(), int(B), 0.0f, Yd.data(), int(B));
                },
                [&] {
                  MapMat Ye(Y.data(), M, B);
                  Ye.noalias() = Ws * MapMat(X.data(), K, B);
                },
                !no_eigen, block_fwd);
            for (auto& b : blocks) b->check_fwd(X);
            sprig::spmm(W, X, Y.view(), ws);
            if (const double e = rel_diff(Y, Yd); e > 1e-4)
              std::fprintf(stderr, "warning: fwd differs from sgemm by %g\n", e);
            if (bf16) {  // bf16 inputs and output: within a few bf16 roundings of sgemm's
              sprig::Matrix<float> Yw(M, B);
              sprig::to_float(std::span<const sprig::bfloat16>(Yb), std::span<float>(Yw.data(), Yb.size()));
              if (const double e = rel_diff(Yw, Yd); e > 3e-2)
                std::fprintf(stderr, "warning: bf16 fwd differs from sgemm by %g\n", e);
            }
          }
          if (want("dx")) {
            run(
                "dx", [&] { sprig::spmm_transposed(W, cache, dY, dX.view(), ws_t); },
                [&] {
                  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(K), int(B), int(M), 1.0f, Wd.data(), int(K),
                              dY.data(), int(B), 0.0f, dXd.data(), int(B));
                },
                [&] {
                  MapMat dXe(dX.data(), K, B);
                  dXe.noalias() = Ws.transpose() * MapMat(dY.data(), M, B);
                },
                !no_eigen, block_dx);
            for (auto& b : blocks) b->check_dx(dY);
            sprig::spmm_transposed(W, cache, dY, dX.view(), ws_t);
            if (const double e = rel_diff(dX, dXd); e > 1e-4)
              std::fprintf(stderr, "warning: dx differs from sgemm by %g\n", e);
            if (bf16) {
              sprig::Matrix<float> dXw(K, B);
              sprig::to_float(std::span<const sprig::bfloat16>(dXb), std::span<float>(dXw.data(), dXb.size()));
              if (const double e = rel_diff(dXw, dXd); e > 3e-2)
                std::fprintf(stderr, "warning: bf16 dx differs from sgemm by %g\n", e);
            }
          }
          if (want("dw")) {
            run(
                "dw", [&] { sprig::sddmm(W, dY, X, std::span<float>(grad), ws); },
                [&] {
                  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(K), int(B), 1.0f, dY.data(), int(B),
                              X.data(), int(B), 0.0f, Gd.data(), int(K));
                },
                [] {}, false, block_dw);
            for (auto& b : blocks) b->check_dw(dY, X);
            double e = 0, s = 0;
            W.for_each_live([&](std::int64_t i, std::int64_t c, float, std::int64_t slot) {
              e = std::max(e, std::abs(double(grad[slot]) - double(Gd(i, c))));
              s = std::max(s, std::abs(double(Gd(i, c))));
            });
            if (e > 1e-4 * s) std::fprintf(stderr, "warning: dw differs from sgemm by %g\n", e / s);
            if (bf16) {
              double eb = 0;
              W.for_each_live([&](std::int64_t i, std::int64_t c, float, std::int64_t slot) {
                eb = std::max(eb, std::abs(double(grad_b[slot]) - double(Gd(i, c))));
              });
              if (eb > 3e-2 * s) std::fprintf(stderr, "warning: bf16 dw differs from sgemm by %g\n", eb / s);
            }
          }
        }
      }
    }

  if (csv) return 0;

  // Readable table: one line per (kernel, shape, density, B, threads).
  std::map<std::tuple<std::string, std::int64_t, std::int64_t, double, std::int64_t, int>, std::map<std::string, Row>>
      table;
  for (const Row& r : rows) table[{r.kernel, r.M, r.K, r.density, r.B, r.threads}][r.impl] = r;
  std::printf("%-4s %5s %5s %5s %4s %2s | %9s %7s | %9s %7s | %9s %7s | %8s %8s\n", "kern", "M", "K", "dens", "B", "t",
              "sprig ms", "GF/s", "blas ms", "GF/s", "eigen ms", "GF/s", "blas/spr", "eig/spr");
  // ratio[density][kernel][threads]; block_ratios[RxC][...] likewise, with GFLOP/s of useful
  // work (block, and OpenBLAS's in the same configurations)
  std::map<double, std::map<std::string, std::map<int, std::vector<double>>>> ratios, eigen_ratios;
  std::map<std::string, std::map<double, std::map<std::string, std::map<int, std::vector<double>>>>> block_ratios,
      block_gflops, blas_gflops;
  std::map<std::string, std::map<double, std::vector<double>>> scaling;  // 4096x4096 t1/t2 per kernel, density
  for (const auto& [key, impls] : table) {
    const auto& [kernel, M, K, density, B, t] = key;
    const Row& s = impls.at("sprig");
    const Row& d = impls.at("openblas");
    const bool he = impls.count("eigen") > 0;
    const double ratio = d.median_ms / s.median_ms;
    ratios[density][kernel][t].push_back(ratio);
    if (he) eigen_ratios[density][kernel][t].push_back(impls.at("eigen").median_ms / s.median_ms);
    std::printf("%-4s %5lld %5lld %5.2f %4lld %2d | %9.3f %7.1f | %9.3f %7.1f | ", kernel.c_str(), (long long)M,
                (long long)K, density, (long long)B, t, s.median_ms, s.gflops, d.median_ms, d.gflops);
    if (he)
      std::printf("%9.3f %7.1f | %8.2f %8.2f\n", impls.at("eigen").median_ms, impls.at("eigen").gflops, ratio,
                  impls.at("eigen").median_ms / s.median_ms);
    else
      std::printf("%9s %7s | %8.2f %8s\n", "-", "-", ratio, "-");
    for (const auto& [impl, r] : impls) {
      if (impl == "sprig" || impl == "openblas" || impl == "eigen") continue;
      if (impl.size() > 5 && impl.substr(impl.size() - 5) == "/bf16") {
        std::printf("%-4s %5lld %5lld %5.2f %4lld %2d | %9.3f %7.1f   block %-9s   blas/blk %6.2f\n", kernel.c_str(),
                    (long long)M, (long long)K, density, (long long)B, t, r.median_ms, r.gflops, impl.c_str(),
                    d.median_ms / r.median_ms);
        continue;
      }
      if (impl == "bf16") {
        std::printf("%-4s %5lld %5lld %5.2f %4lld %2d | %9.3f %7.1f   bf16              fp32/bf16 %5.2f\n",
                    kernel.c_str(), (long long)M, (long long)K, density, (long long)B, t, r.median_ms, r.gflops,
                    s.median_ms / r.median_ms);
        continue;
      }
      std::printf(
          "%-4s %5lld %5lld %5.2f %4lld %2d | %9.3f %7.1f   block %-4s        blas/blk %6.2f  (unstructured/blk %5.2f)\n",
          kernel.c_str(), (long long)M, (long long)K, density, (long long)B, t, r.median_ms, r.gflops, impl.c_str(),
          d.median_ms / r.median_ms, s.median_ms / r.median_ms);
      block_ratios[impl][density][kernel][t].push_back(d.median_ms / r.median_ms);
      block_gflops[impl][density][kernel][t].push_back(r.gflops);
      blas_gflops[impl][density][kernel][t].push_back(d.gflops);
    }
    if (M == 4096 && K == 4096 && t == 2) {
      auto one = table.find({kernel, M, K, density, B, 1});
      if (one != table.end() && one->second.count("sprig"))
        scaling[kernel][density].push_back(one->second.at("sprig").median_ms / s.median_ms);
    }
  }
  std::printf("\nGeometric mean of dense_time / sprig_time (min over shapes in brackets); eigen_time / sprig_time\n");
  for (const auto& [density, per_kernel] : ratios)
    for (const auto& [kernel, per_t] : per_kernel)
      for (const auto& [t, v] : per_t) {
        std::printf("density %.2f  %-3s  threads %d:  %6.2fx  [min %5.2fx]", density, kernel.c_str(), t, geomean(v),
                    *std::min_element(v.begin(), v.end()));
        const auto& ev = eigen_ratios[density][kernel][t];
        if (!ev.empty()) std::printf("   vs eigen %6.2fx", geomean(ev));
        std::printf("\n");
      }
  for (const auto& [impl, per_density] : block_ratios) {
    std::printf(
        "\nBlock %s: geometric mean of dense_time / block_time [min]; GFLOP/s of useful work, block vs OpenBLAS\n",
        impl.c_str());
    for (const auto& [density, per_kernel] : per_density)
      for (const auto& [kernel, per_t] : per_kernel)
        for (const auto& [t, v] : per_t)
          std::printf("block %-4s density %.2f  %-3s  threads %d:  %6.2fx  [min %5.2fx]   %6.1f vs %6.1f GFLOP/s\n",
                      impl.c_str(), density, kernel.c_str(), t, geomean(v), *std::min_element(v.begin(), v.end()),
                      geomean(block_gflops[impl][density][kernel][t]), geomean(blas_gflops[impl][density][kernel][t]));
  }
  if (!bf16_ratios.empty()) {
    std::printf("\nbf16 kernels: sprig fp32 time / bf16 time, median of the per-rep ratios [min, max]\n");
    std::map<std::string, std::map<int, std::vector<double>>> per_kernel;
    for (const auto& [key, v] : bf16_ratios) {
      const auto& [kernel, M, K, density, B, t] = key;
      std::vector<double> sorted = v;
      std::sort(sorted.begin(), sorted.end());
      std::printf("bf16 %-3s %5lldx%-5lld density %.2f B %4lld threads %d:  %5.2fx  [%5.2f, %5.2f]\n", kernel.c_str(),
                  (long long)M, (long long)K, density, (long long)B, t, median(v), sorted.front(), sorted.back());
      per_kernel[kernel][t].push_back(median(v));
    }
    for (const auto& [kernel, per_t] : per_kernel)
      for (const auto& [t, v] : per_t)
        std::printf("bf16 %-3s threads %d: geometric mean %5.2fx  [min %5.2fx]\n", kernel.c_str(), t, geomean(v),
                    *std::min_element(v.begin(), v.end()));
  }
  if (!block_bf16_ratios.empty()) {
    std::printf("\nbf16 block kernels: fp32 block time / bf16 block time, median of the per-rep ratios [min, max]\n");
    for (const auto& [key, v] : block_bf16_ratios) {
      const auto& [kernel, shape, M, K, density, B, t] = key;
      std::vector<double> sorted = v;
      std::sort(sorted.begin(), sorted.end());
      std::printf("block %-4s bf16 %-3s %5lldx%-5lld density %.2f B %4lld threads %d:  %5.2fx  [%5.2f, %5.2f]\n",
                  shape.c_str(), kernel.c_str(), (long long)M, (long long)K, density, (long long)B, t, median(v),
                  sorted.front(), sorted.back());
    }
  }
  if (!scaling.empty()) {
    std::printf("\nsprig 2-thread speed-up over 1 thread on 4096x4096 (geometric mean over B)\n");
    for (const auto& [kernel, per_d] : scaling)
      for (const auto& [density, v] : per_d)
        std::printf("%-3s density %.2f: %5.2fx  [min %5.2fx]\n", kernel.c_str(), density, geomean(v),
                    *std::min_element(v.begin(), v.end()));
  }
  return 0;
}
