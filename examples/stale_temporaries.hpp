// examples/stale_temporaries.hpp — removing what a killed checkpoint save leaves behind.
//
// A save writes "<name>.tmp.XXXXXX" beside the checkpoint and renames it over the checkpoint
// (sprig/io/atomic_file.hpp: mkstemp's six letters or digits). A process killed in between
// leaves that temporary, as large as the checkpoint, and nothing else ever removes it. The
// examples call this before their first save: it removes exactly the files named so for their
// own checkpoint, nothing else in the directory.
#pragma once

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace examples {

// Whether `name` is "<target>.tmp." followed by exactly six ASCII letters or digits.
inline bool is_save_temporary(const std::string& name, const std::string& target) {
  const std::string prefix = target + ".tmp.";
  if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) return false;
  for (std::size_t i = prefix.size(); i < name.size(); ++i)
    if (!std::isalnum(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

// Removes the stale temporaries of saves of `checkpoint` (see above) and returns how many; a
// directory that cannot be read or a file that cannot be removed is skipped (the save that
// follows reports a real problem). Call it from one process only (rank 0), before a save and
// not during one.
inline std::int64_t remove_stale_temporaries(const std::filesystem::path& checkpoint) {
  const std::filesystem::path dir =
      checkpoint.has_parent_path() ? checkpoint.parent_path() : std::filesystem::path(".");
  const std::string target = checkpoint.filename().string();
  std::int64_t removed = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (is_save_temporary(it->path().filename().string(), target) && it->is_regular_file(e2) &&
        std::filesystem::remove(it->path(), e2))
      ++removed;
  }
  return removed;
}

}  // namespace examples
