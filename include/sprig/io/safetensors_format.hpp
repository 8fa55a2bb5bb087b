// sprig/io/safetensors_format.hpp — the safetensors container, model-free: a validating reader
// (parse_safetensors) and a writer (encode_safetensors_tensors). io/safetensors.hpp maps a
// model's parameters onto it.
//
// Layout (the safetensors specification): u64 little-endian N; N bytes of a JSON object
//   {"<tensor name>": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]},
//    ..., "__metadata__": {"<key>": "<string value>", ...}}
// (the writer pads it with spaces to a multiple of 8 bytes); then the data, every tensor
// row-major little-endian at [8 + N + begin, 8 + N + end).
//
// Dependency: nlohmann-json (Debian nlohmann-json3-dev, header <nlohmann/json.hpp>), needed by
// this header and io/safetensors.hpp only; the rest of sprig does not need it.
//
// Reader contract: parse_safetensors accepts exactly the files the specification allows and
// throws sprig::FormatError, naming the source and what is wrong, for everything else: a file
// shorter than 8 bytes, a header length past the file or above kSafetensorsMaxHeader, a header
// that is not JSON or not a JSON object, a key that appears twice in one JSON object, an entry
// that is not an object or lacks a string dtype, an integer shape or two integer data_offsets,
// an unknown dtype, negative or non-integer numbers, offsets reversed or past the data, a byte
// count that disagrees with shape x dtype size, tensors that overlap, bytes that belong to no
// tensor (holes, before, between or after the tensors), and __metadata__ that is not an object
// of strings. Nothing is read outside `bytes`; no allocation is sized from a field before that
// field is checked against the bytes that exist. O(file bytes + tensors log tensors).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"

namespace sprig {

// The largest header parse_safetensors accepts (the Python/Rust safetensors' own limit).
inline constexpr std::uint64_t kSafetensorsMaxHeader = 100'000'000;

// One tensor of a parsed file: its dtype name ("F32", ...), shape, byte range within the data
// section ([begin, end)), and a view of its bytes (valid while the parsed buffer lives).
struct SafetensorsTensor {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::int64_t begin = 0, end = 0;
  std::span<const std::byte> data;
};

// A parsed file: tensors by name, and the __metadata__ entries (empty when absent).
struct SafetensorsFile {
  std::string source;
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// A tensor to write: name, dtype name, shape and its little-endian bytes.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;
};

namespace detail::st {

// The specification's dtypes and their sizes in bytes; 0 for an unknown name.
inline int dtype_size(const std::string& d) noexcept {
  static const std::pair<const char*, int> table[] = {{"BOOL", 1},    {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1},
                                                      {"F8_E5M2", 1}, {"U16", 2}, {"I16", 2}, {"F16", 2},
                                                      {"BF16", 2},    {"U32", 4}, {"I32", 4}, {"F32", 4},
                                                      {"U64", 8},     {"I64", 8}, {"F64", 8}};
  for (const auto& [name, size] : table)
    if (d == name) return size;
  return 0;
}

// Appends v's bytes little-endian, whatever the host's byte order.
template <class V>
void put_le(std::vector<std::byte>& out, V v) {
  std::byte b[sizeof(V)];
  std::memcpy(b, &v, sizeof(V));
  if constexpr (std::endian::native == std::endian::big) std::reverse(b, b + sizeof(V));
  out.insert(out.end(), b, b + sizeof(V));
}

// Element k of a little-endian array of V at p (no alignment needed). Precondition: in range.
template <class V>
V get_le(const std::byte* p, std::int64_t k) noexcept {
  std::byte b[sizeof(V)];
  std::memcpy(b, p + k * static_cast<std::int64_t>(sizeof(V)), sizeof(V));
  if constexpr (std::endian::native == std::endian::big) std::reverse(b, b + sizeof(V));
  V v;
  std::memcpy(&v, b, sizeof(V));
  return v;
}

// Throws FormatError "<source>: <parts>".
template <class... Parts>
[[noreturn]] void fail(const std::string& source, Parts&&... parts) {
  throw FormatError(message(source, ": ", std::forward<Parts>(parts)...));
}

// Parses the header text; a key repeated within one object is an error (nlohmann keeps the
// last silently), found with the parser callback and one key set per open object.
inline nlohmann::json parse_header(std::string_view text, const std::string& source) {
  using json = nlohmann::json;
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  bool has_duplicate = false;
  auto on_event = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) open.emplace_back();
    if (ev == json::parse_event_t::object_end && !open.empty()) open.pop_back();
    if (ev == json::parse_event_t::key && !open.empty() && !open.back().insert(parsed.get<std::string>()).second &&
        !has_duplicate) {
      has_duplicate = true;
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    fail(source, "the header is not valid JSON: ", e.what());
  }
  if (has_duplicate) fail(source, "the header names '", duplicate, "' twice (duplicate key)");
  if (!header.is_object()) fail(source, "the header is not a JSON object (it is a ", header.type_name(), ")");
  return header;
}

// A JSON number that must be a non-negative integer, naming what it is in the error.
inline std::int64_t non_negative(const nlohmann::json& v, const std::string& source, const std::string& what) {
  if (!v.is_number_integer()) fail(source, what, " is not an integer (", v.dump(), ")");
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(source, what, " ", u, " is too large");
    return static_cast<std::int64_t>(u);
  }
  const auto s = v.get<std::int64_t>();
  if (s < 0) fail(source, what, " is negative (", s, ")");
  return s;
}

// One tensor entry, checked against the data section of `data_size` bytes.
inline SafetensorsTensor parse_entry(const std::string& name, const nlohmann::json& e, std::int64_t data_size,
                                     const std::string& source) {
  const std::string t = "tensor '" + name + "'";
  if (!e.is_object()) fail(source, t, ": its entry is not a JSON object (it is a ", e.type_name(), ")");
  SafetensorsTensor out;
  const auto dtype = e.find("dtype");
  if (dtype == e.end() || !dtype->is_string()) fail(source, t, ": no string \"dtype\"");
  out.dtype = dtype->get<std::string>();
  const int size = dtype_size(out.dtype);
  if (size == 0) fail(source, t, ": unknown dtype '", out.dtype, "'");
  const auto shape = e.find("shape");
  if (shape == e.end() || !shape->is_array()) fail(source, t, ": no \"shape\" array");
  for (const auto& d : *shape) out.shape.push_back(non_negative(d, source, t + ": a shape entry"));
  // bytes = product(shape) * size, computed only while it fits in int64 (no overflow).
  const bool empty = std::find(out.shape.begin(), out.shape.end(), 0) != out.shape.end();
  std::int64_t bytes = empty ? 0 : size;
  bool over = false;
  for (std::int64_t dim : out.shape)
    if (!empty && !over && bytes > std::numeric_limits<std::int64_t>::max() / dim)
      over = true;
    else if (!empty && !over)
      bytes *= dim;
  const auto offsets = e.find("data_offsets");
  if (offsets == e.end() || !offsets->is_array() || offsets->size() != 2)
    fail(source, t, ": no \"data_offsets\" array of two integers");
  out.begin = non_negative((*offsets)[0], source, t + ": data_offsets begin");
  out.end = non_negative((*offsets)[1], source, t + ": data_offsets end");
  if (out.begin > out.end) fail(source, t, ": data_offsets [", out.begin, ", ", out.end, "] are reversed");
  if (out.end > data_size)
    fail(source, t, ": data_offsets [", out.begin, ", ", out.end, "] run past the ", data_size, " data bytes");
  const std::int64_t given = out.end - out.begin;
  if (over || bytes != given)
    fail(source, t, ": shape ", nlohmann::json(out.shape).dump(), " of ", out.dtype, " needs ",
         over ? std::string("more than 2^63") : std::to_string(bytes), " bytes but data_offsets give ", given);
  return out;
}

// Every data byte belongs to exactly one tensor: sorted by range, each starts where the
// previous ended, the first at 0 and the last ends at data_size.
inline void check_coverage(const SafetensorsFile& f, std::int64_t data_size) {
  std::vector<std::pair<const std::string*, const SafetensorsTensor*>> order;
  for (const auto& [name, t] : f.tensors) order.emplace_back(&name, &t);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  std::int64_t at = 0;
  const std::string* prev = nullptr;
  for (const auto& [name, t] : order) {
    if (t->begin < at)
      fail(f.source, "tensors '", *prev, "' and '", *name, "' overlap (", *name, " begins at ", t->begin, ", before ",
           at, ")");
    if (t->begin > at)
      fail(f.source, "a hole: data bytes [", at, ", ", t->begin, ") ", prev ? "after '" + *prev + "'" : "at the start",
           " belong to no tensor");
    at = t->end;
    prev = name;
  }
  if (at != data_size) fail(f.source, "a hole: data bytes [", at, ", ", data_size, ") at the end belong to no tensor");
}

}  // namespace detail::st

// Parses and validates a safetensors file held in `bytes` (see the top for what is checked);
// `source` names it in errors. The result's tensors view `bytes`: keep it alive while using
// them. Throws FormatError; O(bytes + header).
inline SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, std::string source) {
  namespace st = detail::st;
  SafetensorsFile f;
  f.source = std::move(source);
  if (bytes.size() < 8)
    st::fail(f.source, "the file is ", bytes.size(), " bytes, shorter than the 8-byte header length");
  const auto n = st::get_le<std::uint64_t>(bytes.data(), 0);
  if (n > kSafetensorsMaxHeader)
    st::fail(f.source, "header length ", n, " is absurdly large (limit ", kSafetensorsMaxHeader, ")");
  if (n > bytes.size() - 8)
    st::fail(f.source, "header length ", n, " runs past the end of the file (", bytes.size() - 8,
             " bytes follow the length)");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  const nlohmann::json header = st::parse_header(text, f.source);
  const std::span<const std::byte> data = bytes.subspan(8 + n);
  const auto data_size = static_cast<std::int64_t>(data.size());
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) st::fail(f.source, "__metadata__ is not a JSON object (it is a ", e.type_name(), ")");
      for (const auto& [k, v] : e.items()) {
        if (!v.is_string())
          st::fail(f.source, "__metadata__ '", k, "' is not a string (it is a ", v.type_name(), ": ", v.dump(), ")");
        f.metadata.emplace(k, v.get<std::string>());
      }
      continue;
    }
    SafetensorsTensor t = st::parse_entry(name, e, data_size, f.source);
    t.data = data.subspan(static_cast<std::size_t>(t.begin), static_cast<std::size_t>(t.end - t.begin));
    f.tensors.emplace(name, std::move(t));
  }
  st::check_coverage(f, data_size);
  return f;
}

// The bytes of a safetensors file holding `tensors` in the order given (data contiguous, no
// holes) and `metadata` as __metadata__ (omitted when empty); the header is padded with spaces
// to a multiple of 8 bytes. Throws ArgumentError for a repeated or "__metadata__" name, an
// unknown dtype, a negative dimension or data whose size disagrees with shape x dtype size.
// O(total bytes).
inline std::vector<std::byte> encode_safetensors_tensors(const std::vector<SafetensorsEntry>& tensors,
                                                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::int64_t at = 0;
  for (const SafetensorsEntry& t : tensors) {
    const char* fn = "encode_safetensors_tensors";
    if (t.name == "__metadata__" || header.contains(t.name))
      throw ArgumentError(detail::message(fn, ": tensor name '", t.name, "' repeated or reserved"));
    std::int64_t n = detail::st::dtype_size(t.dtype);
    if (n == 0) throw ArgumentError(detail::message(fn, ": tensor '", t.name, "': unknown dtype '", t.dtype, "'"));
    for (std::int64_t d : t.shape) {
      if (d < 0) throw ArgumentError(detail::message(fn, ": tensor '", t.name, "': negative dimension ", d));
      n *= d;
    }
    if (n != std::ssize(t.data))
      throw ArgumentError(detail::message(fn, ": tensor '", t.name, "': ", t.data.size(), " bytes for ", n));
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + n}}};
    at += n;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<std::byte> out;
  out.reserve(8 + text.size() + static_cast<std::size_t>(at));
  detail::st::put_le<std::uint64_t>(out, text.size());
  const auto* h = reinterpret_cast<const std::byte*>(text.data());
  out.insert(out.end(), h, h + text.size());
  for (const SafetensorsEntry& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

}  // namespace sprig
