// examples/run_settings.hpp — what defines an example's run (the model, the optimizer, the
// schedule, the topology algorithm, the data), saved in every checkpoint and compared with the
// options of a run that resumes from it, so that a resume never quietly trains another model
// or reports options the checkpoint was not made with.
//
// Keys are the options' names ("--heads"); values are the options' values after the program
// has resolved its defaults, written so that equal options give equal text (add_setting).
// Options that may change on resume (how long, how many threads, evaluation, sampling, output
// files) are not settings; each example lists them in its --help.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>

#include <sprig/core/error.hpp>
#include <sprig/io/checkpoint.hpp>

namespace examples {

// Adds the setting `key` with `value` as text: strings as they are, bools as true/false,
// integers in decimal, doubles as %g with the fewest digits that read back as the same double.
template <class V>
void add_setting(sprig::RunSettings& s, const std::string& key, const V& value) {
  if constexpr (std::is_same_v<V, bool>) {
    s.emplace_back(key, value ? "true" : "false");
  } else if constexpr (std::is_integral_v<V>) {
    s.emplace_back(key, std::to_string(value));
  } else if constexpr (std::is_floating_point_v<V>) {
    // %g with the fewest digits that read back as the same double: 0.0001, 0.004, 1e-06
    char buf[40];
    const double v = static_cast<double>(value);
    for (int digits = 1; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    s.emplace_back(key, buf);
  } else {
    s.emplace_back(key, std::string(value));
  }
}

// The file a run given --checkpoint DIR saves its training state to: DIR/state.sprig (empty
// when there is no DIR).
inline std::filesystem::path checkpoint_state_file(const std::string& dir) {
  return dir.empty() ? std::filesystem::path() : std::filesystem::path(dir) / "state.sprig";
}

// The value of setting `key` in `s`, or null.
inline const std::string* find_setting(const sprig::RunSettings& s, const std::string& key) {
  for (const auto& [k, v] : s)
    if (k == key) return &v;
  return nullptr;
}

// The settings a resume must match: those stored in `checkpoint` when `resume` and the file
// exists (empty for a checkpoint written before settings were stored), else none. Reads
// the file (sprig::read_run_settings); throws its FormatError for a damaged one.
inline std::optional<sprig::RunSettings> resume_settings(bool resume, const std::filesystem::path& checkpoint) {
  if (!resume || checkpoint.empty() || !std::filesystem::exists(checkpoint)) return std::nullopt;
  return sprig::read_run_settings(checkpoint);
}

// Refuses a resume whose settings differ from those stored in `checkpoint`: throws
// sprig::ArgumentError naming every option that differs with both values, e.g.
//   "char_gpt: --resume: the checkpoint ck/state.sprig was made with --heads 4, this run has
//    --heads 8; the options that define the model and the run cannot change on resume
//    (--help lists those that can)"
// A setting this run has and the checkpoint lacks, or the reverse, is refused the same way
// (another version of the program wrote it). A checkpoint without any settings (written
// before they were stored) is accepted with a warning on stderr: only the file's own checks
// (shapes, optimizer, algorithm) apply to it. `saved` is resume_settings' (the file is read
// once); `checkpoint` names the file in the messages.
inline void check_resume_settings(const std::string& program, const std::filesystem::path& checkpoint,
                                  const sprig::RunSettings& saved, const sprig::RunSettings& current) {
  if (saved.empty()) {
    std::fprintf(stderr,
                 "%s: warning: %s records no run settings (an older checkpoint): the options that define the run "
                 "are not checked against it\n",
                 program.c_str(), checkpoint.c_str());
    return;
  }
  const std::string head = program + ": --resume: the checkpoint " + checkpoint.string();
  const std::string tail =
      "; the options that define the model and the run cannot change on resume (--help lists "
      "those that can)";
  std::string was, now, missing;
  for (const auto& [key, value] : current) {
    const std::string* saved_value = find_setting(saved, key);
    if (!saved_value)
      missing += (missing.empty() ? "" : ", ") + key;
    else if (*saved_value != value) {
      was += (was.empty() ? "" : " ") + key + " " + *saved_value;
      now += (now.empty() ? "" : " ") + key + " " + value;
    }
  }
  if (!was.empty()) throw sprig::ArgumentError(head + " was made with " + was + ", this run has " + now + tail);
  if (!missing.empty()) throw sprig::ArgumentError(head + " records no " + missing + tail);
  for (const auto& [key, value] : saved)
    if (!find_setting(current, key))
      throw sprig::ArgumentError(head + " was made with " + key + " " + value + ", which this program does not know" +
                                 tail);
}

// The column index width an example's --index-bits asks for: "16" and "32" as given; "auto"
// takes the width a resume's checkpoint was made with (its --index-bits in `saved`, from
// resume_settings, so a run saved before the default changed resumes as it was), else 16
// where `fits_16` (every sparse layer unstructured with at most 32768 inputs), else 32.
// 16-bit indices keep 2 bytes less per live weight and run no slower (docs/transformers.md,
// "Index width by default"). Throws ArgumentError for another value.
inline int resolve_index_bits(const std::string& program, const std::string& option, bool fits_16,
                              const std::optional<sprig::RunSettings>& saved) {
  if (option == "16") return 16;
  if (option == "32") return 32;
  if (option != "auto") throw sprig::ArgumentError(program + ": --index-bits " + option + " is none of auto, 16, 32");
  const std::string* bits = saved ? find_setting(*saved, "--index-bits") : nullptr;
  if (bits && (*bits == "16" || *bits == "32")) return *bits == "16" ? 16 : 32;
  return fits_16 ? 16 : 32;
}

}  // namespace examples
