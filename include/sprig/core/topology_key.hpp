// sprig/core/topology_key.hpp — a name for one topology of one PaddedCSR object that no
// other object, and no earlier topology of the same object, ever shares in the process: the
// key of every cache derived from a matrix's structure (row partition, W^T, column-block
// bounds). A topology_version alone is not enough: two matrices built alike have equal
// versions, and a cache built from one would serve the other.
#pragma once

#include <atomic>
#include <cstdint>

namespace sprig {

namespace detail {
// A number no other live or past PaddedCSR object has had: a fresh one for every object
// constructed or copied, and for the source of a move (which keeps its own no longer), so
// (instance, topology_version) names one topology for the whole process.
class InstanceId {
public:
  InstanceId() noexcept : id_(next()) {}
  InstanceId(const InstanceId&) noexcept : id_(next()) {}
  InstanceId(InstanceId&& other) noexcept : id_(other.id_) { other.id_ = next(); }
  InstanceId& operator=(const InstanceId&) noexcept {
    id_ = next();
    return *this;
  }
  InstanceId& operator=(InstanceId&& other) noexcept {
    id_ = other.id_;
    other.id_ = next();
    return *this;
  }
  std::uint64_t value() const noexcept { return id_; }

private:
  static std::uint64_t next() noexcept {
    static std::atomic<std::uint64_t> counter{0};
    return counter.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  std::uint64_t id_;
};
}  // namespace detail

// (instance, topology_version) of a PaddedCSR (PaddedCSR::topology_key).
struct TopologyKey {
  std::uint64_t instance = 0;
  std::uint64_t version = 0;
  bool operator==(const TopologyKey&) const = default;
};

}  // namespace sprig
