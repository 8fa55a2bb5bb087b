// sprig/io/atomic_file.hpp — whole-file reads and atomic whole-file writes, for sprig's
// binary files (io/padded_csr_file.hpp, io/checkpoint.hpp).
//
// Writes are atomic: the file is written to "<name>.tmp.XXXXXX" beside the target,
// flushed with fsync, renamed over the target, and the directory is fsynced. A crash at any
// point leaves either the previous file or the new one (and possibly a stale temporary,
// never read). POSIX only.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "../core/error.hpp"

namespace sprig::detail::ckpt {

// The whole regular file at `path`; the buffer grows with the bytes really read (never
// sized from the file system's claim). Throws FormatError naming the path for a missing,
// non-regular or unreadable file.
inline std::vector<std::byte> read_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) throw FormatError(message(path.string(), ": cannot open: no such file"));
  if (!std::filesystem::is_regular_file(status)) throw FormatError(message(path.string(), ": not a regular file"));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw FormatError(message(path.string(), ": cannot open: ", std::strerror(errno)));
  std::vector<std::byte> bytes;
  std::byte buffer[1 << 16];
  for (;;) {
    const std::size_t n = std::fread(buffer, 1, sizeof buffer, f);
    bytes.insert(bytes.end(), buffer, buffer + n);  // grows with the bytes really read
    if (n < sizeof buffer) break;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw FormatError(message(path.string(), ": read error after ", bytes.size(), " bytes"));
  return bytes;
}

// Writes `bytes` to `path` atomically (see the header comment). Throws sprig::Error with
// errno's text; on failure the temporary is removed and `path` is untouched.
inline void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes, const char* fn) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::string tmp = (dir / (path.filename().string() + ".tmp.XXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    throw Error(message(fn, ": cannot create a temporary file beside ", path.string(), ": ", std::strerror(errno)));
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(
        message(fn, ": ", what, " ", tmp, " failed: ", std::strerror(err), "; ", path.string(), " is unchanged"));
  };
  const std::byte* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ::ssize_t n = ::write(fd, p, std::min<std::size_t>(left, std::size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("writing");
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) fail("setting permissions of");
  if (::fsync(fd) != 0) fail("flushing");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(message(fn, ": closing ", tmp, " failed: ", std::strerror(err), "; ", path.string(), " is unchanged"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(message(fn, ": renaming ", tmp, " to ", path.string(), " failed: ", std::strerror(err), "; ",
                        path.string(), " is unchanged"));
  }
  // Make the rename durable. A failure here cannot be undone (the new file is in place).
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace sprig::detail::ckpt
