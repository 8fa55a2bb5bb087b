// tests/file_test_support.hpp — what the tests that write files share: a scratch directory
// removed at scope exit, and a matcher on an exception's message.
#pragma once

#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace sprig::test {

// Matches an exception whose what() contains the given text.
struct WhatHas : Catch::MatcherBase<std::exception> {
  std::string text;
  explicit WhatHas(std::string t) : text(std::move(t)) {}
  bool match(const std::exception& e) const override { return std::string(e.what()).find(text) != std::string::npos; }
  std::string describe() const override { return "has a message containing \"" + text + "\""; }
};

// A fresh, empty directory under the system temp dir (named <prefix>XXXXXX), removed with
// everything in it at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "sprig_test_") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  // The names of the entries in the directory, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

}  // namespace sprig::test
