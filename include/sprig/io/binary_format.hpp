// sprig/io/binary_format.hpp — the container of sprig's binary files (checkpoints): a
// checksummed header followed by checksummed sections, little-endian throughout; a writer,
// and a bounds-checked reader whose every failure is a sprig::FormatError naming the source,
// the section and the byte offset.
//
// Container, format version 1 (all integers little-endian, floating-point values stored as
// their IEEE-754 bit patterns, so a round trip is bitwise):
//
//   file header, 24 bytes
//     0   magic        8 bytes  "SPRIGCKP"
//     8   version      u32      kFormatVersion (a reader rejects any other)
//     12  kind         u16      what the file holds (FileKind)
//     14  value type   u8       1 = float32, 2 = float64, 0 = none
//     15  index type   u8       1 = int16, 2 = int32, 3 = int64, 0 = none
//     16  sections     u32      number of sections that follow
//     20  header crc   u32      CRC-32 of bytes [0, 20)
//   then `sections` times: section header, 24 bytes, and its payload
//     0   tag          u32      four ASCII characters, first character in the lowest byte
//     4   flags        u32      0 (reserved: a reader rejects anything else)
//     8   length       u64      payload bytes
//     16  payload crc  u32      CRC-32 of the payload
//     20  header crc   u32      CRC-32 of section header bytes [0, 20)
//     24  payload      `length` bytes
//   The file ends exactly after the last payload (trailing bytes are rejected).
//
// Every byte of a file is covered by exactly one CRC, so any single flipped bit (and any
// burst of up to 32 bits) is detected; a random multi-bit corruption escapes with
// probability 2^-32. The layout of each section's payload is defined by its user
// (io/padded_csr_file.hpp; training-state files: docs/checkpoint_format.md).
//
// CRC-32 is the IEEE 802.3 / zlib / PNG polynomial (reflected 0xEDB88320, initial and final
// xor 0xFFFFFFFF; crc32("123456789") = 0xCBF43926), computed here by slicing-by-8 so that
// io/ needs no zlib for checkpoints.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/error.hpp"

namespace sprig::binary {

inline constexpr std::array<char, 8> kMagic = {'S', 'P', 'R', 'I', 'G', 'C', 'K', 'P'};
inline constexpr std::uint32_t kFormatVersion = 1;
inline constexpr std::size_t kFileHeaderBytes = 24;
inline constexpr std::size_t kSectionHeaderBytes = 24;

enum class FileKind : std::uint16_t {
  padded_csr = 1,        // one PaddedCSR
  training_state = 2,    // model, optimizer, DST algorithm, progress
  block_padded_csr = 3,  // one BlockPaddedCSR
};

// ---- CRC-32 ----------------------------------------------------------------------------

namespace detail {
constexpr std::array<std::array<std::uint32_t, 256>, 8> make_crc_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][i] = c;
  }
  for (std::size_t j = 1; j < 8; ++j)
    for (std::size_t i = 0; i < 256; ++i) t[j][i] = (t[j - 1][i] >> 8) ^ t[0][t[j - 1][i] & 0xFFu];
  return t;
}
inline constexpr auto kCrcTables = make_crc_tables();
}  // namespace detail

// CRC-32 of `bytes`, continuing from `crc` (the CRC of the preceding bytes; 0 to start).
inline std::uint32_t crc32(std::span<const std::byte> bytes, std::uint32_t crc = 0) noexcept {
  const auto& t = detail::kCrcTables;
  std::uint32_t c = ~crc;
  const std::byte* p = bytes.data();
  std::size_t n = bytes.size();
  while (n >= 8) {
    const std::uint32_t lo =
        c ^ (std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 | std::uint32_t(p[3]) << 24);
    const std::uint32_t hi =
        std::uint32_t(p[4]) | std::uint32_t(p[5]) << 8 | std::uint32_t(p[6]) << 16 | std::uint32_t(p[7]) << 24;
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^
        t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = t[0][(c ^ std::uint32_t(*p++)) & 0xFF] ^ (c >> 8);
  return ~c;
}

// Four ASCII characters as a section tag: tag("CSR ").
constexpr std::uint32_t tag(const char (&s)[5]) noexcept {
  return std::uint32_t(std::uint8_t(s[0])) | std::uint32_t(std::uint8_t(s[1])) << 8 |
         std::uint32_t(std::uint8_t(s[2])) << 16 | std::uint32_t(std::uint8_t(s[3])) << 24;
}

// A tag as printable text ('CSR ', or hex when it is not printable ASCII).
inline std::string tag_name(std::uint32_t t) {
  std::string s = "'";
  for (int k = 0; k < 4; ++k) {
    const auto ch = static_cast<unsigned char>((t >> (8 * k)) & 0xFF);
    if (ch < 0x20 || ch > 0x7E) return sprig::detail::message("0x", std::hex, t);
    s += static_cast<char>(ch);
  }
  return s + "'";
}

// ---- little-endian scalars ----------------------------------------------------------------

// Arithmetic types as stored: integers of 1-8 bytes and float/double (as their bit patterns).
template <class V>
concept Storable = (std::is_integral_v<V> || std::is_same_v<V, float> ||
                    std::is_same_v<V, double>)&&!std::is_same_v<V, bool> &&
                   sizeof(V) <= 8;

namespace detail {
template <class V>
using UnsignedOfSize = std::conditional_t<
    sizeof(V) == 1, std::uint8_t,
    std::conditional_t<sizeof(V) == 2, std::uint16_t, std::conditional_t<sizeof(V) == 4, std::uint32_t, std::uint64_t>>>;

template <Storable V>
void store_le(std::byte* out, V v) noexcept {
  const auto u = std::bit_cast<UnsignedOfSize<V>>(v);
  for (std::size_t k = 0; k < sizeof(V); ++k) out[k] = static_cast<std::byte>((std::uint64_t(u) >> (8 * k)) & 0xFF);
}
template <Storable V>
V load_le(const std::byte* in) noexcept {
  std::uint64_t u = 0;
  for (std::size_t k = 0; k < sizeof(V); ++k) u |= std::uint64_t(in[k]) << (8 * k);
  return std::bit_cast<V>(static_cast<UnsignedOfSize<V>>(u));
}
}  // namespace detail

// ---- writer ----------------------------------------------------------------------------------

// Builds a whole file in memory: header(), then begin_section / values / end_section per
// section, then finish() fills in the section count and the header CRC. O(bytes written);
// one Writer per thread.
class Writer {
public:
  void header(FileKind kind, std::uint8_t value_type, std::uint8_t index_type) {
    bytes_.assign(kMagic.size(), std::byte{0});
    std::memcpy(bytes_.data(), kMagic.data(), kMagic.size());
    put(kFormatVersion);
    put(static_cast<std::uint16_t>(kind));
    put(value_type);
    put(index_type);
    put(std::uint32_t{0});  // section count, set by finish()
    put(std::uint32_t{0});  // header CRC, set by finish()
    sections_ = 0;
  }

  void begin_section(std::uint32_t section_tag) {
    if (section_start_ != kNone) throw Error("binary::Writer: begin_section inside an open section");
    section_start_ = bytes_.size();
    put(section_tag);
    put(std::uint32_t{0});  // flags
    put(std::uint64_t{0});  // length, set by end_section()
    put(std::uint32_t{0});  // payload CRC
    put(std::uint32_t{0});  // header CRC
  }

  void end_section() {
    if (section_start_ == kNone) throw Error("binary::Writer: end_section without begin_section");
    std::byte* h = bytes_.data() + section_start_;
    const std::size_t payload = section_start_ + kSectionHeaderBytes;
    sprig::binary::detail::store_le(h + 8, static_cast<std::uint64_t>(bytes_.size() - payload));
    sprig::binary::detail::store_le(h + 16, crc32(std::span<const std::byte>(bytes_).subspan(payload)));
    sprig::binary::detail::store_le(h + 20, crc32(std::span<const std::byte>(h, 20)));
    section_start_ = kNone;
    ++sections_;
  }

  template <Storable V>
  void put(V v) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + sizeof(V));
    sprig::binary::detail::store_le(bytes_.data() + at, v);
  }
  void put_bool(bool b) { put(static_cast<std::uint8_t>(b ? 1 : 0)); }

  // Values of an array, without a count (the reader knows it from earlier fields).
  template <Storable V>
  void put_array(std::span<const V> values) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + values.size() * sizeof(V));
    std::byte* out = bytes_.data() + at;
    if constexpr (std::endian::native == std::endian::little) {
      if (!values.empty()) std::memcpy(out, values.data(), values.size() * sizeof(V));
    } else {
      for (std::size_t k = 0; k < values.size(); ++k) sprig::binary::detail::store_le(out + k * sizeof(V), values[k]);
    }
  }

  // A string as u32 length + bytes.
  void put_string(std::string_view s) {
    put(static_cast<std::uint32_t>(s.size()));
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    bytes_.insert(bytes_.end(), p, p + s.size());
  }

  // Completes the file and hands over its bytes.
  std::vector<std::byte> finish() {
    if (section_start_ != kNone) throw Error("binary::Writer: finish inside an open section");
    if (bytes_.size() < kFileHeaderBytes) throw Error("binary::Writer: finish without header");
    sprig::binary::detail::store_le(bytes_.data() + 16, sections_);
    sprig::binary::detail::store_le(bytes_.data() + 20, crc32(std::span<const std::byte>(bytes_.data(), 20)));
    return std::move(bytes_);
  }

private:
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  std::vector<std::byte> bytes_;
  std::size_t section_start_ = kNone;
  std::uint32_t sections_ = 0;
};

// ---- reader ----------------------------------------------------------------------------------

// Reads fields from a span of bytes with bounds checks. Every failure throws FormatError
// "<source>: <where>, offset <file offset>: <what>".
class Reader {
public:
  Reader(std::span<const std::byte> bytes, std::string source, std::string where, std::int64_t base_offset)
      : bytes_(bytes), source_(std::move(source)), where_(std::move(where)), base_(base_offset) {}

  std::int64_t offset() const noexcept { return base_ + static_cast<std::int64_t>(pos_); }
  std::size_t remaining() const noexcept { return bytes_.size() - pos_; }
  const std::string& source() const noexcept { return source_; }
  const std::string& where() const noexcept { return where_; }

  template <class... Parts>
  [[noreturn]] void fail_at(std::int64_t offset, Parts&&... parts) const {
    throw FormatError(
        sprig::detail::message(source_, ": ", where_, ", offset ", offset, ": ", std::forward<Parts>(parts)...));
  }
  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    fail_at(offset(), std::forward<Parts>(parts)...);
  }

  template <Storable V>
  V get(std::string_view what) {
    need(sizeof(V), what);
    const V v = sprig::binary::detail::load_le<V>(bytes_.data() + pos_);
    pos_ += sizeof(V);
    return v;
  }
  bool get_bool(std::string_view what) {
    const std::int64_t at = offset();
    const auto b = get<std::uint8_t>(what);
    if (b > 1) fail_at(at, what, " is ", int(b), ", expected 0 or 1");
    return b == 1;
  }
  // A count or dimension stored as i64: must lie in [0, max].
  std::int64_t get_count(std::string_view what, std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
    const std::int64_t at = offset();
    const auto v = get<std::int64_t>(what);
    if (v < 0 || v > max) fail_at(at, what, " is ", v, ", outside [0, ", max, "]");
    return v;
  }

  // `count` values into `out` (resized). The count is checked against the bytes left
  // before anything is allocated, so a lying field costs nothing.
  template <Storable V, class Vec>
  void get_array(std::int64_t count, Vec& out, std::string_view what) {
    if (count < 0 || static_cast<std::uint64_t>(count) > remaining() / sizeof(V))
      fail(what, ": ", count, " values of ", sizeof(V), " bytes, but the section has only ", remaining(),
           " bytes left");
    out.resize(static_cast<std::size_t>(count));
    const std::byte* in = bytes_.data() + pos_;
    if constexpr (std::endian::native == std::endian::little) {
      if (count > 0) std::memcpy(out.data(), in, static_cast<std::size_t>(count) * sizeof(V));
    } else {
      for (std::int64_t k = 0; k < count; ++k) out[k] = sprig::binary::detail::load_le<V>(in + k * sizeof(V));
    }
    pos_ += static_cast<std::size_t>(count) * sizeof(V);
  }

  std::string get_string(std::string_view what, std::size_t max_length) {
    const std::int64_t at = offset();
    const auto n = get<std::uint32_t>(what);
    if (n > max_length) fail_at(at, what, " has length ", n, ", more than the allowed ", max_length);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  // Throws unless every byte has been read.
  void expect_end() const {
    if (remaining() != 0) fail(remaining(), " unexpected bytes after the last field");
  }

private:
  void need(std::size_t n, std::string_view what) const {
    if (n > remaining()) fail("truncated: ", what, " needs ", n, " bytes, ", remaining(), " left");
  }

  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
  std::string source_;
  std::string where_;
  std::int64_t base_;
};

// A parsed file: its header fields and its sections, each checked against its CRCs.
struct Section {
  std::uint32_t tag = 0;
  std::size_t index = 0;            // 0-based position in the file
  std::int64_t payload_offset = 0;  // file offset of the first payload byte
  std::span<const std::byte> payload;
};

struct Container {
  FileKind kind{};
  std::uint8_t value_type = 0;
  std::uint8_t index_type = 0;
  std::vector<Section> sections;
  std::string source;

  // A reader over section k's payload, whose errors name the file, the section and offsets.
  Reader reader(std::size_t k) const {
    const Section& s = sections.at(k);
    return Reader(s.payload, source, sprig::detail::message("section ", s.index, " ", tag_name(s.tag)),
                  s.payload_offset);
  }
};

// Parses and checks the container: magic, version, header CRC, every section header and
// payload against its CRCs and the bytes present, no trailing bytes. Section payloads are
// views into `file`, which must outlive the result. `source` names the input in messages.
inline Container parse_container(std::span<const std::byte> file, std::string source) {
  Reader r(file, source, "file header", 0);
  if (file.size() < kFileHeaderBytes)
    r.fail("truncated: ", file.size(), " bytes, smaller than the ", kFileHeaderBytes, "-byte file header");
  if (std::memcmp(file.data(), kMagic.data(), kMagic.size()) != 0)
    r.fail("wrong magic number: not a sprig binary file (expected \"SPRIGCKP\")");
  const auto header_crc = sprig::binary::detail::load_le<std::uint32_t>(file.data() + 20);
  // The version first: a future version may lay out its header differently.
  const auto version = sprig::binary::detail::load_le<std::uint32_t>(file.data() + 8);
  if (version != kFormatVersion)
    r.fail_at(8, "format version ", version, " is not supported (this reader reads version ", kFormatVersion, ")");
  if (crc32(file.first(20)) != header_crc)
    r.fail_at(20, "header checksum mismatch (stored ", header_crc, ", computed ", crc32(file.first(20)),
              "): the header is corrupt");
  Container c;
  c.source = source;
  c.kind = static_cast<FileKind>(sprig::binary::detail::load_le<std::uint16_t>(file.data() + 12));
  c.value_type = sprig::binary::detail::load_le<std::uint8_t>(file.data() + 14);
  c.index_type = sprig::binary::detail::load_le<std::uint8_t>(file.data() + 15);
  const auto count = sprig::binary::detail::load_le<std::uint32_t>(file.data() + 16);
  if (count > (file.size() - kFileHeaderBytes) / kSectionHeaderBytes)
    r.fail_at(16, "header declares ", count, " sections but the file has only ", file.size(),
              " bytes (truncated or corrupt)");
  c.sections.reserve(count);
  std::size_t pos = kFileHeaderBytes;
  for (std::uint32_t k = 0; k < count; ++k) {
    Reader sr(file, source, sprig::detail::message("section ", k, " header"), 0);
    if (file.size() - pos < kSectionHeaderBytes)
      sr.fail_at(static_cast<std::int64_t>(pos), "truncated: the section header needs ", kSectionHeaderBytes,
                 " bytes, ", file.size() - pos, " left");
    const std::byte* h = file.data() + pos;
    const auto hcrc = sprig::binary::detail::load_le<std::uint32_t>(h + 20);
    if (crc32(std::span<const std::byte>(h, 20)) != hcrc)
      sr.fail_at(static_cast<std::int64_t>(pos), "section header checksum mismatch: the header is corrupt");
    Section s;
    s.tag = sprig::binary::detail::load_le<std::uint32_t>(h);
    s.index = k;
    const auto flags = sprig::binary::detail::load_le<std::uint32_t>(h + 4);
    const auto length = sprig::binary::detail::load_le<std::uint64_t>(h + 8);
    const auto pcrc = sprig::binary::detail::load_le<std::uint32_t>(h + 16);
    const std::string where = sprig::detail::message("section ", k, " ", tag_name(s.tag));
    Reader pr(file, source, where, 0);
    if (flags != 0) pr.fail_at(static_cast<std::int64_t>(pos + 4), "unsupported section flags ", flags);
    pos += kSectionHeaderBytes;
    if (length > file.size() - pos)
      pr.fail_at(static_cast<std::int64_t>(pos - 16), "truncated: the payload is declared as ", length,
                 " bytes but only ", file.size() - pos, " remain");
    s.payload = file.subspan(pos, static_cast<std::size_t>(length));
    s.payload_offset = static_cast<std::int64_t>(pos);
    const std::uint32_t computed = crc32(s.payload);
    if (computed != pcrc)
      pr.fail_at(static_cast<std::int64_t>(pos), "payload checksum mismatch (stored ", pcrc, ", computed ", computed,
                 "): the section is corrupt");
    pos += static_cast<std::size_t>(length);
    c.sections.push_back(s);
  }
  if (pos != file.size())
    r.fail_at(static_cast<std::int64_t>(pos), file.size() - pos, " unexpected bytes after the last section");
  return c;
}

}  // namespace sprig::binary
