// libFuzzer target: sprig's checkpoint readers on arbitrary bytes. Every input must end in
// a result or a sprig::Error; anything else (another exception, a crash, a sanitizer report,
// a leak, a timeout) is a finding. Each input is read twice: as given (exercising the
// container, lengths and checksums) and resealed with correct checksums (reaching the
// semantic checks of every section behind them).
#include <sprig/io/checkpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <sprig/dst/rigl.hpp>

#include "reseal.hpp"

namespace {

using Model = sprig::Sequential<float, std::int32_t>;

// The seed corpus (make_corpus.cpp) is written for exactly these targets.
Model small_model() {
  Model m;
  m.add(sprig::SparseLinear<float, std::int32_t>(6, 8, {.density = 0.4, .seed = 1, .padding_ratio = 0.0}));
  m.add(sprig::ReLU<float>{});
  m.add(sprig::Linear<float>(8, 3, 1, 1));
  return m;
}

template <class T, class Index>
void read_csr(std::span<const std::byte> bytes) {
  try {
    const auto m = sprig::decode_padded_csr<T, Index>(bytes, "fuzz");
    if (m.cols() <= (1 << 16)) m.check_invariants();  // O(cols) memory: skip absurd widths
  } catch (const sprig::Error&) {
  }
}

void read_state(std::span<const std::byte> bytes) {
  Model model = small_model();
  sprig::SGD<float> sgd({.lr = 0.1, .momentum = 0.9});
  sprig::dst::RigL<float, std::int32_t> rigl({.delta_t = 2, .t_begin = 0, .t_end = 8, .alpha = 0.3}, 8);
  try {
    sprig::decode_training_state(bytes, "fuzz", model, sgd, &rigl);
    model.for_each_parameter([](auto& p) {
      if constexpr (requires { p.matrix; }) {
        p.matrix.check_invariants();
        p.check_aligned("fuzz");
      }
    });
  } catch (const sprig::Error&) {
  }
  sprig::AdamW<float> adamw;
  try {
    sprig::decode_training_state(bytes, "fuzz", model, adamw);
  } catch (const sprig::Error&) {
  }
}

void read_settings(std::span<const std::byte> bytes) {
  try {
    (void)sprig::decode_run_settings(bytes, "fuzz");
  } catch (const sprig::Error&) {
  }
}

void read_all(std::span<const std::byte> bytes) {
  read_csr<float, std::int32_t>(bytes);
  read_csr<double, std::int16_t>(bytes);
  read_csr<float, std::int64_t>(bytes);
  read_state(bytes);
  read_settings(bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto* p = reinterpret_cast<const std::byte*>(data);
  std::vector<std::byte> bytes(p, p + size);
  read_all(bytes);
  sprig_test::reseal(bytes);
  read_all(bytes);
  return 0;
}
