// A model class written the way a user would (its own buffers, its own forward and
// backward, no Sequential) gets optimizers, dst::apply_step, checkpoints and memory
// accounting through the TrainableModel concept alone (nn/model.hpp).
#include <sprig/nn/model.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <sprig/dst/fan_in.hpp>
#include <sprig/dst/rigl.hpp>
#include <sprig/dst/set.hpp>
#include <sprig/io/checkpoint.hpp>
#include <sprig/nn/linear.hpp>
#include <sprig/nn/relu.hpp>
#include <sprig/nn/sequential.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>
#include <sprig/nn/sparse_linear.hpp>
#include <sprig/optim/adamw.hpp>
#include <sprig/optim/sgd.hpp>

using namespace sprig;

namespace {

// in -> hidden (sparse) -> ReLU -> hidden (sparse) -> ReLU -> out (dense): written by hand.
template <class T, class Index>
class UserNet {
public:
  using value_type = T;
  using index_type = Index;

  UserNet(std::int64_t in, std::int64_t hidden, std::int64_t out, double density, std::uint64_t seed)
      : a_(in, hidden, {.density = density, .seed = seed, .layer_key = 1}),
        b_(hidden, hidden, {.density = density, .seed = seed, .layer_key = 2}),
        c_(hidden, out, seed, 3) {
    a_.weight.reserve_growth();
    b_.weight.reserve_growth();
  }

  ConstMatrixView<T> forward(ConstMatrixView<T> X) {
    x_ = X;
    shape(h1_, a_.out_features(), X.cols());
    shape(h2_, b_.out_features(), X.cols());
    shape(z_, c_.out_features(), X.cols());
    a_.forward(X, h1_.view(), FusedActivation::relu);
    b_.forward(h1_.view(), h2_.view(), FusedActivation::relu);
    c_.forward(h2_.view(), z_.view());
    shape(dz_, z_.rows(), z_.cols());
    shape(dh2_, h2_.rows(), h2_.cols());
    shape(dh1_, h1_.rows(), h1_.cols());
    return z_.view();
  }
  MatrixView<T> output_grad() { return dz_.view(); }
  void backward() {
    // each linear layer applies the ReLU below it to its dX (its input is that ReLU's output)
    c_.backward(h2_.view(), dz_.view(), dh2_.view(), FusedActivation::relu);
    b_.backward(h1_.view(), dh2_.view(), dh1_.view(), FusedActivation::relu);
    a_.backward(x_, dh1_.view());
  }

  // What makes it a TrainableModel.
  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    a_.for_each_parameter(fn);
    b_.for_each_parameter(fn);
    c_.for_each_parameter(fn);
  }
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    a_.for_each_parameter(fn);
    b_.for_each_parameter(fn);
    c_.for_each_parameter(fn);
  }
  std::vector<SparseLayerRef<T, Index>> sparse_layers() {
    return {{0, 0, &a_, x_, ConstMatrixView<T>(dh1_.view())},
            {1, repeat_index ? 0u : 1u, &b_, ConstMatrixView<T>(h1_.view()), ConstMatrixView<T>(dh2_.view())}};
  }
  bool repeat_index = false;  // a defect a user's model may have: both layers report sparse_index 0

  SparseLinear<T, Index>& first() { return a_; }

private:
  static void shape(Matrix<T>& m, std::int64_t r, std::int64_t c) {
    if (m.rows() != r || m.cols() != c) m.resize(r, c);
  }
  SparseLinear<T, Index> a_, b_;
  Linear<T> c_;
  ConstMatrixView<T> x_;
  Matrix<T> h1_, h2_, z_, dz_, dh2_, dh1_;
};

// A class with only the non-const for_each_parameter: not a TrainableModel (a checkpoint
// could not write it).
struct NoConstVisit {
  using value_type = float;
  using index_type = std::int32_t;
  template <class Fn>
  void for_each_parameter(Fn&&) {}
  std::vector<SparseLayerRef<float, std::int32_t>> sparse_layers() { return {}; }
};

static_assert(TrainableModel<UserNet<float, std::int32_t>>);
static_assert(TrainableModel<Sequential<double, std::int64_t>>);
static_assert(!TrainableModel<NoConstVisit>);
static_assert(!TrainableModel<int>);

// A deterministic toy task: label = argmax of the first 3 inputs.
template <class T>
struct Data {
  Matrix<T> X;
  std::vector<int> y;
  Data(std::int64_t in, std::int64_t B, std::uint64_t seed) : X(in, B), y(static_cast<std::size_t>(B)) {
    CounterRng rng(seed, 0, 0);
    for (std::int64_t i = 0; i < in; ++i)
      for (std::int64_t j = 0; j < B; ++j) X(i, j) = static_cast<T>(rng.uniform(-1.0, 1.0));
    for (std::int64_t j = 0; j < B; ++j) {
      int best = 0;
      for (int k = 1; k < 3; ++k)
        if (X(k, j) > X(best, j)) best = k;
      y[static_cast<std::size_t>(j)] = best;
    }
  }
};

template <class T, class Index, class Opt, class Algo>
std::vector<T> train(UserNet<T, Index>& net, Opt& opt, Algo& algo, const Data<T>& d, std::int64_t from,
                     std::int64_t to) {
  SoftmaxCrossEntropy<T> loss;
  std::vector<T> losses;
  for (std::int64_t t = from; t < to; ++t) {
    const auto Z = net.forward(d.X.view());  // before output_grad(), which forward shapes
    losses.push_back(loss.forward_backward(Z, d.y, net.output_grad()));
    net.backward();
    dst::apply_step(algo, opt, net, t);
  }
  return losses;
}

template <class T, class Index>
std::vector<std::vector<T>> parameter_bits(const UserNet<T, Index>& net) {
  std::vector<std::vector<T>> out;
  net.for_each_parameter([&](const auto& p) {
    if constexpr (requires { p.matrix.storage_size(); }) {
      std::vector<T> v;
      for (std::int64_t r = 0; r < p.matrix.rows(); ++r)  // each row's live entries in slot order
        for (std::int64_t s = p.matrix.row_start(r); s < p.matrix.row_start(r) + p.matrix.row_nnz(r); ++s) {
          v.push_back(static_cast<T>(p.matrix.col_indices()[static_cast<std::size_t>(s)]));
          v.push_back(p.matrix.values()[static_cast<std::size_t>(s)]);
        }
      out.push_back(std::move(v));
    } else {
      out.emplace_back(p.value.begin(), p.value.end());
    }
  });
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("TrainableModel: a user's model learns with RigL through apply_step", "[nn][model]", float, double) {
  using T = TestType;
  UserNet<T, std::int32_t> net(16, 24, 3, 0.3, 7);
  AdamW<T> opt({.lr = 1e-2, .weight_decay = 0});
  dst::RigL<T, std::int32_t> rigl({.delta_t = 5, .t_begin = 0, .t_end = 60, .alpha = 0.3}, 3);
  const Data<T> d(16, 64, 11);
  const std::int64_t live0 = net.first().weight.matrix.nnz();
  const auto before = net.first().weight.matrix.topology_key();
  const auto losses = train(net, opt, rigl, d, 0, 80);
  CHECK(rigl.updates() == 13);  // steps 0, 5, ..., 60 (t_begin and t_end included)
  CHECK(net.first().weight.matrix.nnz() == live0);
  CHECK(net.first().weight.matrix.topology_key() != before);
  CHECK(losses.back() < T(0.5) * losses.front());
}

TEST_CASE("TrainableModel: a user's model resumes bitwise from a checkpoint", "[nn][model][checkpoint]") {
  using T = float;
  using I = std::int32_t;
  const Data<T> d(16, 64, 11);
  const dst::UpdateSchedule sched{.delta_t = 4, .t_begin = 0, .t_end = 40, .alpha = 0.3};

  UserNet<T, I> whole(16, 24, 3, 0.3, 7);
  AdamW<T> opt_whole({.lr = 1e-2});
  dst::RigL<T, I> rigl_whole(sched, 3);
  const auto losses_whole = train(whole, opt_whole, rigl_whole, d, 0, 30);

  UserNet<T, I> first(16, 24, 3, 0.3, 7);
  AdamW<T> opt_first({.lr = 1e-2});
  dst::RigL<T, I> rigl_first(sched, 3);
  auto losses = train(first, opt_first, rigl_first, d, 0, 13);
  const auto bytes = encode_training_state(first, opt_first, {.step = 13}, &rigl_first);

  UserNet<T, I> second(16, 24, 3, 0.3, 99);  // different init: everything comes from the file
  AdamW<T> opt_second({.lr = 1e-2});
  dst::RigL<T, I> rigl_second(sched, 3);
  const TrainingProgress p = decode_training_state(bytes, "user.sprig", second, opt_second, &rigl_second);
  REQUIRE(p.step == 13);
  second.first().weight.reserve_growth();
  const auto rest = train(second, opt_second, rigl_second, d, p.step, 30);
  losses.insert(losses.end(), rest.begin(), rest.end());

  REQUIRE(losses.size() == losses_whole.size());
  CHECK(std::memcmp(losses.data(), losses_whole.data(), losses.size() * sizeof(T)) == 0);
  CHECK(parameter_bits(second) == parameter_bits(whole));
  CHECK(rigl_second.updates() == rigl_whole.updates());
}

TEST_CASE("TrainableModel: checkpoint structure mismatches name the parameter", "[nn][model][checkpoint]") {
  using T = float;
  using I = std::int32_t;
  UserNet<T, I> net(16, 24, 3, 0.3, 7);
  SGD<T> opt({.lr = 0.1});
  const auto bytes = encode_training_state(net, opt, {});
  UserNet<T, I> wider(16, 25, 3, 0.3, 7);
  CHECK_THROWS_WITH(decode_training_state(bytes, "u.sprig", wider, opt),
                    Catch::Contains("u.sprig") &&
                        Catch::Contains("shape mismatch: parameter 0 (sparse parameter) is 24x16") &&
                        Catch::Contains("25x16 in the model"));
  Sequential<T, I> seq;  // a Sequential reads its entries as layers: a user model's file does not fit
  seq.add(SparseLinear<T, I>(16, 24, {.density = 0.3, .seed = 7, .layer_key = 1}));
  CHECK_THROWS_WITH(decode_training_state(bytes, "u.sprig", seq, opt),
                    Catch::Contains("the checkpoint has 6 layers, the model has 1"));
}

TEST_CASE("TrainableModel: parameter_memory adds up every parameter", "[nn][model][memory]") {
  using T = double;
  using I = std::int64_t;
  UserNet<T, I> net(16, 24, 3, 0.25, 5);
  AdamW<T> opt;
  const Data<T> d(16, 8, 1);
  SoftmaxCrossEntropy<T> loss;
  const auto Z = net.forward(d.X.view());
  loss.forward_backward(Z, d.y, net.output_grad());
  net.backward();
  opt.step(net);  // creates the two state vectors of every parameter
  std::int64_t weights = 0, dense = 0, grads = 0, state = 0, live = 0;
  net.for_each_parameter([&](const auto& p) {
    weights += p.weight_bytes();
    grads += static_cast<std::int64_t>(p.grad.capacity() * sizeof(T));
    for (const auto& s : p.state) state += static_cast<std::int64_t>(s.capacity() * sizeof(T));
  });
  // dense sizes and live counts by hand: 24x16 and 24x24 sparse, 3x24 dense, biases 24, 24, 3
  const std::int64_t a = net.first().weight.matrix.nnz();
  const auto refs = net.sparse_layers();
  const std::int64_t b = refs[1].layer->weight.matrix.nnz();
  dense = (24 * 16 + 24 + 24 * 24 + 24 + 3 * 24 + 3) * 8;
  live = a + 24 + b + 24 + 3 * 24 + 3;
  const ParameterMemory m = parameter_memory(net);
  CHECK(m.weights == weights);
  CHECK(m.dense_weights == dense);
  CHECK(m.gradients == grads);
  CHECK(m.optimizer_state == state);
  CHECK(state >= 2 * 8 * live);  // AdamW: m and v for every live weight at least
  CHECK(m.parameters == live);
  CHECK(m.dense_parameters == dense / 8);

  Sequential<T, I> seq;
  seq.add(SparseLinear<T, I>(16, 24, {.density = 0.25, .seed = 5, .layer_key = 1}));
  seq.add(ReLU<T>{});
  seq.add(Linear<T>(24, 3, 5, 3));
  const ParameterMemory s = parameter_memory(seq);
  CHECK(s.weights == seq.weight_bytes());
  CHECK(s.dense_weights == seq.dense_weight_bytes());
}

TEST_CASE("TrainableModel: a sparse_index listed twice is rejected before anything changes", "[nn][model]") {
  using T = float;
  UserNet<T, std::int32_t> net(16, 24, 3, 0.3, 7);
  net.repeat_index = true;
  SGD<T> opt({.lr = 0.1});
  dst::SET<T, std::int32_t> set({.delta_t = 1, .t_begin = 0, .t_end = 10, .alpha = 0.3}, 3);
  const Data<T> d(16, 8, 11);
  SoftmaxCrossEntropy<T> loss;
  const auto Z = net.forward(d.X.view());
  loss.forward_backward(Z, d.y, net.output_grad());
  net.backward();
  const auto before = parameter_bits(net);
  CHECK_THROWS_AS(dst::apply_step(set, opt, net, 0), ArgumentError);
  CHECK_THROWS_WITH(dst::apply_step(set, opt, net, 0),
                    Catch::Contains("dst::apply_step") && Catch::Contains("sparse_index 0 twice"));
  CHECK(parameter_bits(net) == before);  // neither the optimizer step nor the update ran
  CHECK_THROWS_WITH(set.update(net.sparse_layers(), 0),
                    Catch::Contains("SparsityAlgorithm::update") && Catch::Contains("sparse_index 0 twice"));
  CHECK_THROWS_WITH(dst::redraw_constant_fan_in(net, 1),
                    Catch::Contains("dst::redraw_constant_fan_in") && Catch::Contains("sparse_index 0 twice"));
  CHECK(parameter_bits(net) == before);
  CHECK(set.updates() == 0);

  net.repeat_index = false;  // the same model with its indices right updates
  CHECK_NOTHROW(dst::apply_step(set, opt, net, 0));
  CHECK(set.updates() == 1);
}
