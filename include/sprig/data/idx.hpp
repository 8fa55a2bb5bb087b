// sprig/data/idx.hpp — reader for IDX files (the MNIST / Fashion-MNIST format), plain or
// gzip-compressed, and a loader for a labelled image set stored as two IDX files (the
// Fashion-MNIST loader of the examples, examples/fashion_mnist_data.hpp, is built on it).
//
// Format (all integers big-endian):
//   offset 0   0x00 0x00 <type> <rank>    magic; type 0x08 = unsigned byte
//   offset 4   rank x uint32               dimensions, slowest first
//   offset 4 + 4 rank                      prod(dims) elements, row-major (last dim fastest)
// Images are magic 0x00000803 (N x rows x cols), labels 0x00000801 (N). Only the unsigned
// byte type is read; the other IDX types (int8, int16, int32, float32, float64) are
// reported as unsupported.
//
// Compression is detected from the content (gzip magic 1f 8b), not the file name.
// Concatenated gzip members are one stream (RFC 1952); each member's CRC-32 and length
// are verified.
//
// Dependency: gzip support needs zlib, used by this header only (the rest of sprig stays
// header-only with xsimd). A consumer that includes it links zlib (CMake:
// find_package(ZLIB) + target_link_libraries(app PRIVATE ZLIB::ZLIB)). Defining
// SPRIG_NO_ZLIB before the include drops the dependency; gzip input then throws.
//
// Hardening: every malformed input throws sprig::FormatError naming the file and the
// byte offset (for gzip input, both the decompressed and the compressed offset): missing
// or unreadable file, wrong magic, unsupported type, rank 0, a dimension product that
// overflows or exceeds IdxReadOptions::max_bytes, a payload that the file cannot hold,
// truncation, trailing bytes after the payload (rejected, not ignored: a file with extra
// data is not what its header says), corrupt or truncated gzip data. No allocation is
// sized from an unchecked field: the declared payload is first checked against
// max_bytes and the file size (exactly for plain files; for gzip against deflate's
// maximum expansion of 1032:1), and a gzip payload buffer then grows only as decompressed
// bytes actually arrive, so a header that lies costs at most what the stream holds.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#if !defined(SPRIG_NO_ZLIB)
#  include <zlib.h>
#endif

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/matrix.hpp"

namespace sprig {

// An IDX array of unsigned bytes: dims as declared, data row-major (last dim fastest).
// Everything in this header runs on the calling thread and reads the input once.
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;

  std::int64_t rank() const noexcept { return static_cast<std::int64_t>(dims.size()); }
  std::int64_t size() const noexcept { return static_cast<std::int64_t>(data.size()); }
};

// Limits of read_idx.
struct IdxReadOptions {
  // Required rank (3 for images, 1 for labels); 0 accepts any rank from 1 to 255.
  int expected_rank = 0;
  // Largest payload accepted, in bytes. The default (4 GiB) is ~90x Fashion-MNIST's
  // training images; raise it for larger data.
  std::uint64_t max_bytes = std::uint64_t{1} << 32;
};

namespace detail {

// Deflate's largest expansion: a 258-byte match coded in 2 bits (zlib's FAQ), so a gzip
// file of n bytes decompresses to at most 1032 n bytes.
inline constexpr std::uint64_t kMaxDeflateRatio = 1032;

// A byte source over a file or a memory buffer that decompresses gzip transparently and
// tracks offsets for error messages.
class IdxInput {
public:
  explicit IdxInput(const std::filesystem::path& path) : name_(path.string()) {
    // Only regular files: opening a FIFO could block forever and a device need not end.
    std::error_code status_error;
    const auto status = std::filesystem::status(path, status_error);
    if (!status_error && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
      throw FormatError(message("read_idx: '", name_, "' is not a regular file"));
    errno = 0;
    file_.reset(std::fopen(path.c_str(), "rb"));
    if (!file_) {
      const int err = errno;
      throw FormatError(
          message("read_idx: cannot open '", name_, "': ", err != 0 ? std::strerror(err) : "unknown error"));
    }
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec) raw_size_ = static_cast<std::uint64_t>(size);
    buffer_.resize(std::size_t{1} << 16);
    detect();
  }

  IdxInput(std::span<const std::uint8_t> bytes, std::string name)
      : name_(std::move(name)), memory_(bytes), raw_size_(bytes.size()) {
    detect();
  }

  ~IdxInput() {
#if !defined(SPRIG_NO_ZLIB)
    if (inflate_ready_) inflateEnd(&zs_);
#endif
  }
  IdxInput(const IdxInput&) = delete;
  IdxInput& operator=(const IdxInput&) = delete;

  const std::string& name() const noexcept { return name_; }
  bool gzip() const noexcept { return gzip_; }
  // Size of the raw (possibly compressed) input, when the file system reports one.
  bool raw_size_known() const noexcept { return raw_size_ != kUnknown; }
  std::uint64_t raw_size() const noexcept { return raw_size_; }
  // Bytes delivered so far (decompressed for gzip input).
  std::uint64_t offset() const noexcept { return offset_; }

  // " at offset N" or " at decompressed offset N (compressed offset M)".
  std::string where() const { return where(offset_); }
  std::string where(std::uint64_t offset) const {
    if (!gzip_) return message(" at offset ", offset);
    return message(" at decompressed offset ", offset, " (compressed offset ", raw_consumed(), ")");
  }

  // " at offset N" or " at decompressed offset N", for positions already passed.
  std::string at(std::uint64_t offset) const {
    return message(gzip_ ? " at decompressed offset " : " at offset ", offset);
  }

  // Reads up to n bytes; fewer only at the end of the data. Throws on corrupt input.
  std::size_t read(std::uint8_t* dst, std::size_t n) {
    const std::size_t got = gzip_ ? read_gzip(dst, n) : read_plain(dst, n);
    offset_ += got;
    return got;
  }

private:
  static constexpr std::uint64_t kUnknown = std::numeric_limits<std::uint64_t>::max();

  struct FileCloser {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };

  // Makes raw bytes available at in_ptr_/in_len_; returns false at the end of the input.
  bool refill() {
    if (in_len_ > 0) return true;
    if (!file_) {
      if (memory_pos_ >= memory_.size()) return false;
      in_ptr_ = memory_.data() + memory_pos_;
      in_len_ = memory_.size() - memory_pos_;
      memory_pos_ = memory_.size();
      raw_read_ += in_len_;
      return true;
    }
    const std::size_t got = std::fread(buffer_.data(), 1, buffer_.size(), file_.get());
    if (got == 0) {
      if (std::ferror(file_.get()))
        throw FormatError(
            message("read_idx: '", name_, "': read error at file offset ", raw_read_, ": ", std::strerror(errno)));
      return false;
    }
    in_ptr_ = buffer_.data();
    in_len_ = got;
    raw_read_ += got;
    return true;
  }

  std::uint64_t raw_consumed() const noexcept { return raw_read_ - in_len_; }

  void detect() {
    if (!refill()) return;  // empty input: the header read reports it
    // The first refill holds min(file size, 64 KiB) bytes, so both magic bytes are in it.
    gzip_ = in_len_ >= 2 && in_ptr_[0] == 0x1f && in_ptr_[1] == 0x8b;
    if (!gzip_) return;
#if defined(SPRIG_NO_ZLIB)
    throw FormatError(message("read_idx: '", name_, "' is gzip-compressed, but sprig was built with SPRIG_NO_ZLIB"));
#else
    std::memset(&zs_, 0, sizeof zs_);
    if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK)  // 16: expect a gzip wrapper
      throw FormatError(message("read_idx: '", name_, "': zlib initialisation failed"));
    inflate_ready_ = true;
#endif
  }

  std::size_t read_plain(std::uint8_t* dst, std::size_t n) {
    std::size_t done = 0;
    while (done < n && refill()) {
      const std::size_t take = std::min(n - done, in_len_);
      std::memcpy(dst + done, in_ptr_, take);
      in_ptr_ += take;
      in_len_ -= take;
      done += take;
    }
    return done;
  }

#if defined(SPRIG_NO_ZLIB)
  std::size_t read_gzip(std::uint8_t*, std::size_t) { return 0; }  // unreachable: detect() throws
#else
  std::size_t read_gzip(std::uint8_t* dst, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      if (member_done_) {
        // The previous gzip member ended: the input must end here or hold another member.
        if (!refill()) break;
        inflateReset(&zs_);
        member_done_ = false;
        next_member_ = true;
      }
      if (in_len_ == 0 && !refill())
        throw FormatError(message("read_idx: '", name_, "': truncated gzip stream", where(offset_ + done),
                                  ": the compressed data ends before the end of the gzip member"));
      const std::size_t chunk = std::min<std::size_t>(n - done, std::size_t{1} << 30);
      zs_.next_in = const_cast<Bytef*>(in_ptr_);
      zs_.avail_in = static_cast<uInt>(std::min<std::size_t>(in_len_, std::size_t{1} << 30));
      zs_.next_out = dst + done;
      zs_.avail_out = static_cast<uInt>(chunk);
      const uInt avail_in_before = zs_.avail_in;
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      const std::size_t used = avail_in_before - zs_.avail_in;
      const std::size_t produced = chunk - zs_.avail_out;
      in_ptr_ += used;
      in_len_ -= used;
      done += produced;
      if (rc == Z_STREAM_END) {
        member_done_ = true;
        next_member_ = false;
        continue;
      }
      if (produced > 0) next_member_ = false;
      if (rc == Z_OK && (used > 0 || produced > 0)) continue;
      // Anything else (Z_DATA_ERROR, Z_NEED_DICT, Z_MEM_ERROR, Z_BUF_ERROR = no progress
      // with input and output space available) is a corrupt stream; failing here is what
      // guarantees the loop cannot spin.
      const char* why = zs_.msg != nullptr ? zs_.msg : (rc == Z_MEM_ERROR ? "out of memory" : "no progress");
      if (next_member_)
        throw FormatError(message("read_idx: '", name_, "': trailing bytes after the gzip stream",
                                  where(offset_ + done), " are not a gzip member (", why, ")"));
      throw FormatError(message("read_idx: '", name_, "': corrupt gzip data", where(offset_ + done), ": ", why));
    }
    return done;
  }
#endif

  std::string name_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::span<const std::uint8_t> memory_;
  std::size_t memory_pos_ = 0;
  std::vector<std::uint8_t> buffer_;
  const std::uint8_t* in_ptr_ = nullptr;
  std::size_t in_len_ = 0;
  std::uint64_t raw_read_ = 0;
  std::uint64_t raw_size_ = kUnknown;
  std::uint64_t offset_ = 0;
  bool gzip_ = false;
#if !defined(SPRIG_NO_ZLIB)
  z_stream zs_{};
  bool inflate_ready_ = false;
  bool member_done_ = false;
  bool next_member_ = false;  // inside a member that started after a previous one ended
#endif
};

inline const char* idx_type_name(unsigned code) noexcept {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown";
  }
}

inline IdxArray read_idx(IdxInput& in, const IdxReadOptions& options) {
  const std::string& name = in.name();
  std::array<std::uint8_t, 4> word{};
  auto read_word = [&](const char* what) {
    const std::uint64_t at = in.offset();
    const std::size_t got = in.read(word.data(), 4);
    if (got != 4)
      throw FormatError(message("read_idx: '", name, "': truncated header: ", what, " needs 4 bytes", in.at(at),
                                ", only ", got, " remain"));
    return (std::uint32_t{word[0]} << 24) | (std::uint32_t{word[1]} << 16) | (std::uint32_t{word[2]} << 8) |
           std::uint32_t{word[3]};
  };

  const std::uint32_t magic = read_word("the magic number");
  auto hex = [](std::uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08X", static_cast<unsigned>(v));
    return std::string(buf);
  };
  if ((magic >> 16) != 0)
    throw FormatError(message("read_idx: '", name, "': wrong magic ", hex(magic), in.at(0),
                              " (an IDX file starts with two zero bytes, e.g. 0x00000803)"));
  const unsigned type = (magic >> 8) & 0xFF;
  const int rank = static_cast<int>(magic & 0xFF);
  if (type != 0x08)
    throw FormatError(message("read_idx: '", name, "': unsupported IDX type code 0x", std::hex, type, std::dec, " (",
                              idx_type_name(type), ")", in.at(2), "; only 0x08 (unsigned byte) is read"));
  if (rank == 0) throw FormatError(message("read_idx: '", name, "': rank 0", in.at(3), " (magic ", hex(magic), ")"));
  if (options.expected_rank != 0 && rank != options.expected_rank)
    throw FormatError(message("read_idx: '", name, "': rank ", rank, in.at(3), " (magic ", hex(magic),
                              "), expected rank ", options.expected_rank, " (magic ",
                              hex(0x800u | static_cast<unsigned>(options.expected_rank)), ")"));

  IdxArray out;
  out.dims.reserve(static_cast<std::size_t>(rank));  // rank <= 255
  std::uint64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    const std::uint64_t at = in.offset();
    const std::uint32_t dim = read_word("a dimension");
    out.dims.push_back(dim);
    // count * dim <= max_bytes, checked without overflow (max_bytes < 2^64, dim < 2^32).
    if (dim != 0 && count > options.max_bytes / dim) {
      std::string dims;
      for (std::size_t k = 0; k < out.dims.size(); ++k) dims += (k ? " x " : "") + std::to_string(out.dims[k]);
      throw FormatError(message("read_idx: '", name, "': dimensions ", dims, " (dimension ", d, in.at(at),
                                ") exceed the limit of ", options.max_bytes, " bytes (IdxReadOptions::max_bytes)"));
    }
    count *= dim;
  }
  const std::uint64_t header = 4 + 4 * static_cast<std::uint64_t>(rank);

  if (in.raw_size_known()) {
    if (!in.gzip()) {
      const std::uint64_t have = in.raw_size() >= header ? in.raw_size() - header : 0;
      if (have != count)
        throw FormatError(message("read_idx: '", name, "': the header declares ", count, " bytes of data at offset ",
                                  header, " but the file holds ", have,
                                  have < count ? " (truncated)" : " (trailing bytes)"));
    } else if (in.raw_size() <= (std::numeric_limits<std::uint64_t>::max() - header) / kMaxDeflateRatio &&
               header + count > in.raw_size() * kMaxDeflateRatio) {
      throw FormatError(message("read_idx: '", name, "': the header declares ", count,
                                " bytes of data, more than a gzip file of ", in.raw_size(),
                                " bytes can hold (deflate expands at most ", kMaxDeflateRatio, "x)"));
    }
  }

  // Proven sizes are allocated at once; otherwise the buffer grows (doubling, from 1 MiB)
  // only as bytes arrive.
  const bool proven = in.raw_size_known() && !in.gzip();
  std::size_t filled = 0;
  const auto total = static_cast<std::size_t>(count);
  while (filled < total) {
    const std::size_t step =
        proven ? total - filled : std::min(total - filled, std::max<std::size_t>(filled, 1u << 20));
    out.data.resize(filled + step);
    const std::size_t got = in.read(out.data.data() + filled, step);
    filled += got;
    if (got < step)
      throw FormatError(message("read_idx: '", name, "': truncated data", in.where(), ": the header declares ", count,
                                " bytes of data from offset ", header, ", only ", filled, " arrived"));
  }
  std::uint8_t extra = 0;
  if (in.read(&extra, 1) != 0)
    throw FormatError(message("read_idx: '", name, "': trailing bytes", in.where(header + count), " after the ", count,
                              " bytes of data the header declares"));
  return out;
}

}  // namespace detail

// Reads an IDX file of unsigned bytes, plain or gzip-compressed. O(file bytes), memory the
// payload (grown as gzip data arrives). Throws FormatError, naming the file and the offset,
// for every malformed, unreadable or oversized input (see the top).
inline IdxArray read_idx(const std::filesystem::path& path, const IdxReadOptions& options = {}) {
  detail::IdxInput in(path);
  return detail::read_idx(in, options);
}

// The same from bytes in memory (a plain or gzip-compressed IDX image); `name` stands for
// the file in error messages.
inline IdxArray read_idx(std::span<const std::uint8_t> bytes, std::string_view name = "<memory>",
                         const IdxReadOptions& options = {}) {
  detail::IdxInput in(bytes, std::string(name));
  return detail::read_idx(in, options);
}

// A labelled image set. Images are stored EXAMPLE-MAJOR, [N x (height * width)], one
// image per contiguous row, pixels row by row, value = byte / 255 in [0, 1]. That is the
// file's order, and it is the layout a shuffled mini-batch gathers from fastest (whole
// contiguous examples); the batch itself comes out feature-major (data/batches.hpp).
// transposed(images) gives the feature-major [features x N] matrix.
template <Value T>
struct LabeledImages {
  Matrix<T> images;
  std::vector<std::int32_t> labels;
  std::int64_t height = 0;
  std::int64_t width = 0;

  std::int64_t size() const noexcept { return images.rows(); }
  std::int64_t features() const noexcept { return images.cols(); }
};

// Loads an images file (rank 3: N x height x width) and its labels file (rank 1: N).
// Labels must lie in [0, num_classes) when num_classes > 0. O(file bytes); memory the two
// payloads plus N x height x width values of T. Throws FormatError for any malformed file,
// a count mismatch between the two, or a label out of range.
template <Value T = float>
LabeledImages<T> load_idx_images(const std::filesystem::path& images_path, const std::filesystem::path& labels_path,
                                 std::int32_t num_classes = 0, const IdxReadOptions& options = {}) {
  IdxReadOptions image_options = options;
  image_options.expected_rank = 3;
  IdxReadOptions label_options = options;
  label_options.expected_rank = 1;
  const IdxArray images = read_idx(images_path, image_options);
  const IdxArray labels = read_idx(labels_path, label_options);
  if (images.dims[0] != labels.dims[0])
    throw FormatError(detail::message("load_idx_images: images file '", images_path.string(), "' holds ",
                                      images.dims[0], " examples but labels file '", labels_path.string(), "' holds ",
                                      labels.dims[0]));
  LabeledImages<T> out;
  const std::int64_t n = images.dims[0];
  out.height = images.dims[1];
  out.width = images.dims[2];
  const std::int64_t features = out.height * out.width;  // <= max_bytes: no overflow
  out.images.resize(n, features);
  const T scale = T(1) / T(255);
  const std::uint8_t* src = images.data.data();
  for (std::int64_t i = 0; i < n; ++i) {
    T* row = out.images.row(i);
    for (std::int64_t f = 0; f < features; ++f) row[f] = static_cast<T>(src[i * features + f]) * scale;
  }
  out.labels.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t label = labels.data[static_cast<std::size_t>(i)];
    if (num_classes > 0 && label >= num_classes)
      throw FormatError(detail::message("load_idx_images: '", labels_path.string(), "': label ", label, " of example ",
                                        i, " (byte ", 8 + i, " of the decompressed file) is not below ", num_classes,
                                        " classes"));
    out.labels[static_cast<std::size_t>(i)] = label;
  }
  return out;
}

}  // namespace sprig
