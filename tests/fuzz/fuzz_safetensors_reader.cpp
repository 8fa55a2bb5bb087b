// libFuzzer target: the safetensors reader (io/safetensors_format.hpp) and the import into a
// model (io/safetensors.hpp) on arbitrary bytes. Every input must end in a result or a
// sprig::Error; anything else (another exception, a crash, a sanitizer report, a leak, a
// timeout) is a finding. An input that imports (as given, pruned on import to a sparsity, and
// pruned to the model's densities) must leave every sparse weight valid and its per-slot arrays
// aligned. The seed corpus holds F32 and BF16 files.
#include <sprig/io/safetensors.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

#include <sprig/nn/block_sparse_linear.hpp>

namespace {

using Block = sprig::BlockSparseLinear<float, std::int32_t, 2, 2>;
using Model = sprig::Sequential<float, std::int32_t, Block>;

// The seed corpus (make_corpus.cpp, safetensors/) is written for exactly this model.
Model small_model() {
  Model m;
  m.add(sprig::SparseLinear<float, std::int32_t>(6, 8, {.density = 0.4, .seed = 1, .padding_ratio = 0.0}));
  m.add(sprig::ReLU<float>{});
  m.add(sprig::Linear<float>(8, 3, 1, 1));
  m.add(Block(3, 5, {.density = 0.5, .seed = 1, .layer_key = 2}));
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const sprig::SafetensorsFile f = sprig::parse_safetensors(bytes, "fuzz");
    for (const auto& [name, t] : f.tensors)
      if (std::ssize(t.data) != t.end - t.begin) __builtin_trap();
  } catch (const sprig::Error&) {
  }
  const sprig::SafetensorsImportOptions imports[] = {{}, {.prune_sparsity = 0.5}, {.prune_to_model_density = true}};
  for (const auto& options : imports) {
    Model m = small_model();
    try {
      sprig::decode_safetensors(bytes, "fuzz", m, options);
      m.for_each_parameter([](auto& p) {
        if constexpr (requires { p.matrix; }) {
          p.matrix.check_invariants();
          p.check_aligned("fuzz");
        }
      });
    } catch (const sprig::Error&) {
    }
  }
  return 0;
}
