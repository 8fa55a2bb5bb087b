// Block-sparse matrices in files: a BlockPaddedCSR file round-trips a matrix after insert,
// erase and relocation (live blocks in their row order, values bitwise), bad files are
// rejected by name; a training state of a Sequential with block layers resumes bitwise.
#include <sprig/io/checkpoint.hpp>
#include <sprig/io/padded_csr_file.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <vector>

#include <sprig/models/mlp.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>
#include <sprig/optim/adamw.hpp>

#include "file_test_support.hpp"
#include "test_nn_gradcheck.hpp"

using namespace sprig;

namespace {

template <class M>
void require_same(const M& a, const M& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  REQUIRE(a.nnz_blocks() == b.nnz_blocks());
  const auto& pa = a.pattern();
  const auto& pb = b.pattern();
  for (std::int64_t i = 0; i < pa.rows(); ++i) {
    REQUIRE(pa.row_nnz(i) == pb.row_nnz(i));
    for (std::int64_t q = 0; q < pa.row_nnz(i); ++q) {  // same blocks, same order within the row
      REQUIRE(pa.col_indices()[pa.row_start(i) + q] == pb.col_indices()[pb.row_start(i) + q]);
      const float* x = a.block(pa.row_start(i) + q);
      const float* y = b.block(pb.row_start(i) + q);
      for (std::int64_t e = 0; e < M::kBlockSize; ++e) REQUIRE(x[e] == y[e]);
    }
  }
}

}  // namespace

TEMPLATE_TEST_CASE_SIG("BlockPaddedCSR file: round trip after structural changes", "[io][block_csr]",
                       ((int R, int C), R, C), (4, 4), (8, 1), (1, 4), (16, 1)) {
  using M = BlockPaddedCSR<float, std::int32_t, R, C>;
  M W = M::random(5 * R + 1, 7 * C + (C > 1 ? 2 : 0), 11, 3);
  std::vector<float> block(static_cast<std::size_t>(R * C), 0.5f);
  for (std::int64_t j = 0; j < W.block_cols() - 1; ++j)
    if (W.find_block(0, j) < 0) W.insert_block(0, j, block);  // relocates block row 0
  const auto& P = W.pattern();
  if (P.row_nnz(2) > 0) W.erase_block(2, P.col_indices()[P.row_start(2)]);
  W.check_invariants();
  const auto bytes = encode_block_padded_csr(W);
  const M back = decode_block_padded_csr<float, std::int32_t, R, C>(bytes);
  back.check_invariants();
  require_same(W, back);
  REQUIRE(back.dead_slots() == 0);  // loaded tight
  REQUIRE(encode_block_padded_csr(back).size() <= bytes.size());

  // another block shape, another value or index type, a flipped byte, a PaddedCSR file
  REQUIRE_THROWS_WITH((decode_block_padded_csr<float, std::int32_t, R + 1, C>(bytes)),
                      Catch::Contains("block shape mismatch"));
  REQUIRE_THROWS_AS((decode_block_padded_csr<double, std::int32_t, R, C>(bytes)), FormatError);
  REQUIRE_THROWS_AS((decode_block_padded_csr<float, std::int16_t, R, C>(bytes)), FormatError);
  auto corrupt = bytes;
  corrupt[corrupt.size() / 2] ^= std::byte{0x10};
  REQUIRE_THROWS_AS((decode_block_padded_csr<float, std::int32_t, R, C>(corrupt)), FormatError);
  const auto csr = encode_padded_csr(PaddedCSR<float, std::int32_t>::random_density(8, 8, 0.3, 1));
  REQUIRE_THROWS_WITH((decode_block_padded_csr<float, std::int32_t, R, C>(csr)), Catch::Contains("a PaddedCSR file"));
}

TEST_CASE("BlockPaddedCSR file: saved and loaded by path", "[io][block_csr]") {
  using M = BlockPaddedCSR<double, std::int64_t, 4, 4>;
  const M W = M::random(30, 21, 9, 5);
  const sprig::test::TempDir dir;  // a fixed name would collide with a concurrent run of the suite
  const auto path = dir.path / "block.sprig";
  save_block_padded_csr(path, W);
  const M back = load_block_padded_csr<M>(path);
  REQUIRE(back.to_dense().rows() == 30);
  for (std::int64_t i = 0; i < 30; ++i)
    for (std::int64_t j = 0; j < 21; ++j) REQUIRE(back.to_dense()(i, j) == W.to_dense()(i, j));
  std::filesystem::remove(path);
  REQUIRE_THROWS_AS(load_block_padded_csr<M>(path), FormatError);
}

TEST_CASE("Training state with block-sparse layers: resume equals the straight run bitwise",
          "[io][checkpoint][block_csr]") {
  using Model = Sequential<float, std::int32_t, BlockSparseLinear<float, std::int32_t, 4, 4>>;
  const models::MLPSpec spec{.widths = {30, 24, 18, 5}, .sparsity = 0.7, .seed = 4};
  auto build = [&](std::uint64_t seed) {
    models::MLPSpec s = spec;
    s.seed = seed;
    return models::build_block_mlp<float, std::int32_t, 4, 4>(s);
  };
  const auto X = sprig_test::random_matrix<float>(30, 16, 1);
  std::vector<int> labels(16);
  for (int b = 0; b < 16; ++b) labels[b] = (b * 7) % 5;
  SoftmaxCrossEntropy<float> ce;
  auto step = [&](Model& m, AdamW<float>& opt) {
    const auto z = m.forward(X.view());
    const float loss = ce.forward_backward(z, labels, m.output_grad());
    m.backward();
    opt.step(m);
    return loss;
  };
  Model straight = build(4);
  AdamW<float> opt_s({.lr = 0.01});
  for (int t = 0; t < 4; ++t) step(straight, opt_s);
  const auto bytes = encode_training_state(straight, opt_s, {.step = 4, .seed = 4});
  std::vector<float> expect;
  for (int t = 0; t < 4; ++t) expect.push_back(step(straight, opt_s));

  Model resumed = build(99);  // another initialisation: everything comes from the file
  AdamW<float> opt_r({.lr = 0.01});
  const TrainingProgress p = decode_training_state(std::span<const std::byte>(bytes), "mem", resumed, opt_r);
  REQUIRE(p.step == 4);
  for (int t = 0; t < 4; ++t) REQUIRE(step(resumed, opt_r) == expect[t]);
  for (std::size_t l : {std::size_t{0}, std::size_t{2}}) {
    const auto& a = std::get<BlockSparseLinear<float, std::int32_t, 4, 4>>(straight.layer(l));
    const auto& b = std::get<BlockSparseLinear<float, std::int32_t, 4, 4>>(resumed.layer(l));
    require_same(a.weight.matrix, b.weight.matrix);
    REQUIRE(a.weight.state.size() == b.weight.state.size());
  }

  // a model in other blocks is rejected by name, and left as it was
  using Other = Sequential<float, std::int32_t, BlockSparseLinear<float, std::int32_t, 8, 1>>;
  models::MLPSpec s81 = spec;
  Other other = models::build_block_mlp<float, std::int32_t, 8, 1>(s81);
  AdamW<float> opt_o({.lr = 0.01});
  const auto before = std::get<BlockSparseLinear<float, std::int32_t, 8, 1>>(other.layer(0)).weight.matrix.to_dense();
  REQUIRE_THROWS_WITH(decode_training_state(std::span<const std::byte>(bytes), "mem", other, opt_o),
                      Catch::Contains("block shape mismatch"));
  const auto after = std::get<BlockSparseLinear<float, std::int32_t, 8, 1>>(other.layer(0)).weight.matrix.to_dense();
  for (std::int64_t i = 0; i < before.rows(); ++i)
    for (std::int64_t j = 0; j < before.cols(); ++j) REQUIRE(before(i, j) == after(i, j));
  // an unstructured model of the same widths is another model
  Sequential<float, std::int32_t> plain = models::build_mlp<float, std::int32_t>(spec);
  REQUIRE_THROWS_AS(decode_training_state(std::span<const std::byte>(bytes), "mem", plain, opt_o), FormatError);
}
