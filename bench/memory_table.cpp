// memory_table: bytes of a 90%-sparse layer as dense, tight CSR and Padded-CSR, for int32
// and int16 column indices, as a Markdown table. The Padded-CSR figure is what
// PaddedCSR::memory() reports for a random_density matrix; it is checked against the
// format's formula, C*(v + x) + 3*8*M + sizeof(PaddedCSR) with C = sum_i max(1,
// ceil(n_i*(1 + r))), and the program exits 1 if they differ.
//
// Usage: memory_table [density] (default 0.1). Shapes are M x K (rows = outputs): a 784 ->
// 512 layer is 512 x 784.
#include <sprig/core/padded_csr.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

std::string with_commas(std::int64_t v) {
  const std::string digits = std::to_string(v);
  std::string out;
  for (std::size_t p = 0; p < digits.size(); ++p) {
    if (p > 0 && (digits.size() - p) % 3 == 0) out += ',';
    out += digits[p];
  }
  return out;
}

template <class Index>
bool row(const char* layer, std::int64_t M, std::int64_t K, double density, const char* index_name) {
  using M_t = sprig::PaddedCSR<float, Index>;
  const M_t W = M_t::random_density(M, K, density, 2024);
  const std::int64_t n = W.nnz();
  const std::int64_t dense = M * K * 4;
  const std::int64_t csr = n * static_cast<std::int64_t>(4 + sizeof(Index)) + (M + 1) * 8;
  std::int64_t slots = 0;
  for (std::int64_t i = 0; i < M; ++i)
    slots += std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(static_cast<double>(W.row_nnz(i)) * 1.2)));
  const std::int64_t formula =
      slots * static_cast<std::int64_t>(4 + sizeof(Index)) + 3 * 8 * M + static_cast<std::int64_t>(sizeof(M_t));
  const std::int64_t reported = W.memory_bytes();
  const auto pct = [&](std::int64_t b) { return 100.0 * static_cast<double>(b) / static_cast<double>(dense); };
  std::printf("| %s | %lldx%lld | %s | %s | %s (100%%) | %s (%.1f%%) | %s (%.1f%%) | %s | %.2f |\n", layer,
              static_cast<long long>(M), static_cast<long long>(K), index_name, with_commas(n).c_str(),
              with_commas(dense).c_str(), with_commas(csr).c_str(), pct(csr), with_commas(reported).c_str(),
              pct(reported), with_commas(formula).c_str(), static_cast<double>(reported) / static_cast<double>(n));
  if (reported != formula) {
    std::fprintf(stderr, "memory_table: %s %s: memory() = %lld but the formula gives %lld\n", layer, index_name,
                 static_cast<long long>(reported), static_cast<long long>(formula));
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const double density = argc > 1 ? std::atof(argv[1]) : 0.1;
  if (!(density > 0.0 && density <= 1.0)) {
    std::fprintf(stderr, "usage: memory_table [density in (0, 1]]\n");
    return 2;
  }
  std::printf("Float values, density %.2f (sparsity %.0f%%), padding ratio 0.2, random_density seed 2024.\n\n", density,
              100.0 * (1.0 - density));
  std::printf("| layer | M x K | index | nnz | dense bytes | CSR bytes | Padded-CSR memory() | formula | B/nnz |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  bool ok = true;
  ok &= row<std::int32_t>("784 -> 512", 512, 784, density, "int32");
  ok &= row<std::int16_t>("784 -> 512", 512, 784, density, "int16");
  ok &= row<std::int32_t>("4096 -> 4096", 4096, 4096, density, "int32");
  ok &= row<std::int16_t>("4096 -> 4096", 4096, 4096, density, "int16");
  std::printf(
      "\ndense = M*K*4; CSR = nnz*(4 + sizeof(Index)) + (M+1)*8; Padded-CSR = C*(4 + sizeof(Index)) + 3*8*M"
      " + sizeof(PaddedCSR), C = sum_i max(1, ceil(1.2*nnz_i)).\n");
  return ok ? 0 : 1;
}
