// sprig/dst/top_k.hpp — a streaming top-k of scored matrix positions.
//
// Keeps the k positions with the largest score seen so far in a min-heap, O(log k) per
// accepted push and O(1) per rejected one, so scores can be streamed block by block and never
// stored whole. Order is total and deterministic: larger score first, then smaller linear
// position (row * cols + col) first, so the result does not depend on the streaming order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace sprig::dst {

struct ScoredPosition {
  double score;
  std::int64_t row;
  std::int64_t col;
};

class TopK {
public:
  TopK(std::int64_t k, std::int64_t cols) : k_(std::max<std::int64_t>(0, k)), cols_(cols) {
    heap_.reserve(static_cast<std::size_t>(k_));
  }

  // Offers one position; NaN scores are never selected.
  void push(double score, std::int64_t row, std::int64_t col) {
    if (k_ == 0 || std::isnan(score)) return;
    const ScoredPosition p{score, row, col};
    if (std::ssize(heap_) < k_) {
      heap_.push_back(p);
      std::push_heap(heap_.begin(), heap_.end(), worse_on_top());
    } else if (better(p, heap_.front())) {
      std::pop_heap(heap_.begin(), heap_.end(), worse_on_top());
      heap_.back() = p;
      std::push_heap(heap_.begin(), heap_.end(), worse_on_top());
    }
  }

  // The score a new position must reach to enter: -inf while fewer than k are held, +inf
  // when k is 0 (nothing can enter).
  double threshold() const noexcept {
    if (k_ == 0) return INFINITY;
    return std::ssize(heap_) < k_ ? -INFINITY : heap_.front().score;
  }
  std::int64_t k() const noexcept { return k_; }
  std::int64_t size() const noexcept { return std::ssize(heap_); }

  // The selected positions, best first.
  std::vector<ScoredPosition> sorted() const {
    std::vector<ScoredPosition> out = heap_;
    std::sort(out.begin(), out.end(), [this](const ScoredPosition& a, const ScoredPosition& b) { return better(a, b); });
    return out;
  }

private:
  bool better(const ScoredPosition& a, const ScoredPosition& b) const noexcept {
    if (a.score != b.score) return a.score > b.score;
    return a.row * cols_ + a.col < b.row * cols_ + b.col;
  }
  // std heap functions keep the "largest" on top; ordering by better() puts the worst there.
  struct WorseOnTop {
    const TopK* self;
    bool operator()(const ScoredPosition& a, const ScoredPosition& b) const noexcept { return self->better(a, b); }
  };
  WorseOnTop worse_on_top() const noexcept { return {this}; }

  std::int64_t k_;
  std::int64_t cols_;
  std::vector<ScoredPosition> heap_;
};

}  // namespace sprig::dst
