// Writes the seed corpora of the fuzz targets into <dir>/reader, <dir>/ops and
// <dir>/safetensors: valid PaddedCSR and training-state files (the reader target's model, SGD
// and RigL, trained a few steps and not, with run settings and without), a few operation
// programs, and safetensors files of the safetensors target's model (dense and compressed, F32
// and BF16).
#include <sprig/dst/rigl.hpp>
#include <sprig/io/checkpoint.hpp>
#include <sprig/io/safetensors.hpp>
#include <sprig/nn/block_sparse_linear.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

static void write(const fs::path& p, const std::vector<std::byte>& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus DIR\n");
    return 2;
  }
  const fs::path dir = argv[1];
  fs::create_directories(dir / "reader");
  fs::create_directories(dir / "ops");
  fs::create_directories(dir / "safetensors");
  int n = 0;
  auto csr = sprig::PaddedCSR<float, std::int32_t>::random_density(5, 7, 0.4, 3, 0.2);
  write(dir / "reader" / "csr_f32_i32", sprig::encode_padded_csr(csr));
  csr.insert_new(0, 6 - (csr.find(0, 6) >= 0), 1.5f);  // may relocate row 0
  write(dir / "reader" / "csr_f32_i32_relocated", sprig::encode_padded_csr(csr));
  write(dir / "reader" / "csr_f64_i16",
        sprig::encode_padded_csr(sprig::PaddedCSR<double, std::int16_t>::random_density(4, 9, 0.3, 4)));
  write(dir / "reader" / "csr_f32_i64_empty", sprig::encode_padded_csr(sprig::PaddedCSR<float, std::int64_t>(3, 0)));
  n += 4;

  sprig::Sequential<float, std::int32_t> m;
  m.add(sprig::SparseLinear<float, std::int32_t>(6, 8, {.density = 0.4, .seed = 1, .padding_ratio = 0.0}));
  m.add(sprig::ReLU<float>{});
  m.add(sprig::Linear<float>(8, 3, 1, 1));
  sprig::SGD<float> sgd({.lr = 0.1, .momentum = 0.9});
  sprig::dst::RigL<float, std::int32_t> rigl({.delta_t = 2, .t_begin = 0, .t_end = 8, .alpha = 0.3}, 8);
  write(dir / "reader" / "state_fresh", sprig::encode_training_state(m, sgd, {}, &rigl));
  sprig::Matrix<float> X(6, 4);
  for (std::int64_t f = 0; f < 6; ++f)
    for (std::int64_t b = 0; b < 4; ++b) X(f, b) = static_cast<float>((f * 7 + b * 3) % 5) - 2.0f;
  const std::vector<int> y = {0, 1, 2, 1};
  sprig::SoftmaxCrossEntropy<float> loss;
  for (std::int64_t t = 0; t < 5; ++t) {
    const auto Z = m.forward(X.view());
    loss.forward_backward(Z, y, m.output_grad());
    m.backward();
    sprig::dst::apply_step(rigl, sgd, m, t);
  }
  write(dir / "reader" / "state_trained", sprig::encode_training_state(m, sgd, {.step = 5, .seed = 1}, &rigl));
  write(dir / "reader" / "state_no_dst", sprig::encode_training_state(m, sgd, {.step = 5}));
  const sprig::RunSettings settings = {{"hidden", "8"}, {"optimizer", "sgd"}, {"data", "x.idx"}, {"note", ""}};
  write(dir / "reader" / "state_settings",
        sprig::encode_training_state(m, sgd, {.step = 5, .seed = 1}, &rigl, settings));
  n += 4;

  const std::vector<std::vector<std::uint8_t>> programs = {
      {3, 5, 1, 0, 0, 1, 7, 0, 1, 2, 9, 1, 1, 3, 20, 8, 0, 0, 0},
      {7, 15, 0, 5, 3, 4, 1, 4, 1, 2, 1, 1, 4, 2, 2, 2, 7, 0, 0, 3, 8, 0, 0, 0},
      {2, 3, 2, 5, 1, 2, 9, 255, 1, 6, 0, 0, 12, 4, 1, 1, 0, 0, 0, 0, 0, 0},
  };
  for (std::size_t k = 0; k < programs.size(); ++k) {
    std::vector<std::byte> b(programs[k].size());
    for (std::size_t q = 0; q < b.size(); ++q) b[q] = std::byte(programs[k][q]);
    write(dir / "ops" / ("program_" + std::to_string(k)), b);
  }
  n += static_cast<int>(programs.size());

  using Block = sprig::BlockSparseLinear<float, std::int32_t, 2, 2>;
  sprig::Sequential<float, std::int32_t, Block> st;  // fuzz_safetensors_reader's model
  st.add(sprig::SparseLinear<float, std::int32_t>(6, 8, {.density = 0.4, .seed = 1, .padding_ratio = 0.0}));
  st.add(sprig::ReLU<float>{});
  st.add(sprig::Linear<float>(8, 3, 1, 1));
  st.add(Block(3, 5, {.density = 0.5, .seed = 1, .layer_key = 2}));
  write(dir / "safetensors" / "dense", sprig::encode_safetensors(st));
  write(dir / "safetensors" / "compressed",
        sprig::encode_safetensors(st, {.sparse_form = sprig::SparseForm::compressed}));
  write(dir / "safetensors" / "dense_bf16", sprig::encode_safetensors(st, {.dtype = sprig::SafetensorsDtype::bf16}));
  write(dir / "safetensors" / "compressed_bf16",
        sprig::encode_safetensors(st, {.sparse_form = sprig::SparseForm::compressed,
                                       .dtype = sprig::SafetensorsDtype::bf16}));
  write(dir / "safetensors" / "empty", sprig::encode_safetensors_tensors({}, {{"format", "pt"}}));
  n += 5;
  std::printf("make_corpus: %d seed files in %s\n", n, dir.c_str());
}
