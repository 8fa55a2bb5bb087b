// tests/fuzz/reseal.hpp — test helpers over sprig's binary container (io/binary_format.hpp):
// list the sections of a (possibly damaged) file and recompute every checksum, so a test or
// fuzz target can hand the reader a file whose damage lies inside a payload and is not
// caught by a CRC, reaching the semantic checks behind them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <sprig/io/binary_format.hpp>

namespace sprig_test {

struct SectionLocation {
  std::uint32_t tag = 0;
  std::size_t header = 0;   // offset of the section header
  std::size_t payload = 0;  // offset of the payload
  std::size_t length = 0;   // payload bytes (clipped to the file)
};

inline std::uint64_t load_le(const std::byte* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t k = 0; k < n; ++k) v |= std::uint64_t(p[k]) << (8 * k);
  return v;
}
inline void store_le(std::byte* p, std::uint64_t v, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) p[k] = static_cast<std::byte>((v >> (8 * k)) & 0xFF);
}

// Sections as the headers declare them, following declared lengths while they fit the file
// (at most the declared count, stopping at the first that does not fit).
inline std::vector<SectionLocation> sections_of(std::span<const std::byte> f) {
  std::vector<SectionLocation> out;
  if (f.size() < 24) return out;
  const auto count = load_le(f.data() + 16, 4);
  std::size_t pos = 24;
  for (std::uint64_t k = 0; k < count && f.size() - pos >= 24; ++k) {
    SectionLocation s;
    s.tag = static_cast<std::uint32_t>(load_le(f.data() + pos, 4));
    s.header = pos;
    s.payload = pos + 24;
    const std::uint64_t declared = load_le(f.data() + pos + 8, 8);
    s.length = static_cast<std::size_t>(declared > f.size() - s.payload ? f.size() - s.payload : declared);
    out.push_back(s);
    if (declared > f.size() - s.payload) break;
    pos = s.payload + s.length;
  }
  return out;
}

// Recomputes the header CRC and every section's payload and header CRC in place.
inline void reseal(std::vector<std::byte>& f) {
  if (f.size() < 24) return;
  for (const SectionLocation& s : sections_of(f)) {
    std::byte* h = f.data() + s.header;
    store_le(h + 16, sprig::binary::crc32(std::span<const std::byte>(f.data() + s.payload, s.length)), 4);
    store_le(h + 20, sprig::binary::crc32(std::span<const std::byte>(h, 20)), 4);
  }
  store_le(f.data() + 20, sprig::binary::crc32(std::span<const std::byte>(f.data(), 20)), 4);
}

}  // namespace sprig_test
