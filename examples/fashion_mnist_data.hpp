// examples/fashion_mnist_data.hpp — the Fashion-MNIST data set for the examples: where
// Debian's dataset-fashion-mnist package puts it and a loader built on sprig's generic IDX
// reader (sprig/data/idx.hpp). Example code, not part of the library: a program that trains on
// other data reads it with sprig::read_idx / sprig::load_idx_images or its own loader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include <sprig/core/error.hpp>
#include <sprig/data/idx.hpp>

namespace examples {

// The two splits, images example-major with values in [0, 1] (sprig::LabeledImages).
template <sprig::Value T>
struct FashionMNIST {
  static constexpr std::int32_t num_classes = 10;
  sprig::LabeledImages<T> train;  // 60000 images of 28 x 28
  sprig::LabeledImages<T> test;   // 10000 images of 28 x 28
};

// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* kFashionMNISTDir = "/usr/share/datasets/fashion-mnist";

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir` (the .gz name is tried
// first, then the plain one). Checks 28 x 28 images and labels below 10; the example counts
// are whatever the files hold (60000 / 10000 for the real data set). O(file bytes); throws
// sprig::FormatError naming the path for a missing file, what sprig::load_idx_images throws,
// and for images that are not 28 x 28.
template <sprig::Value T = float>
FashionMNIST<T> load_fashion_mnist(const std::filesystem::path& dir = kFashionMNISTDir) {
  auto pick = [&](const std::string& stem) {
    const auto gz = dir / (stem + ".gz");
    std::error_code ec;
    if (std::filesystem::exists(gz, ec)) return gz;
    const auto plain = dir / stem;
    if (std::filesystem::exists(plain, ec)) return plain;
    throw sprig::FormatError(sprig::detail::message("load_fashion_mnist: neither '", gz.string(), "' nor '",
                                                    plain.string(),
                                                    "' exists (Debian: apt-get install dataset-fashion-mnist)"));
  };
  auto load = [&](const char* prefix) {
    const auto images_path = pick(std::string(prefix) + "-images-idx3-ubyte");
    auto set = sprig::load_idx_images<T>(images_path, pick(std::string(prefix) + "-labels-idx1-ubyte"),
                                         FashionMNIST<T>::num_classes);
    if (set.height != 28 || set.width != 28)
      throw sprig::FormatError(sprig::detail::message("load_fashion_mnist: '", images_path.string(), "' holds ",
                                                      set.height, " x ", set.width, " images, expected 28 x 28"));
    return set;
  };
  FashionMNIST<T> out;
  out.train = load("train");
  out.test = load("t10k");
  return out;
}

}  // namespace examples
